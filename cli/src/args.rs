//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Benchmark, check, inspect and repair a2 session stores.
///
/// A store is named by a URL: `memory:` (in-memory, empty at every start),
/// `sqlite:PATH` (a SQLite file; options after `?`, e.g.
/// `sqlite:app.db?durability=full&busy_timeout_ms=5000&pool_size=4`),
/// `sqlite::memory:`, or `postgres://USER@HOST:PORT/DB` (options
/// `schema=NAME`, `pool_size=N`, `statement_timeout_ms=N`).
///
/// The URL of `check`, `inspect`, `redrive`, `clear`, `reclaim`, `pause`,
/// `resume`, `fork`, `reschedule`, `delete`, `prune` and `console` may be omitted when the environment variable `A2_STORE_URL` holds it, e.g.
/// `A2_STORE_URL=sqlite:app.db a2-store inspect sessions`; a URL on the
/// command line wins.
///
/// Exit status: 0 on success, 1 when `check` finds a failing case, 2 on any
/// error (bad arguments, a store that cannot be opened, a failed call).
#[derive(Debug, Parser)]
#[command(name = "a2-store", version, about, long_about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark stores: the fixed workload mix side by side, or a cross-session worker workload.
    ///
    /// Workload `mix` (the default), per session, repeated until time is up: append a batch of 4
    /// `msg` events targeted at the FIFO lanes `agent/lane-0` and
    /// `agent/lane-1` plus one `ping` targeted at the event cursor of
    /// `notifier`; then claim and work until the session settles: lane heads
    /// complete with a `reply` event, event heads complete empty, and the log
    /// consumer `audit` (lane `audit`, types `msg` and `reply`) follows the
    /// whole log. Every 5th head fails its first attempt and is retried
    /// (retry delay 0). Every 8 rounds the session is cleared and reclaimed.
    /// Sessions run concurrently, one task each.
    ///
    /// With no URL, runs `memory:` and a SQLite file in a temporary directory
    /// (removed afterwards). A URL you give is written to: sessions named
    /// `a2-bench-*` are created there, so point it at a scratch database.
    ///
    /// The worker workloads run workers looping on `claim_work` (waiting up
    /// to --wait-ms) that complete every head they claim, serving the FIFO
    /// lanes of consumer `agent`. Against SQLite and PostgreSQL each worker
    /// is a process of its own (this binary, started by the bench); against
    /// `memory:` workers are tasks of this process. Latencies are append to
    /// claim: the producer stamps each message with the wall-clock time
    /// before its append, the worker subtracts it from the time its claim
    /// returned.
    ///
    /// `--workload runtime`: --sessions sessions (200) exist; a producer
    /// appends --rate messages a second (200) for --seconds (10), round
    /// robin over the sessions and --lanes lanes (2), and every
    /// --new-every-th message (10th) to a brand new session; --workers
    /// workers (3) claim. Before that it appends for --warm-up seconds (1)
    /// to the sessions, messages that are claimed but not counted, so the
    /// figures are those of a runtime that has been running. Reports
    /// append→claim p50/p99 of every message and of new sessions' first
    /// messages.
    ///
    /// `--workload idle`: --sessions sessions (2,000) whose work is all
    /// done; --workers workers (3) wait for --seconds (10). Reports each
    /// worker's CPU as % of one core (from /proc; n/a elsewhere or for
    /// in-process workers) and its store calls per second.
    ///
    /// `--workload fairness`: --sessions small sessions (199) receive one
    /// message each at --rate (200/s), once beside a session holding a
    /// --backlog (10,000) event backlog on one lane and once without it,
    /// each after --warm-up seconds (1) of messages to other new sessions,
    /// claimed but not counted. Reports the small sessions' append→claim
    /// p99 of both runs and their ratio.
    ///
    /// `--workload worker`: the producer and sessions of `runtime`, but each
    /// worker runs the `a2-worker` runtime (`a2_store::worker::Worker`, up
    /// to --max-in-flight heads at once, claim wait --wait-ms) with a
    /// handler that records when it starts and completes with no events.
    /// Reports messages handled per second and append→handler start
    /// p50/p99 of every message and of new sessions' first messages.
    ///
    /// Worker workloads never touch the data of a URL you give: like
    /// `check`, each run gets a scratch database of that backend (SQLite: a
    /// new file in a temporary directory beside PATH, same options;
    /// PostgreSQL: a new schema `a2_bench_*`, dropped afterwards). With no
    /// URL they run `memory:` and SQLite files in a temporary directory,
    /// with normal and with full durability.
    Bench(BenchArgs),
    /// Internal: one worker process of a `bench` worker workload.
    #[command(name = "bench-worker", hide = true)]
    BenchWorker(BenchWorkerArgs),
    /// Run the conformance suite against the backend a URL names, on a fresh scratch database.
    ///
    /// For `sqlite:PATH` the scratch files are created in a temporary directory
    /// beside PATH (so the same filesystem is tested) and removed afterwards;
    /// PATH itself is never opened. For PostgreSQL each case runs on a new
    /// schema `a2_check_*` of that server, dropped afterwards. Prints each case
    /// as ok, FAILED or skipped and exits with status 1 when any case fails.
    Check(CheckArgs),
    /// Look inside a store: sessions, a log, cursors, presence, and work, dead letters and blocked lanes across sessions.
    Inspect(InspectArgs),
    /// Retry or skip a dead-lettered head, or with --all every dead letter a filter keeps.
    ///
    /// `redrive URL SESSION CONSUMER INDEX [--lane L] --retry|--skip`
    /// redrives one head (with --lane exactly that lane's; without, the
    /// consumer's first dead letter at the index, the event cursor first).
    /// `redrive URL --all [--consumer C] [--session S] [--lane L]
    /// [--older-than D] [--limit N] --retry|--skip` lists the dead letters
    /// the filters keep; it changes them only with --yes (--dry-run: list
    /// only; with neither it lists them and exits with status 2 saying which
    /// to pass). With --yes the store redrives every dead letter the filters
    /// keep at that moment, one atomic `redrive_all` per page of at most 100
    /// (per consumer and session named), and the command prints the heads it
    /// changed: dead letters gone since the preview are not touched, ones
    /// that appeared since are redriven too.
    Redrive(RedriveArgs),
    /// Clear a session: append the `a2.cleared` marker, dropping its pending work.
    ///
    /// Needs --yes, or --if-last-index N to clear only the state you looked
    /// at. A session that does not exist is refused (nothing is created).
    Clear(ClearArgs),
    /// Delete the rows below a session's clear marker.
    ///
    /// A session that does not exist is refused.
    Reclaim(ReclaimArgs),
    /// Pause a consumer in one session or in every session: its heads are not claimed.
    ///
    /// Until `resume`, or until --until-ms T (ms since the epoch) or --for
    /// DURATION from now. Leases already held run to their end. Pausing the
    /// same scope again replaces its pause. In one session (--session) the
    /// consumer must have a cursor there; without --session any name may be
    /// paused, even before its first event.
    Pause(PauseArgs),
    /// Lift a consumer's pause in one session (--session) or its store-wide pause.
    ///
    /// Each scope is lifted on its own: resuming in a session leaves a
    /// store-wide pause in force, and the other way round.
    Resume(ResumeArgs),
    /// Copy a session's log into a new session, through an index (default: its head).
    ///
    /// The copy keeps ids, types, payloads, times and causes; it gets no
    /// cursors, snapshots or presence, and `inspect sessions` shows where it
    /// came from. INTO must never have been written to.
    Fork(ForkArgs),
    /// Move a head that has not run to another time, or cancel it.
    ///
    /// Names a cursor's head, or an index queued on a lane behind its head
    /// (`--lane`; without it, the consumer's event cursor at INDEX). --at-ms
    /// T or --in DURATION moves it (a time already reached: claimable now);
    /// --cancel drops it as a skip would (no completion recorded). A head
    /// that has been claimed is `started` and one the cursor has passed is
    /// `gone`: nothing changes and the exit status is 2.
    Reschedule(RescheduleArgs),
    /// Delete a session and every row it holds, after showing what will go.
    ///
    /// Prints the session's head, the events still stored, its cursors, the
    /// heads with work and who holds them, dead letters, live presence and
    /// pauses; then asks for confirmation on a terminal (without --yes, and
    /// with stdin not a terminal, it refuses and changes nothing). A head
    /// that still has work (leased, claimable, waiting or scheduled) refuses
    /// the delete unless --force, which ends it; dead letters never do.
    /// After a confirmation at the prompt the delete applies only if the
    /// session still ends at the head shown (as --if-last-index would).
    /// Snapshots, pins, presence and pauses of the session go too; forks keep
    /// their copy. The id can be used again at once: nothing from before the
    /// delete (a late completion, a renewal) reaches the new session.
    Delete(DeleteArgs),
    /// Delete the sessions idle for a while that have nothing left to do.
    ///
    /// A session is idle when nothing was appended to it for --idle; it is
    /// deleted when no head has work left (leased, claimable, waiting or
    /// scheduled) and no head is dead-lettered (unless
    /// --include-dead-letters). Runs page after page (--limit idle sessions
    /// examined per page, oldest activity first) until no idle session is
    /// left, with a progress count on a terminal, and prints each session
    /// and the totals. Expired presence fields and unpinned snapshot
    /// checkpoints are removed on the way. --dry-run lists what would go and
    /// deletes nothing; run it first. Safe to run from cron: a session
    /// that gets work meanwhile is kept.
    Prune(PruneArgs),
    /// Serve the web console: sessions, timelines, dead letters and repairs in a browser.
    ///
    /// Opens the store and serves the console (`a2-store-console`) on
    /// --listen (default 127.0.0.1:7800), printing the address. Read-only
    /// unless --allow-writes (the store itself is then opened read-only
    /// too). On an address that is not loopback it refuses to start
    /// without a token (--token-file or --token-env): the browser then
    /// logs in at /login with one of them, and scripts send `Authorization:
    /// Bearer TOKEN`. Tokens are never printed; the log names an operator
    /// by the token's id. For a PostgreSQL store the health page shows the
    /// schema's tables and oldest transaction. Stops on Ctrl-C or SIGTERM,
    /// giving open requests a few seconds to end.
    Console(ConsoleArgs),
    /// Re-encrypt stored payloads under the current key, so old keys can be retired.
    ///
    /// Needs the keys (--keys env:VAR|file:PATH or the URL's keys=): every
    /// key rows still name, the last entry being the current one. Rewrites
    /// event payloads, presence values and the latest snapshot of each
    /// --reducer (the store cannot list reducers) that are not under the
    /// current key, --page events per call, each page compare-and-set:
    /// a row changed meanwhile is read again, nothing is lost. Plain rows
    /// (written before encryption was on) are encrypted too unless
    /// --keep-plaintext. Every session, or the --session ones. Safe to stop
    /// and run again: it continues where rows are still old. With the
    /// offload layer (--offload DIR or offload=), large payloads are
    /// rewritten there too; the old objects stay until a sweep.
    Reencrypt(ReencryptArgs),
}

/// Arguments of `console`.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7800", value_parser = parse_listen)]
    pub listen: std::net::SocketAddr,
    /// Allow the repair actions (redrive, pause, resume, reschedule, fork, clear, delete).
    #[arg(long)]
    pub allow_writes: bool,
    /// A file of access tokens, one per line (blank lines ignored); required off loopback.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// An environment variable holding an access token.
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// Never show event payloads, snapshots or presence values (only their size).
    #[arg(long)]
    pub hide_payloads: bool,
    /// Encryption keys and offloaded payloads.
    #[command(flatten)]
    pub payloads: PayloadArgs,
    /// A consumer the overview and the work listings show (repeat for several). The store
    /// keeps no list of consumers: name them here, or pages take `?consumer=NAME`.
    #[arg(long = "consumer", value_name = "NAME")]
    pub consumers: Vec<String>,
}

/// Arguments of `delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The session.
    pub session: String,
    /// Also end the heads that still have work (leased, claimable, waiting, scheduled).
    #[arg(long)]
    pub force: bool,
    /// Delete without asking (required when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,
    /// Delete only if the session's last index is exactly N.
    #[arg(long, value_name = "N")]
    pub if_last_index: Option<u64>,
    /// Print the preview and what was removed as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// How long nothing was appended to a session for it to be idle (e.g. `30d`, `12h`).
    #[arg(long, value_name = "DURATION", value_parser = parse_idle)]
    pub idle: std::time::Duration,
    /// Only list what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
    /// Idle sessions examined per page (1 to 1000) [default: 100].
    #[arg(long, value_name = "N", value_parser = parse_page)]
    pub limit: Option<usize>,
    /// Also delete idle sessions whose only heads are dead-lettered (by
    /// default a dead letter keeps its session for an operator to look at).
    #[arg(long)]
    pub include_dead_letters: bool,
    /// Print the sessions and totals as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `reencrypt`.
#[derive(Debug, Args)]
pub struct ReencryptArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// Only this session (repeat for several); every session when omitted.
    #[arg(long = "session", value_name = "ID")]
    pub sessions: Vec<String>,
    /// Also re-encrypt the latest snapshot of this reducer (repeat for several).
    #[arg(long = "reducer", value_name = "NAME")]
    pub reducers: Vec<String>,
    /// Events rewritten per call (1 to 1000) [default: 500].
    #[arg(long, value_name = "N", value_parser = parse_page)]
    pub page: Option<usize>,
    /// Leave rows stored as plain JSON as they are.
    #[arg(long)]
    pub keep_plaintext: bool,
    /// The keys (required) and the offload directory.
    #[command(flatten)]
    pub payloads: PayloadArgs,
    /// Print the totals as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Stores to compare (default: `memory:` and a SQLite file in a temporary
    /// directory; for worker workloads two, with normal and full durability).
    #[arg(value_name = "URL")]
    pub urls: Vec<String>,
    /// What to run.
    #[arg(long, value_enum, default_value_t = Workload::Mix)]
    pub workload: Workload,
    /// How long to run against each store, in seconds [default: 3 for mix,
    /// 10 for runtime, worker and idle; fairness runs until every message is claimed].
    #[arg(long, value_parser = parse_seconds)]
    pub seconds: Option<f64>,
    /// How many sessions [default: mix 8 running concurrently; runtime and worker 200;
    /// idle 2000; fairness 199 small ones].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub sessions: Option<u32>,
    /// Worker processes (tasks against `memory:`) claiming work [worker workloads].
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Messages the producer appends per second [runtime, worker, fairness].
    #[arg(long, default_value_t = 200.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Every Nth message goes to a brand new session; 0: never [runtime, worker].
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub new_every: u32,
    /// Seconds the producer runs before the timed part, its messages not
    /// counted: connections, statement caches and the server's plans are
    /// warm when timing starts, as in a runtime that has been running; 0:
    /// none [runtime, worker, fairness].
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = parse_warm_up)]
    pub warm_up: f64,
    /// FIFO lanes of consumer `agent` per session, used in turn [runtime, worker].
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub lanes: u32,
    /// How long one `claim_work` call waits for work, ms [worker workloads].
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(i64).range(1..=300_000))]
    pub wait_ms: i64,
    /// Heads one `claim_work` call claims at most [runtime, idle, fairness].
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub claim_limit: u32,
    /// Heads each worker processes at once (the `a2-worker` default) [worker].
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_in_flight: u32,
    /// Events waiting in the one big session [fairness].
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub backlog: u32,
    /// After producing, how long to wait at most for the workers to claim
    /// every message, in seconds [runtime, worker, fairness].
    #[arg(long, default_value_t = 60.0, value_parser = parse_seconds)]
    pub drain_seconds: f64,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print the results as CSV on stdout instead of the table (one row per backend and operation) [mix].
    #[arg(long)]
    pub csv: bool,
}

/// The workloads of `bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// The fixed per-session mix of every operation, stores side by side.
    Mix,
    /// Paced producer, worker processes on `claim_work`: append→claim latency.
    Runtime,
    /// Waiting workers with nothing to do: CPU and store calls.
    Idle,
    /// Small sessions beside one big backlog: append→claim p99 with and without it.
    Fairness,
    /// Runtime's paced producer, workers running `a2-worker`: append→handler start.
    Worker,
}

/// What a bench worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Runner {
    /// A loop on `claim_work` completing every head it claims.
    #[default]
    Loop,
    /// The `a2-worker` runtime with a handler that records its start.
    A2Worker,
}

impl Runner {
    /// Its name on the command line.
    pub fn as_arg(self) -> &'static str {
        match self {
            Self::Loop => "loop",
            Self::A2Worker => "a2-worker",
        }
    }
}

/// Arguments of the hidden `bench-worker` (started by `bench`, which passes
/// the store URL in the environment variable `A2_BENCH_WORKER_URL`, so a
/// password never shows in the process list).
#[derive(Debug, Args)]
pub struct BenchWorkerArgs {
    /// This worker's number (its holder is `a2-bench-worker-N`).
    #[arg(long)]
    pub worker: u32,
    /// How long one `claim_work` call waits, ms.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=300_000))]
    pub wait_ms: i64,
    /// Heads one `claim_work` call claims at most [loop].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub claim_limit: u32,
    /// What the worker runs.
    #[arg(long, value_enum, default_value_t = Runner::Loop)]
    pub runner: Runner,
    /// Heads processed at once [a2-worker].
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_in_flight: u32,
    /// Open this SQLite file instead of the URL's path.
    #[arg(long, conflicts_with = "schema")]
    pub sqlite_file: Option<PathBuf>,
    /// Open this PostgreSQL schema instead of the URL's.
    #[arg(long)]
    pub schema: Option<String>,
}

/// Arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The backend to check (its data is never touched); `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// Run only the cases whose name contains TEXT (e.g. `--only append`).
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The store to read (opened read-only); `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Encryption keys and offloaded payloads.
    #[command(flatten)]
    pub payloads: PayloadArgs,
    /// What to show.
    #[command(subcommand)]
    pub what: InspectCommand,
}

/// How `inspect` and `console` read encrypted and offloaded payloads.
///
/// Without keys an encrypted payload shows as `encrypted (key k2)`, and a
/// payload of a key that was not given too; without the offload directory
/// an offloaded one shows as `offloaded (N bytes, sha256 …)`. The URL's own
/// `keys=` and `offload=` work the same (give each once).
#[derive(Debug, Clone, Default, Args)]
pub struct PayloadArgs {
    /// Decrypt payloads with the keys in environment variable VAR
    /// (`env:VAR`, e.g. env:A2_STORE_KEYS) or in a file (`file:PATH`, one
    /// kid:<base64> per line). Never a key itself.
    #[arg(long, global = true, value_name = "env:VAR|file:PATH")]
    pub keys: Option<String>,
    /// Fetch offloaded payloads from this directory (read-only; it must exist).
    #[arg(long, global = true, value_name = "DIR")]
    pub offload: Option<PathBuf>,
}

/// What `inspect` shows.
#[derive(Debug, Subcommand)]
pub enum InspectCommand {
    /// Sessions with at least one event, by id.
    Sessions {
        /// Only sessions whose id sorts after this one.
        #[arg(long, value_name = "SESSION")]
        after: Option<String>,
        /// At most this many sessions.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// A session's events in log order.
    Log {
        /// The session.
        session: String,
        /// Only events with an index above this one.
        #[arg(long, value_name = "N")]
        after: Option<u64>,
        /// At most this many events.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// A session's unfinished cursors with their dispatch bookkeeping.
    Cursors {
        /// The session.
        session: String,
    },
    /// Sessions with work, per consumer, the one waiting longest first.
    ///
    /// One row per session and consumer with claimable, busy or
    /// dead-lettered heads: how many of each, since when the claimable work
    /// has waited (`ready since`), and when the first busy lease or retry
    /// delay ends. Rows with claimable work come first, longest waiting
    /// first; then busy ones by their next expiry; then those holding only
    /// dead letters. Reads every session with work of the consumers.
    ///
    /// Without --consumer, the consumers are found by reading the cursors of
    /// every session (a store keeps no list of consumers; a note on stderr
    /// says so): name them to skip that scan.
    Work {
        /// Look at this consumer's work (repeat for several; default: every
        /// consumer with a cursor, found by a scan).
        #[arg(long = "consumer", value_name = "C")]
        consumers: Vec<String>,
        /// Show at most N rows (the longest waiting).
        #[arg(long, value_name = "N", value_parser = parse_limit)]
        limit: Option<usize>,
    },
    /// Dead-lettered heads: of one session, or of the whole store, paged by session.
    ///
    /// With SESSION: that session's dead letters. Without: every dead
    /// letter in the store, by session id, at most --limit sessions a page
    /// (each with all its dead letters); a page that is not the last says
    /// which --after continues it. For each head, `behind` says how many
    /// events wait behind it on its lane: exact for a log consumer (the
    /// later events of a type it takes), `-` for an event cursor (it holds
    /// only its own event); for a FIFO lane the store does not expose the
    /// queue, so it shows `<=N`, the events after the head in the session's
    /// log, whatever they target (JSON: `waiting_behind` null,
    /// `later_events` N).
    ///
    /// With --consumer only those consumers' dead letters are listed, and only
    /// the sessions the store's work index reports with dead letters are read;
    /// without, every session is read.
    DeadLetters {
        /// The session (omit to list the whole store).
        session: Option<String>,
        /// Only this consumer's dead letters (repeat for several) [whole store].
        #[arg(long = "consumer", value_name = "C", conflicts_with = "session")]
        consumers: Vec<String>,
        /// Only sessions whose id sorts after this one: where the previous page ended [whole store].
        #[arg(long, value_name = "SESSION", conflicts_with = "session")]
        after: Option<String>,
        /// At most N sessions in the page [whole store; default 100].
        #[arg(long, value_name = "N", value_parser = parse_limit, conflicts_with = "session")]
        limit: Option<usize>,
    },
    /// Lanes held by a dead letter: what waits behind each (fix them with `redrive`).
    ///
    /// The dead-lettered heads of FIFO lane and log cursors across the
    /// store, by session id and paged like `dead-letters`: nothing on such a
    /// lane is handed out until its head is retried or skipped. `behind`
    /// counts as in `dead-letters`.
    Blocked {
        /// Only this consumer's lanes (repeat for several).
        #[arg(long = "consumer", value_name = "C")]
        consumers: Vec<String>,
        /// Only sessions whose id sorts after this one: where the previous page ended.
        #[arg(long, value_name = "SESSION")]
        after: Option<String>,
        /// At most N sessions in the page [default 100].
        #[arg(long, value_name = "N", value_parser = parse_limit)]
        limit: Option<usize>,
    },
    /// A session's live presence fields.
    Presence {
        /// The session.
        session: String,
    },
    /// The pauses in force: consumer, session (`*`: every session) and until when.
    Paused,
    /// PostgreSQL only: dead tuples, HOT updates and size per table, and
    /// the server's oldest open transaction (which holds back vacuum).
    ///
    /// Reads the server's statistics views; writes nothing. Other roles'
    /// transactions are visible only to a superuser or a role with
    /// `pg_read_all_stats`.
    Health,
}

/// Arguments of `redrive`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("action").required(true).args(["retry", "skip"]))]
pub struct RedriveArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The session.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub session: Option<String>,
    /// The consumer whose head was dead-lettered.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub consumer: Option<String>,
    /// The dead-lettered head's index.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub index: Option<u64>,
    /// The dead-lettered cursor's lane (one head: exactly that lane's; with
    /// --all: only heads on this lane).
    #[arg(long, value_name = "L")]
    pub lane: Option<String>,
    /// Make the head claimable again (failures reset, attempts kept).
    #[arg(long)]
    pub retry: bool,
    /// Move the cursor past the head as if it had been processed.
    #[arg(long)]
    pub skip: bool,
    /// Redrive every dead letter the filters keep (instead of SESSION
    /// CONSUMER INDEX): prints them, and acts only with --yes.
    #[arg(long)]
    pub all: bool,
    /// With --all: only this consumer's dead letters (repeat for several).
    #[arg(long = "consumer", value_name = "C")]
    pub consumers: Vec<String>,
    /// With --all: only in this session (repeat for several).
    #[arg(long = "session", value_name = "SESSION")]
    pub sessions: Vec<String>,
    /// With --all: only heads dead-lettered at least this long ago (e.g. `30m`, `2h`, `1day`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<std::time::Duration>,
    /// With --all: at most N dead letters (the first by session id, then index).
    #[arg(long, value_name = "N", value_parser = parse_limit)]
    pub limit: Option<usize>,
    /// With --all: redrive what the preview lists.
    #[arg(long, conflicts_with = "dry_run")]
    pub yes: bool,
    /// With --all: only print what would be redriven.
    #[arg(long)]
    pub dry_run: bool,
    /// Print what changed (or would change) as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `clear`.
#[derive(Debug, Args)]
pub struct ClearArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The session.
    pub session: String,
    /// Clear only if the session's last index is exactly N (no --yes needed:
    /// the index says which state you looked at).
    #[arg(long, value_name = "N")]
    pub if_last_index: Option<u64>,
    /// Clear whatever the session holds now (required without --if-last-index).
    #[arg(long)]
    pub yes: bool,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The consumer to pause.
    pub consumer: String,
    /// Pause it in this session only (default: in every session).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Resume by itself at this time, ms since the epoch.
    #[arg(long, value_name = "T", conflicts_with = "for_")]
    pub until_ms: Option<i64>,
    /// Resume by itself this long from now (e.g. `30m`, `2h`).
    #[arg(long = "for", id = "for_", value_name = "DURATION", value_parser = parse_duration)]
    pub for_: Option<std::time::Duration>,
    /// Print the pause as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The consumer to resume.
    pub consumer: String,
    /// Lift its pause in this session (default: its store-wide pause).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The session to copy.
    pub session: String,
    /// The new session (never written to).
    pub into: String,
    /// Copy through this index (default: the session's head).
    #[arg(long, value_name = "N")]
    pub through: Option<u64>,
    /// Print the new session as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `reschedule`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("change").required(true).args(["at_ms", "in_", "cancel"]))]
pub struct RescheduleArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The session.
    pub session: String,
    /// The consumer whose head it is.
    pub consumer: String,
    /// The head's (or queued entry's) index.
    pub index: u64,
    /// The lane cursor's lane (default: the consumer's event cursor).
    #[arg(long, value_name = "L")]
    pub lane: Option<String>,
    /// Make it claimable at this time, ms since the epoch.
    #[arg(long, value_name = "T")]
    pub at_ms: Option<i64>,
    /// Make it claimable this long from now (e.g. `10m`).
    #[arg(long = "in", id = "in_", value_name = "DURATION", value_parser = parse_duration)]
    pub in_: Option<std::time::Duration>,
    /// Drop it: the cursor moves past it (no completion recorded).
    #[arg(long)]
    pub cancel: bool,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `reclaim`.
#[derive(Debug, Args)]
pub struct ReclaimArgs {
    /// The store; `$A2_STORE_URL` when omitted.
    #[arg(value_name = "URL")]
    pub url: String,
    /// The session.
    pub session: String,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(limit) if limit > 0 => Ok(limit),
        _ => Err(format!(
            "'{text}' is not a limit: give a whole number of at least 1, e.g. --limit 50"
        )),
    }
}

/// `console --listen`: an IP address and port.
fn parse_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    text.parse().map_err(|_| {
        format!("'{text}' is not an address to listen on: give IP:PORT, e.g. 127.0.0.1:7800 or [::1]:7800")
    })
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("'{text}' is not a duration ({e}): give e.g. 90s, 30m, 2h or 1day"))
}

/// `prune --idle`: a duration of at least a millisecond.
fn parse_idle(text: &str) -> Result<std::time::Duration, String> {
    let idle = parse_duration(text)?;
    if idle.as_millis() == 0 {
        return Err(format!(
            "'{text}' is no idle time: give at least 1ms, e.g. --idle 30d"
        ));
    }
    Ok(idle)
}

/// `prune --limit` and `reencrypt --page`: 1 to [`a2_store::MAX_PRUNE_LIMIT`] (clap names
/// the flag in its error).
fn parse_page(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(limit) if (1..=a2_store::MAX_PRUNE_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(format!(
            "'{text}' is not a page size: give a whole number from 1 to {}, e.g. 100",
            a2_store::MAX_PRUNE_LIMIT
        )),
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0 => Ok(rate),
        _ => Err(format!(
            "'{text}' is not a rate: give messages per second between 0 and 1000000, e.g. --rate 200"
        )),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 => Ok(seconds),
        _ => Err(format!(
            "'{text}' is not a duration: give seconds between 0 and 86400, e.g. --seconds 5"
        )),
    }
}

/// `--warm-up`: seconds from 0 (no warm-up) to 3600.
fn parse_warm_up(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && (0.0..=3_600.0).contains(&seconds) => Ok(seconds),
        _ => Err(format!(
            "'{text}' is not a warm-up time: give seconds between 0 (none) and 3600, e.g. --warm-up 1"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn seconds_must_be_positive() {
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("NaN").is_err());
        assert!(parse_seconds("soon").is_err());
    }

    #[test]
    fn limits_and_durations_parse() {
        assert_eq!(parse_limit("5"), Ok(5));
        assert!(parse_limit("0").is_err());
        assert!(parse_limit("-1").is_err());
        assert_eq!(
            parse_duration("2h"),
            Ok(std::time::Duration::from_secs(7200))
        );
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn idle_times_and_pages_are_bounded() {
        assert_eq!(
            parse_idle("30d"),
            Ok(std::time::Duration::from_secs(30 * 86_400))
        );
        assert!(parse_idle("0s").is_err());
        assert!(parse_idle("soon").is_err());
        assert_eq!(parse_page("1000"), Ok(1_000));
        assert!(parse_page("0").is_err());
        assert!(parse_page("1001").is_err());
    }

    #[test]
    fn rates_must_be_positive() {
        assert_eq!(parse_rate("200"), Ok(200.0));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("inf").is_err());
    }
}
