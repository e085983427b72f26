//! Side by side with graphile-worker: the same backlog of no-op jobs drained
//! by each side on a fresh database of one PostgreSQL server, alternating
//! the sides round by round, with what each costs the server per job.
//!
//! Run it through `benches/peer/run`, which installs graphile-worker with
//! `npm ci`, builds this example and can start a private cluster with
//! `pg_stat_statements` loaded; `benches/README.md` ("Side by side with
//! graphile-worker") explains the columns. By hand:
//!
//! ```text
//! cargo run --release -p a2-benches --example peer_drain -- \
//!     --url postgres://postgres@127.0.0.1:5432/test --jobs 20000 --sessions 1000 --rounds 3
//! ```
//!
//! Two workloads: `independent` (N jobs spread over S sessions, any order:
//! plain graphile jobs, a2 events targeted at an event consumer) and
//! `serial` (one serial queue per session: a graphile `queueName`, an a2
//! lane). Six sides: graphile-worker 0.18 by default and with its local
//! queue (500) and batched completion, the `a2-worker` (16 in flight, a
//! pool of 16), a hand loop of 16 tasks calling `claim_work` (limit 1) and
//! `complete_attempt`, and the bare queue of `a2_benches::bare_queue`
//! unbatched and batched (16 tasks on plain connections), all at
//! concurrency 16. Every run gets its own database (`a2peer_<uuid>`, made
//! with `CREATE DATABASE`, dropped afterwards); the jobs are enqueued
//! before the clock starts; the clock runs from the side's start (its first
//! connection) until every job is done. The server's counters are read
//! around the drain: the database's committed transactions, the WAL
//! written (server-wide), and with `pg_stat_statements` the statements run
//! in the database.
//!
//! Every run checks that each job was handled exactly once and nothing is
//! left; the program exits 1 when one did not (it asserts nothing about
//! speed).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Display;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use a2_benches::bare_queue::BareQueue;
use a2_benches::settings;
use a2_store_api::{
    AppendOptions, ClaimWorkRequest, CompleteRequest, ConsumerDeclaration, ListWork, NewEvent,
    Store, Target,
};
use a2_store_postgres::scratch::fresh_schema_name;
use a2_store_postgres::{PostgresOptions, PostgresStore};
use a2_worker::{handler_fn, Job, Worker};
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_postgres::{Client, NoTls};

/// Jobs in flight on every side: graphile's `concurrentJobs`, the
/// a2-worker's `max_in_flight` and pool, the tasks of the loops.
const CONCURRENCY: usize = 16;
/// The a2 consumer the jobs are targeted at.
const CONSUMER: &str = "agent";
/// The lane of the serial workload (one per session).
const LANE: &str = "main";
/// Events per append while enqueueing for a2.
const APPEND_BATCH: usize = 500;
/// Prefix of the databases this program creates.
const DB_PREFIX: &str = "a2peer_";
/// Queries that only end or begin transactions (counted as transactions),
/// as a PostgreSQL regular expression (where `\y`, not `\b`, is a word
/// boundary: `\b` is a backspace there, which let every `BEGIN` and
/// `COMMIT` through into the statements per job until this was found).
const TX_CONTROL: &str = r"^\s*(begin|commit|rollback|end|start\s+transaction)\y";

type Res<T> = Result<T, String>;

/// `context: error` for any displayable error.
trait Context<T> {
    fn ctx(self, what: &str) -> Res<T>;
}

impl<T, E: Display> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Res<T> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    GraphileDefault,
    GraphileBatched,
    A2Worker,
    A2HandLoop,
    Bare,
    BareBatched,
}

impl Side {
    const ALL: [Side; 6] = [
        Side::GraphileDefault,
        Side::GraphileBatched,
        Side::A2Worker,
        Side::A2HandLoop,
        Side::Bare,
        Side::BareBatched,
    ];

    fn key(self) -> &'static str {
        match self {
            Side::GraphileDefault => "graphile",
            Side::GraphileBatched => "graphile-batched",
            Side::A2Worker => "a2-worker",
            Side::A2HandLoop => "a2-hand",
            Side::Bare => "bare",
            Side::BareBatched => "bare-batched",
        }
    }

    fn name(self, batch: usize) -> String {
        match self {
            Side::GraphileDefault => "graphile-worker, default".into(),
            Side::GraphileBatched => "graphile-worker, localQueue 500 + batched completion".into(),
            Side::A2Worker => "a2-worker (16 in flight, pool 16)".into(),
            Side::A2HandLoop => "a2 hand loop (16 × claim_work 1 + complete_attempt)".into(),
            Side::Bare => "bare queue, unbatched".into(),
            Side::BareBatched => format!("bare queue, batched (k = {batch})"),
        }
    }

    fn bare(self, batch: usize, workload: Workload) -> BareQueue {
        BareQueue {
            batch: if self == Side::BareBatched { batch } else { 1 },
            serial: workload == Workload::Serial,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Workload {
    Independent,
    Serial,
}

impl Workload {
    const ALL: [Workload; 2] = [Workload::Independent, Workload::Serial];

    fn key(self) -> &'static str {
        match self {
            Workload::Independent => "independent",
            Workload::Serial => "serial",
        }
    }

    fn target(self) -> Target {
        match self {
            Workload::Independent => Target::event(CONSUMER),
            Workload::Serial => Target::lane(CONSUMER, LANE),
        }
    }
}

struct Config {
    /// The server's URL (any database the user may connect to), TLS off.
    url: String,
    jobs: u64,
    sessions: u64,
    rounds: usize,
    batch: usize,
    /// Where `graphile.mjs` and its `node_modules` are.
    graphile_dir: PathBuf,
    node: String,
    sides: Vec<Side>,
    workloads: Vec<Workload>,
    /// Print, for each side and round, the statements run most per job
    /// (needs `pg_stat_statements`).
    breakdown: bool,
}

const USAGE: &str = "usage: peer_drain [--url URL] [--jobs N] [--sessions S] [--rounds R] \
    [--batch K] [--graphile-dir DIR] [--node PATH] [--sides a,b,..] [--workloads independent,serial] \
    [--breakdown]\n\
    sides: graphile, graphile-batched, a2-worker, a2-hand, bare, bare-batched; \
    the URL defaults to A2_POSTGRES_URL";

fn parse() -> Res<Config> {
    let mut config = Config {
        url: std::env::var("A2_POSTGRES_URL").unwrap_or_default(),
        jobs: 20_000,
        sessions: 1_000,
        rounds: 3,
        batch: 16,
        graphile_dir: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/peer")),
        node: "node".into(),
        sides: Side::ALL.to_vec(),
        workloads: Workload::ALL.to_vec(),
        breakdown: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        let number = |text: String| -> Res<u64> {
            text.replace('_', "")
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{arg}: '{text}' is not a positive number"))
        };
        match arg.as_str() {
            "--url" => config.url = value()?,
            "--jobs" => config.jobs = number(value()?)?,
            "--sessions" => config.sessions = number(value()?)?,
            "--rounds" => config.rounds = number(value()?)? as usize,
            "--batch" => config.batch = number(value()?)? as usize,
            "--graphile-dir" => config.graphile_dir = PathBuf::from(value()?),
            "--node" => config.node = value()?,
            "--sides" => {
                let text = value()?;
                config.sides = text
                    .split(',')
                    .map(|key| {
                        Side::ALL
                            .into_iter()
                            .find(|side| side.key() == key.trim())
                            .ok_or_else(|| format!("unknown side '{key}'\n{USAGE}"))
                    })
                    .collect::<Res<_>>()?;
            }
            "--workloads" => {
                let text = value()?;
                config.workloads = text
                    .split(',')
                    .map(|key| {
                        Workload::ALL
                            .into_iter()
                            .find(|workload| workload.key() == key.trim())
                            .ok_or_else(|| format!("unknown workload '{key}'\n{USAGE}"))
                    })
                    .collect::<Res<_>>()?;
            }
            "--breakdown" => config.breakdown = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    if config.url.trim().is_empty() {
        return Err(format!(
            "no server: pass --url or set A2_POSTGRES_URL\n{USAGE}"
        ));
    }
    config.url = plain(config.url.trim());
    Ok(config)
}

/// `url` with TLS off (unless it says otherwise), so every side connects
/// alike: node-postgres and the bare queue connect without TLS.
fn plain(url: &str) -> String {
    if url.contains("sslmode=") {
        return url.to_owned();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=disable")
}

/// `url` (a `postgres://` or `postgresql://` URL) naming database `name`.
fn with_database(url: &str, name: &str) -> Res<String> {
    let scheme_end = url
        .find("://")
        .ok_or("the server must be given as a postgres:// URL")?
        + 3;
    let query_start = url.find('?').unwrap_or(url.len());
    let authority_end = url[scheme_end..query_start]
        .find('/')
        .map_or(query_start, |at| scheme_end + at);
    Ok(format!(
        "{}/{name}{}",
        &url[..authority_end],
        &url[query_start..]
    ))
}

async fn connect(url: &str) -> Res<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .ctx("connecting to PostgreSQL")?;
    tokio::spawn(connection);
    Ok(client)
}

/// The server's counters at one moment, for one database.
#[derive(Debug, Clone, PartialEq)]
struct Counters {
    commits: i64,
    rollbacks: i64,
    lsn: String,
    /// Top-level statements, then statements run inside functions
    /// (`pg_stat_statements.track = all` only), transaction control left out.
    statements: Option<(i64, Option<i64>)>,
}

/// The connection reading the server's counters, on the server's own
/// database (so its statements count in none of the measured ones).
struct Admin {
    client: Client,
    statements: bool,
    nested: bool,
}

impl Admin {
    async fn connect(url: &str) -> Res<Self> {
        let client = connect(url).await?;
        let statements = client
            .query_one("SELECT count(*) FROM pg_stat_statements", &[])
            .await
            .is_ok();
        let nested = statements
            && client
                .query_one(
                    "SELECT current_setting('pg_stat_statements.track', true) = 'all'",
                    &[],
                )
                .await
                .ctx("reading pg_stat_statements.track")?
                .try_get::<_, Option<bool>>(0)
                .ctx("reading pg_stat_statements.track")?
                .unwrap_or(false);
        Ok(Self {
            client,
            statements,
            nested,
        })
    }

    async fn describe(&self) -> Res<String> {
        let row = self
            .client
            .query_one(
                "SELECT current_setting('server_version'), current_setting('fsync'), \
                 current_setting('synchronous_commit'), current_setting('shared_buffers'), \
                 current_setting('port')",
                &[],
            )
            .await
            .ctx("reading the server's settings")?;
        let get = |i: usize| row.try_get::<_, String>(i).unwrap_or_default();
        Ok(format!(
            "PostgreSQL {} (port {}), fsync {}, synchronous_commit {}, shared_buffers {}; \
             pg_stat_statements: {}",
            get(0),
            get(4),
            get(1),
            get(2),
            get(3),
            match (self.statements, self.nested) {
                (true, true) => "loaded, track = all",
                (true, false) => "loaded, top-level statements only",
                (false, _) => "not loaded (statements/job n/a; use --private-cluster)",
            }
        ))
    }

    async fn create_database(&self, name: &str) -> Res<()> {
        // DDL takes no parameters: the name is ours, `a2peer_<32 hex digits>`.
        self.client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .ctx("creating a database")
    }

    async fn drop_database(&self, name: &str) -> Res<()> {
        self.client
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            .await
            .ctx("dropping a database")
    }

    /// Waits until no backend is connected to `name` (each flushes its
    /// statistics as it exits).
    async fn wait_idle(&self, name: &str) -> Res<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let row = self
                .client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                    &[&name],
                )
                .await
                .ctx("reading pg_stat_activity")?;
            let connected: i64 = row.try_get(0).ctx("reading pg_stat_activity")?;
            if connected == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{connected} connections to the bench database stayed open for 30 s"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn read(&self, name: &str) -> Res<Counters> {
        self.client
            .execute("SELECT pg_stat_clear_snapshot()", &[])
            .await
            .ctx("clearing the statistics snapshot")?;
        let row = self
            .client
            .query_one(
                "SELECT xact_commit, xact_rollback, pg_current_wal_lsn()::text \
                 FROM pg_stat_database WHERE datname = $1",
                &[&name],
            )
            .await
            .ctx("reading pg_stat_database")?;
        let statements = if self.statements {
            let row = self
                .client
                .query_one(
                    "SELECT coalesce(sum(s.calls) FILTER (WHERE s.toplevel), 0)::bigint, \
                            coalesce(sum(s.calls) FILTER (WHERE NOT s.toplevel), 0)::bigint \
                     FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
                     WHERE d.datname = $1 AND s.query !~* $2",
                    &[&name, &TX_CONTROL],
                )
                .await
                .ctx("reading pg_stat_statements")?;
            let top: i64 = row.try_get(0).ctx("reading pg_stat_statements")?;
            let nested: i64 = row.try_get(1).ctx("reading pg_stat_statements")?;
            Some((top, self.nested.then_some(nested)))
        } else {
            None
        };
        Ok(Counters {
            commits: row.try_get(0).ctx("reading pg_stat_database")?,
            rollbacks: row.try_get(1).ctx("reading pg_stat_database")?,
            lsn: row.try_get(2).ctx("reading the WAL position")?,
            statements,
        })
    }

    /// Calls of each statement run in `name` so far (transaction control
    /// included: `BEGIN` counts the explicit transactions), by query id and
    /// level, with the statement's text.
    async fn calls(&self, name: &str) -> Res<BTreeMap<(i64, bool), (i64, String)>> {
        let rows = self
            .client
            .query(
                "SELECT s.queryid, s.toplevel, s.calls, s.query \
                 FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
                 WHERE d.datname = $1",
                &[&name],
            )
            .await
            .ctx("reading pg_stat_statements")?;
        let mut calls = BTreeMap::new();
        for row in rows {
            let id: i64 = row.try_get(0).ctx("reading pg_stat_statements")?;
            let top: bool = row.try_get(1).ctx("reading pg_stat_statements")?;
            let n: i64 = row.try_get(2).ctx("reading pg_stat_statements")?;
            let text: String = row.try_get(3).ctx("reading pg_stat_statements")?;
            calls.insert((id, top), (n, text));
        }
        Ok(calls)
    }

    /// The counters of `name` once every connection to it is gone and its
    /// statistics have settled (two reads 50 ms apart agree, at most 2 s).
    async fn counters(&self, name: &str) -> Res<Counters> {
        self.wait_idle(name).await?;
        let mut last = self.read(name).await?;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = self.read(name).await?;
            if now.commits == last.commits && now.statements == last.statements {
                return Ok(last);
            }
            last = now;
        }
        Ok(last)
    }

    async fn wal_between(&self, from: &str, to: &str) -> Res<f64> {
        let row = self
            .client
            .query_one(
                "SELECT pg_wal_lsn_diff($2::text::pg_lsn, $1::text::pg_lsn)::float8",
                &[&from, &to],
            )
            .await
            .ctx("computing the WAL written")?;
        row.try_get(0).ctx("computing the WAL written")
    }
}

/// What one drain reports.
struct Drained {
    seconds: f64,
    /// Handler runs (claims handed to the job's code).
    handled: u64,
    /// Distinct jobs among them.
    distinct: u64,
}

/// Distinct jobs seen by the a2 sides: (session, index).
type Seen = Arc<Mutex<HashSet<(String, u64)>>>;

fn see(seen: &Seen, session: &str, index: u64) {
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert((session.to_owned(), index));
}

fn seen_count(seen: &Seen) -> u64 {
    seen.lock().unwrap_or_else(PoisonError::into_inner).len() as u64
}

async fn a2_store(url: &str, pool_size: usize) -> Res<PostgresStore> {
    PostgresStore::connect(
        url,
        PostgresOptions {
            pool_size,
            ..PostgresOptions::default()
        },
    )
    .await
    .ctx("opening the a2 store")
}

/// Appends the jobs: job `n` to session `s<n % sessions>`, payload
/// `{"n": n}`, a session's jobs in order, [`CONCURRENCY`] appends at a time.
async fn a2_prepare(config: &Config, url: &str, workload: Workload) -> Res<()> {
    let store = Arc::new(a2_store(url, CONCURRENCY).await?);
    let mut appends = JoinSet::new();
    for session in 0..config.sessions {
        let numbers: Vec<u64> = (session..config.jobs)
            .step_by(config.sessions as usize)
            .collect();
        for chunk in numbers.chunks(APPEND_BATCH) {
            if appends.len() >= CONCURRENCY {
                if let Some(done) = appends.join_next().await {
                    done.ctx("an append task")??;
                }
            }
            let events: Vec<NewEvent> = chunk
                .iter()
                .map(|n| NewEvent::new("job", json!({ "n": n })).with_target(workload.target()))
                .collect();
            let store = Arc::clone(&store);
            let id = format!("s{session}");
            appends.spawn(async move {
                store
                    .append(&id, events, AppendOptions::default())
                    .await
                    .map(|_| ())
                    .ctx("appending the jobs")
            });
        }
    }
    while let Some(done) = appends.join_next().await {
        done.ctx("an append task")??;
    }
    Ok(())
}

/// The a2-worker with a no-op handler, from opening the store until the
/// worker counted every job completed.
async fn a2_worker(config: &Config, url: &str) -> Res<Drained> {
    let total = config.jobs;
    let started = Instant::now();
    let store: Arc<dyn Store> = Arc::new(a2_store(url, CONCURRENCY).await?);
    let seen: Seen = Arc::default();
    let handled = Arc::new(AtomicU64::new(0));
    let all_handled = Arc::new(Notify::new());
    let handler = {
        let (seen, handled, all_handled) = (
            Arc::clone(&seen),
            Arc::clone(&handled),
            Arc::clone(&all_handled),
        );
        handler_fn(move |job: Job| {
            see(&seen, job.session_id(), job.index());
            if handled.fetch_add(1, Ordering::Relaxed) + 1 == total {
                all_handled.notify_one();
            }
            async move { Ok(Vec::new()) }
        })
    };
    let worker = Worker::builder(Arc::clone(&store))
        .holder("peer-bench")
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .max_in_flight(CONCURRENCY)
        .build()
        .ctx("building the worker")?
        .spawn()
        .ctx("starting the worker")?;
    all_handled.notified().await;
    // The last completions land right after their handlers returned.
    while worker.stats().completed < total {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let summary = worker.shutdown().await;
    if summary.stats.completed != total {
        return Err(format!(
            "the worker completed {} of {total} jobs ({:?})",
            summary.stats.completed, summary.stats
        ));
    }
    Ok(Drained {
        seconds,
        handled: handled.load(Ordering::Relaxed),
        distinct: seen_count(&seen),
    })
}

/// [`CONCURRENCY`] tasks, each claiming one head at a time with
/// `claim_work` and completing it, until every job is completed; timed from
/// opening the store to the last completion.
async fn a2_hand_loop(config: &Config, url: &str) -> Res<Drained> {
    let total = config.jobs;
    let started = Instant::now();
    let store: Arc<dyn Store> = Arc::new(a2_store(url, CONCURRENCY).await?);
    let seen: Seen = Arc::default();
    let done = Arc::new(AtomicU64::new(0));
    let finished: Arc<Mutex<Option<Instant>>> = Arc::default();
    let mut tasks = JoinSet::new();
    for task in 0..CONCURRENCY {
        let (store, seen, done, finished) = (
            Arc::clone(&store),
            Arc::clone(&seen),
            Arc::clone(&done),
            Arc::clone(&finished),
        );
        tasks.spawn(async move {
            let request = ClaimWorkRequest::new(
                format!("hand-{task}"),
                vec![ConsumerDeclaration::targeted(CONSUMER)],
                60_000,
            )
            .with_limit(1);
            while done.load(Ordering::Relaxed) < total {
                let claimed = store.claim_work(request.clone()).await.ctx("claim_work")?;
                let completions: Vec<CompleteRequest> = claimed
                    .heads()
                    .map(|(session, head)| {
                        see(&seen, session, head.event.index);
                        CompleteRequest {
                            incarnation: None,
                            session_id: session.to_owned(),
                            consumer: head.consumer.clone(),
                            lane: head.lane.clone(),
                            index: head.event.index,
                            attempt: head.dispatch.attempt_count,
                            events: Vec::new(),
                            consumers: None,
                        }
                    })
                    .collect();
                if completions.is_empty() {
                    // Every head left is held by another task (a lane's
                    // next head waits for its predecessor): look again soon.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                for completion in completions {
                    store
                        .complete_attempt(completion)
                        .await
                        .ctx("complete_attempt")?;
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == total {
                        *finished.lock().unwrap_or_else(PoisonError::into_inner) =
                            Some(Instant::now());
                    }
                }
            }
            Ok::<(), String>(())
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.ctx("a hand-loop task")??;
    }
    let end = finished
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .unwrap_or_else(Instant::now);
    let completed = done.load(Ordering::Relaxed);
    Ok(Drained {
        seconds: end.duration_since(started).as_secs_f64(),
        handled: completed,
        distinct: seen_count(&seen),
    })
}

/// Whether any work of [`CONSUMER`] is left in the a2 store.
async fn a2_left(url: &str) -> Res<u64> {
    let store = a2_store(url, 1).await?;
    let page = store
        .list_work(ListWork {
            consumers: vec![CONSUMER.to_owned()],
            after: None,
            limit: Some(100),
        })
        .await
        .ctx("listing the work left")?;
    Ok(page.len() as u64)
}

/// [`CONCURRENCY`] tasks on plain connections draining the bare queue;
/// timed from the first connection until every task found nothing left.
async fn bare_drain(queue: BareQueue, url: &str) -> Res<Drained> {
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..CONCURRENCY {
        let url = url.to_owned();
        tasks.spawn(async move {
            let client = connect(&url).await?;
            let mut ids = Vec::new();
            queue
                .drain(&client, |id| ids.push(id))
                .await
                .ctx("draining the bare queue")?;
            Ok::<Vec<i64>, String>(ids)
        });
    }
    let mut all = Vec::new();
    while let Some(result) = tasks.join_next().await {
        all.extend(result.ctx("a bare-queue task")??);
    }
    let seconds = started.elapsed().as_secs_f64();
    let handled = all.len() as u64;
    let distinct = all.into_iter().collect::<HashSet<_>>().len() as u64;
    Ok(Drained {
        seconds,
        handled,
        distinct,
    })
}

async fn count_rows(url: &str, sql: &str) -> Res<u64> {
    let client = connect(url).await?;
    let row = client
        .query_one(sql, &[])
        .await
        .ctx("counting the jobs left")?;
    let left: i64 = row.try_get(0).ctx("counting the jobs left")?;
    Ok(u64::try_from(left).unwrap_or(0))
}

/// Runs `node graphile.mjs <args>` on database `url`; its one line of JSON.
async fn graphile(config: &Config, url: &str, args: Vec<String>) -> Res<serde_json::Value> {
    let mut command = Command::new(&config.node);
    command
        .current_dir(&config.graphile_dir)
        .arg("graphile.mjs")
        .args(&args)
        .env("A2_PEER_DB_URL", url);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .ctx("waiting for node")?
        .ctx("running node (is Node.js installed, and `npm ci` run in benches/peer?)")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stderr.trim().is_empty() {
        eprint!("{stderr}");
    }
    if !output.status.success() {
        return Err(format!(
            "graphile.mjs {} failed: {}",
            args.join(" "),
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).ctx("reading graphile.mjs's answer")
}

async fn prepare(config: &Config, side: Side, workload: Workload, url: &str) -> Res<()> {
    match side {
        Side::GraphileDefault | Side::GraphileBatched => {
            let kind = match workload {
                Workload::Independent => "independent",
                Workload::Serial => "queues",
            };
            let args = vec![
                "prepare".into(),
                config.jobs.to_string(),
                config.sessions.to_string(),
                kind.into(),
            ];
            let answer = graphile(config, url, args).await?;
            if answer["enqueued"].as_u64() != Some(config.jobs) {
                return Err(format!("graphile.mjs enqueued {answer}"));
            }
            Ok(())
        }
        Side::A2Worker | Side::A2HandLoop => a2_prepare(config, url, workload).await,
        Side::Bare | Side::BareBatched => {
            let client = connect(url).await?;
            side.bare(config.batch, workload)
                .setup(&client, config.jobs, config.sessions)
                .await
                .ctx("filling the bare queue")
        }
    }
}

async fn drain(config: &Config, side: Side, workload: Workload, url: &str) -> Res<Drained> {
    match side {
        Side::GraphileDefault | Side::GraphileBatched => {
            let mode = if side == Side::GraphileDefault {
                "default"
            } else {
                "batched"
            };
            let args = vec!["drain".into(), config.jobs.to_string(), mode.into()];
            let answer = graphile(config, url, args).await?;
            let field = |name: &str| {
                answer[name]
                    .as_f64()
                    .ok_or_else(|| format!("graphile.mjs answered {answer}"))
            };
            Ok(Drained {
                seconds: field("seconds")?,
                handled: field("handled")? as u64,
                distinct: field("distinct")? as u64,
            })
        }
        Side::A2Worker => a2_worker(config, url).await,
        Side::A2HandLoop => a2_hand_loop(config, url).await,
        Side::Bare | Side::BareBatched => bare_drain(side.bare(config.batch, workload), url).await,
    }
}

async fn left(side: Side, url: &str) -> Res<u64> {
    match side {
        Side::GraphileDefault | Side::GraphileBatched => {
            count_rows(url, "SELECT count(*) FROM graphile_worker._private_jobs").await
        }
        Side::A2Worker | Side::A2HandLoop => a2_left(url).await,
        Side::Bare | Side::BareBatched => count_rows(url, "SELECT count(*) FROM jobs").await,
    }
}

/// One side's figures for one workload in one round.
#[derive(Debug, Clone)]
struct Measure {
    round: usize,
    jobs_per_s: f64,
    tx_per_job: f64,
    rollbacks: i64,
    wal_per_job: f64,
    statements_per_job: Option<f64>,
    nested_per_job: Option<f64>,
}

/// Prepares, measures and checks one side on a database of its own, which
/// is dropped afterwards whatever happened.
async fn run_one(
    admin: &Admin,
    config: &Config,
    side: Side,
    workload: Workload,
    round: usize,
) -> Res<Measure> {
    let name = fresh_schema_name(DB_PREFIX).ctx("naming a database")?;
    admin.create_database(&name).await?;
    let result = measure(admin, config, side, workload, &name, round).await;
    let dropped = admin.drop_database(&name).await;
    let measure = result?;
    dropped?;
    Ok(measure)
}

async fn measure(
    admin: &Admin,
    config: &Config,
    side: Side,
    workload: Workload,
    name: &str,
    round: usize,
) -> Res<Measure> {
    let url = with_database(&config.url, name)?;
    prepare(config, side, workload, &url).await?;
    let before = admin.counters(name).await?;
    let calls_before = if config.breakdown && admin.statements {
        Some(admin.calls(name).await?)
    } else {
        None
    };
    // Generous: the slowest side seen drains about 400 jobs/s.
    let limit = Duration::from_secs(120) + Duration::from_millis(config.jobs.saturating_mul(50));
    let drained = tokio::time::timeout(limit, drain(config, side, workload, &url))
        .await
        .map_err(|_| format!("did not drain within {} s", limit.as_secs()))??;
    let after = admin.counters(name).await?;
    if let Some(calls_before) = calls_before {
        let calls_after = admin.calls(name).await?;
        print_breakdown(
            side,
            workload,
            round,
            config.jobs,
            &calls_before,
            &calls_after,
        );
    }
    let left = left(side, &url).await?;
    let jobs = config.jobs;
    if drained.handled != jobs || drained.distinct != jobs || left != 0 {
        return Err(format!(
            "not every job exactly once: {} handled, {} distinct, {left} left of {jobs}",
            drained.handled, drained.distinct
        ));
    }
    let per_job = |n: i64| n as f64 / jobs as f64;
    let wal = admin.wal_between(&before.lsn, &after.lsn).await?;
    let (statements_per_job, nested_per_job) = match (before.statements, after.statements) {
        (Some((top0, nested0)), Some((top1, nested1))) => (
            Some(per_job(top1 - top0)),
            nested0.zip(nested1).map(|(a, b)| per_job(b - a)),
        ),
        _ => (None, None),
    };
    Ok(Measure {
        round,
        jobs_per_s: jobs as f64 / drained.seconds,
        tx_per_job: per_job(after.commits - before.commits),
        rollbacks: after.rollbacks - before.rollbacks,
        wal_per_job: wal / jobs as f64,
        statements_per_job,
        nested_per_job,
    })
}

/// The statements that ran most per job between two readings of
/// [`Admin::calls`] (`BEGIN` and `COMMIT` among them), with their level (`top` or `nested`, run inside a
/// function) and the first characters of their text.
fn print_breakdown(
    side: Side,
    workload: Workload,
    round: usize,
    jobs: u64,
    before: &BTreeMap<(i64, bool), (i64, String)>,
    after: &BTreeMap<(i64, bool), (i64, String)>,
) {
    let mut ran: Vec<(f64, bool, String)> = after
        .iter()
        .filter_map(|(key, (calls, text))| {
            let earlier = before.get(key).map_or(0, |(calls, _)| *calls);
            let per_job = (calls - earlier) as f64 / jobs as f64;
            (per_job >= 0.005).then(|| {
                let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
                (per_job, key.1, text.chars().take(110).collect())
            })
        })
        .collect();
    ran.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!(
        "-- {} · {} · round {}: statements per job",
        side.key(),
        workload.key(),
        round
    );
    for (per_job, top, text) in ran.iter().take(30) {
        let level = if *top { "top   " } else { "nested" };
        println!("   {per_job:>6.3}  {level}  {text}");
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    })
}

fn fmt_opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "n/a".into(), |v| format!("{v:.decimals$}"))
}

/// A count per job: two decimals, three below 0.1 (a batched side's
/// transactions per job would read 0.00 otherwise), `0` for none.
fn per_job(value: f64) -> String {
    if value == 0.0 {
        "0".into()
    } else if value.abs() < 0.1 {
        format!("{value:.3}")
    } else {
        format!("{value:.2}")
    }
}

fn per_job_opt(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".into(), per_job)
}

/// `a · b` over the workloads run, `-` for one not run.
fn per_workload(config: &Config, mut cell: impl FnMut(Workload) -> Option<String>) -> String {
    Workload::ALL
        .into_iter()
        .filter(|w| config.workloads.contains(w))
        .map(|w| cell(w).unwrap_or_else(|| "-".into()))
        .collect::<Vec<_>>()
        .join(" · ")
}

type Results = BTreeMap<(Side, Workload), Vec<Measure>>;

fn print_tables(config: &Config, results: &Results) {
    let workloads: Vec<Workload> = Workload::ALL
        .into_iter()
        .filter(|w| config.workloads.contains(w))
        .collect();
    let med = |side: Side, workload: Workload, f: &dyn Fn(&Measure) -> Option<f64>| {
        results
            .get(&(side, workload))
            .and_then(|runs| median(runs.iter().filter_map(f).collect()))
    };
    println!();
    println!("### jobs/s by round");
    println!();
    let rounds: Vec<String> = (1..=config.rounds).map(|r| format!("round {r}")).collect();
    println!("| side | workload | {} | median |", rounds.join(" | "));
    println!("|---|---|{}---:|", "---:|".repeat(config.rounds));
    for &side in &config.sides {
        for &workload in &workloads {
            let runs = results.get(&(side, workload));
            let cells: Vec<String> = (1..=config.rounds)
                .map(|r| {
                    runs.and_then(|runs| runs.iter().find(|m| m.round == r))
                        .map_or_else(|| "failed".into(), |m| format!("{:.0}", m.jobs_per_s))
                })
                .collect();
            println!(
                "| {} | {} | {} | {} |",
                side.name(config.batch),
                workload.key(),
                cells.join(" | "),
                fmt_opt(med(side, workload, &|m| Some(m.jobs_per_s)), 0)
            );
        }
    }
    println!();
    println!(
        "### medians of {} round(s): {} jobs over {} sessions, concurrency {CONCURRENCY}",
        config.rounds, config.jobs, config.sessions
    );
    println!();
    let names: Vec<&str> = workloads.iter().map(|w| w.key()).collect();
    let mut header = String::from("| side |");
    let mut rule = String::from("|---|");
    for name in &names {
        header.push_str(&format!(" jobs/s {name} |"));
        rule.push_str("---:|");
    }
    for name in &names {
        header.push_str(&format!(" a2-worker ÷ side, {name} |"));
        rule.push_str("---:|");
    }
    let joined = names.join(" · ");
    header.push_str(&format!(
        " tx/job ({joined}) | statements/job ({joined}) | nested/job ({joined}) | WAL bytes/job ({joined}) |"
    ));
    rule.push_str("---:|---:|---:|---:|");
    println!("{header}");
    println!("{rule}");
    for &side in &config.sides {
        let mut line = format!("| {} |", side.name(config.batch));
        for &workload in &workloads {
            line.push_str(&format!(
                " {} |",
                fmt_opt(med(side, workload, &|m| Some(m.jobs_per_s)), 0)
            ));
        }
        for &workload in &workloads {
            let own = med(side, workload, &|m| Some(m.jobs_per_s));
            let a2 = med(Side::A2Worker, workload, &|m| Some(m.jobs_per_s));
            let ratio = a2.zip(own).map(|(a2, own)| format!("{:.2}×", a2 / own));
            line.push_str(&format!(" {} |", ratio.unwrap_or_else(|| "-".into())));
        }
        line.push_str(&format!(
            " {} | {} | {} | {} |",
            per_workload(config, |w| med(side, w, &|m| Some(m.tx_per_job))
                .map(per_job)),
            per_workload(config, |w| {
                results.get(&(side, w))?;
                Some(per_job_opt(med(side, w, &|m| m.statements_per_job)))
            }),
            per_workload(config, |w| {
                results.get(&(side, w))?;
                Some(per_job_opt(med(side, w, &|m| m.nested_per_job)))
            }),
            per_workload(config, |w| med(side, w, &|m| Some(m.wal_per_job))
                .map(|v| format!("{v:.0}"))),
        ));
        println!("{line}");
    }
}

async fn run(config: Config) -> Res<bool> {
    let admin = Admin::connect(&config.url).await?;
    println!(
        "peer_drain: {} jobs over {} sessions, concurrency {CONCURRENCY}, batch {}, {} round(s), \
         sides alternating within each round",
        config.jobs, config.sessions, config.batch, config.rounds
    );
    println!("server: {}", admin.describe().await?);
    let mut results: Results = BTreeMap::new();
    let mut failures = Vec::new();
    for round in 1..=config.rounds {
        for &workload in &config.workloads {
            for &side in &config.sides {
                let label = format!(
                    "round {round} {:<11} {:<56}",
                    workload.key(),
                    side.name(config.batch)
                );
                match run_one(&admin, &config, side, workload, round).await {
                    Ok(m) => {
                        println!(
                            "{label} {:>8.0} jobs/s  tx/job {}{}  statements/job {}  nested/job {}  WAL/job {:.0} B",
                            m.jobs_per_s,
                            per_job(m.tx_per_job),
                            if m.rollbacks > 0 {
                                format!(" (+{} rollbacks)", m.rollbacks)
                            } else {
                                String::new()
                            },
                            per_job_opt(m.statements_per_job),
                            per_job_opt(m.nested_per_job),
                            m.wal_per_job
                        );
                        results.entry((side, workload)).or_default().push(m);
                    }
                    Err(error) => {
                        println!("{label} FAILED: {error}");
                        failures.push(format!("{label}: {error}"));
                    }
                }
            }
        }
    }
    print_tables(&config, &results);
    if failures.is_empty() {
        println!();
        println!("every side drained every job exactly once");
        Ok(true)
    } else {
        eprintln!();
        for failure in &failures {
            eprintln!("FAILED {failure}");
        }
        Ok(false)
    }
}

fn main() {
    let config = match parse() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let runtime = settings::runtime();
    match runtime.block_on(run(config)) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(error) => {
            eprintln!("peer_drain: {error}");
            std::process::exit(1);
        }
    }
}
