//! The worker: its options, the claim loop, one supervisor per claimed head
//! (renewal, timeout, settling the attempt) and shutdown.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    validate, ClaimWorkRequest, ClaimWorkResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, ErrorCode, FailOutcome, FailRequest, Head, HeldClaim, NewEvent,
    RenewRequest, SessionClaim, Store, StoreError, MAX_WAIT_MS, MAX_WORK_LIMIT,
};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::handler::{Handler, HandlerError, HandlerResult};
use crate::ids::{assign_ids, OutputKind};
use crate::job::{is_transient, with_transient_retry, Job, LeaseToken};
use crate::retention::{self, Retention, Tally};
use crate::retry::RetryPolicy;

/// The part of the lease ttl after which a running handler's lease is
/// renewed: a third, so two renewals in a row can fail (a slow or briefly
/// unreachable store) before the lease lapses.
pub const RENEW_FRACTION: f64 = 1.0 / 3.0;

/// The pause after a failed claim, doubled after each further failure up to
/// [`CLAIM_ERROR_PAUSE_MAX`].
pub const CLAIM_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between claims that fail.
pub const CLAIM_ERROR_PAUSE_MAX: Duration = Duration::from_secs(5);

/// The `tracing` target of the worker's spans and events.
pub(crate) const TARGET: &str = "a2_worker";

/// The default of [`WorkerBuilder::claim_batch`]: one claim asks for at
/// most 16 heads (the default in-flight bound), so by default a claim may
/// ask for every free slot.
pub const DEFAULT_CLAIM_BATCH: usize = 16;

/// The default of [`WorkerBuilder::claims_in_flight`] on a store that
/// claims a batch session by session: over a backlog, up to 16 claims at
/// once (one per slot of the default in-flight bound), each for a share of
/// the free slots. On a store that claims a batch in one step
/// (`Store::claims_in_one_step`, PostgreSQL) the default is 1: one claim
/// for every free slot.
pub const DEFAULT_CLAIMS_IN_FLIGHT: usize = 16;

/// How long, over a backlog on a store that claims a batch in one step,
/// the next claim waits for [`WorkerBuilder::claim_low_water`] free slots
/// once one is free: a claim then goes for whatever is free.
pub const CLAIM_LOW_WATER_WAIT: Duration = Duration::from_millis(5);

/// What a worker has done so far; every count starts at 0 when it starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Heads claimed (attempts started).
    pub claimed: u64,
    /// Attempts completed (applied now or replayed).
    pub completed: u64,
    /// Failed attempts recorded to be retried (handler errors, panics,
    /// timeouts, rejected completions that may succeed later).
    pub failed: u64,
    /// Heads dead-lettered: by this worker's failures (permanent errors,
    /// `max_failures` reached) and by its claims (expired leases at
    /// `max_failures`, e.g. of a worker that died).
    pub dead_lettered: u64,
    /// Completions and failures the store superseded: the attempt was no
    /// longer current (its lease was lost, or the session cleared).
    pub superseded: u64,
    /// Leases lost while the handler ran (renewal reported the claim
    /// superseded or no longer held).
    pub leases_lost: u64,
    /// Handlers that panicked (each counted in `failed` too, or in
    /// `dead_lettered` when it was the last failure allowed).
    pub panicked: u64,
    /// Handlers stopped at the handler timeout (counted as failures too).
    pub timed_out: u64,
    /// Attempts given back at shutdown: failed with a retry and no dead
    /// letter, claimable again at once.
    pub released: u64,
    /// Attempts neither completed nor failed because the store kept
    /// failing: left to their lease, whose expiry counts the failure.
    pub unsettled: u64,
    /// Heads being processed now.
    pub in_flight: u64,
    /// `claim_work` calls made (each waits up to the claim wait when
    /// nothing is claimable, so an idle worker makes one per wait).
    pub claim_calls: u64,
    /// Sessions deleted by the retention task ([`WorkerBuilder::retention`]).
    pub pruned: u64,
    /// `prune` calls of the retention task that failed (each retried at
    /// its next round).
    pub prune_errors: u64,
}

#[derive(Debug, Default)]
struct Counters {
    claimed: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
    superseded: AtomicU64,
    leases_lost: AtomicU64,
    panicked: AtomicU64,
    timed_out: AtomicU64,
    released: AtomicU64,
    unsettled: AtomicU64,
    in_flight: AtomicU64,
    claim_calls: AtomicU64,
    pruned: AtomicU64,
    prune_errors: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self) -> WorkerStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WorkerStats {
            claimed: get(&self.claimed),
            completed: get(&self.completed),
            failed: get(&self.failed),
            dead_lettered: get(&self.dead_lettered),
            superseded: get(&self.superseded),
            leases_lost: get(&self.leases_lost),
            panicked: get(&self.panicked),
            timed_out: get(&self.timed_out),
            released: get(&self.released),
            unsettled: get(&self.unsettled),
            in_flight: get(&self.in_flight),
            claim_calls: get(&self.claim_calls),
            pruned: get(&self.pruned),
            prune_errors: get(&self.prune_errors),
        }
    }
}

/// What a stopped worker reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownSummary {
    /// Its counts when it stopped (`in_flight` is 0 unless it ended abnormally).
    pub stats: WorkerStats,
    /// Why it stopped on its own, when it did: a store error no retry can
    /// fix (`InvalidInput`, `IncompatibleSchema`), or its task ended abnormally.
    pub error: Option<String>,
}

#[derive(Debug, Clone)]
struct Config {
    holder: String,
    lease_ttl: Duration,
    max_in_flight: usize,
    claim_batch: usize,
    /// `None`: by the store (see [`DEFAULT_CLAIMS_IN_FLIGHT`]).
    claims_in_flight: Option<usize>,
    /// `None`: half of `max_in_flight` (see
    /// [`WorkerBuilder::claim_low_water`]).
    claim_low_water: Option<usize>,
    claim_wait: Duration,
    per_session_limit: usize,
    sessions: Option<Vec<String>>,
    retry: RetryPolicy,
    handler_timeout: Option<Duration>,
    shutdown_grace: Duration,
    spawn_handlers: bool,
    retention: Option<Retention>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            holder: format!("worker-{}", uuid::Uuid::new_v4()),
            lease_ttl: Duration::from_secs(30),
            max_in_flight: 16,
            claim_batch: DEFAULT_CLAIM_BATCH,
            claims_in_flight: None,
            claim_low_water: None,
            claim_wait: Duration::from_secs(30),
            per_session_limit: 1,
            sessions: None,
            retry: RetryPolicy::DEFAULT,
            handler_timeout: Some(Duration::from_secs(600)),
            shutdown_grace: Duration::from_secs(30),
            spawn_handlers: true,
            retention: None,
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

struct Shared {
    store: Arc<dyn Store>,
    handlers: HashMap<String, Arc<dyn Handler>>,
    consumers: Arc<[ConsumerDeclaration]>,
    /// The declarations completions pass: only needed for log consumers
    /// (their cursors follow returned events), `None` without any.
    completion_consumers: Option<Vec<ConsumerDeclaration>>,
    config: Config,
    counters: Counters,
}

impl Tally for Shared {
    fn pruned(&self, sessions: u64) {
        self.counters.pruned.fetch_add(sessions, Ordering::Relaxed);
    }

    fn prune_failed(&self) {
        bump(&self.counters.prune_errors);
    }
}

impl Shared {
    /// A claim for up to `limit` heads; with `wait`, one that waits in the
    /// store for work when none is claimable, else one that answers at once.
    fn claim_request(&self, limit: usize, wait: bool) -> ClaimWorkRequest {
        let config = &self.config;
        ClaimWorkRequest {
            holder: config.holder.clone(),
            ttl_ms: Some(millis(config.lease_ttl)),
            expires_at_ms: None,
            consumers: self.consumers.to_vec(),
            sessions: config.sessions.clone(),
            max_failures: Some(config.retry.dead_letter_at()),
            limit: Some(limit.clamp(1, MAX_WORK_LIMIT)),
            session_limit: None,
            per_session_limit: Some(config.per_session_limit),
            wait_ms: wait.then(|| millis(config.claim_wait).clamp(1, MAX_WAIT_MS)),
        }
    }

    fn renew_every(&self) -> Duration {
        self.config
            .lease_ttl
            .mul_f64(RENEW_FRACTION)
            .max(Duration::from_millis(1))
    }
}

/// Builds a [`Worker`]: the consumers it serves with their handlers, and
/// its options (each default documented on its method).
pub struct WorkerBuilder {
    store: Arc<dyn Store>,
    handlers: HashMap<String, Arc<dyn Handler>>,
    consumers: Vec<ConsumerDeclaration>,
    duplicate: Option<String>,
    config: Config,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("consumers", &self.consumers)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// Serves `consumer` with `handler`. Each consumer has one handler; a
    /// log consumer's declaration is passed with every claim, completion
    /// and append so its cursors exist and follow its types.
    pub fn consumer(mut self, consumer: ConsumerDeclaration, handler: impl Handler) -> Self {
        if self.handlers.contains_key(&consumer.name) {
            self.duplicate = Some(consumer.name.clone());
        }
        self.handlers
            .insert(consumer.name.clone(), Arc::new(handler) as Arc<dyn Handler>);
        self.consumers.push(consumer);
        self
    }

    /// The holder name claims are made under (default `worker-<random uuid>`).
    /// Give each worker its own: two workers with one name could renew
    /// each other's leases.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.config.holder = holder.into();
        self
    }

    /// The lease length (default 30 s): how long a head stays claimed
    /// without renewal, and so how soon the work of a worker that died is
    /// taken up by another. Renewed every [`RENEW_FRACTION`] of it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.lease_ttl = ttl;
        self
    }

    /// The most heads processed at once (default 16, at most 1,000). Heads
    /// of one lane are never processed together: the store hands out one
    /// head per lane at a time.
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.config.max_in_flight = max;
        self
    }

    /// The most heads one claim asks for (default [`DEFAULT_CLAIM_BATCH`]:
    /// 16; at least 1). A claim asks for the free slots (or its share of
    /// them, see [`claims_in_flight`](Self::claims_in_flight)), never more
    /// than this. Set 1 for one head per claim always.
    pub fn claim_batch(mut self, batch: usize) -> Self {
        self.config.claim_batch = batch;
        self
    }

    /// Over a backlog, on a store that claims a batch in one step
    /// (`Store::claims_in_one_step`, PostgreSQL; one claim in flight), the
    /// free slots the next claim waits for, at most
    /// [`CLAIM_LOW_WATER_WAIT`] after one is free (default half of
    /// [`max_in_flight`](Self::max_in_flight); 1 to `max_in_flight`; 1
    /// claims as soon as a slot frees). While work trickles in (the last
    /// claim came back short) a claim never waits for it. Fewer, larger
    /// claims cost fewer statements and transactions per job: on
    /// PostgreSQL (`benches/peer/run --private-cluster --sides a2-worker`,
    /// one round each, 16 in flight) 8 ran the jobs/s of 1 (1.00x, 1.00x,
    /// independent jobs and lanes) with 0.32 and 0.43 transactions and
    /// 2.15 and 2.49 statements per job, against 0.42 and 0.57, 2.81 and
    /// 3.47.
    pub fn claim_low_water(mut self, slots: usize) -> Self {
        self.config.claim_low_water = Some(slots);
        self
    }

    /// The most claims in flight at once over a backlog (default
    /// [`DEFAULT_CLAIMS_IN_FLIGHT`]: 16, or 1 on a store that claims a
    /// batch in one step, `Store::claims_in_one_step`; at least 1). On
    /// PostgreSQL with its batch claim, one claim for every free slot ran
    /// 1.54x and 1.45x the throughput of 16 claims at once (independent jobs,
    /// lanes; `benches/peer/run --private-cluster --sides a2-worker`, one
    /// round each, alternating) with 0.42 and 0.85 transactions per job
    /// against 1.18 and 1.46. While claims come
    /// back full, the worker keeps up to this many claims going, each
    /// asking for a share of the free slots (the free slots divided by the
    /// claims it may still start), and a slot that frees up while they run
    /// is asked for by a new claim at once instead of waiting for them.
    /// After a claim that came back short (fewer heads than asked, or none)
    /// it makes one claim at a time, for every free slot, and that one
    /// waits in the store for work: an idle worker makes one call per
    /// [`claim_wait`](Self::claim_wait), and a head that arrives goes out
    /// at once. Claims never ask, together, for more heads than there are
    /// free slots.
    ///
    /// Why 16, by measurement (no-op handlers, 16 in flight, 20,000 jobs
    /// over 1,000 sessions, the worker against 16 tasks each claiming one
    /// head and completing it, alternating; `cargo bench -p a2-worker
    /// --bench overhead`): a store that claims a batch session by session,
    /// each in its own write (SQLite; PostgreSQL before its batch claim),
    /// hands a claim's heads over once the last is claimed, so one claim at
    /// a time for every free slot left slots empty (PostgreSQL 0.21x and
    /// 0.36x of the hand loop, independent jobs and lanes), 4 at once
    /// 0.53x and 0.76x, 16 at once 0.89x to 0.94x; on SQLite the earlier
    /// one-claim-at-a-time worker ran independent jobs at 0.20x, 16 at
    /// once at 0.93x, since concurrent claims share its group commits. On
    /// PostgreSQL with the batch claim (one round each on a loaded machine)
    /// 16 at once ran 1.00x and 0.97x, 4 at once 0.89x and 1.23x, one at a
    /// time 0.67x and 0.98x. A store that claims a batch in one step and
    /// completes concurrent calls together needs fewer: lower it to save
    /// calls.
    pub fn claims_in_flight(mut self, claims: usize) -> Self {
        self.config.claims_in_flight = Some(claims);
        self
    }

    /// How long one claim waits for work before asking again (default 30 s,
    /// at most 300 s). Waiting is woken by the store, so an idle worker
    /// makes one call per wait.
    pub fn claim_wait(mut self, wait: Duration) -> Self {
        self.config.claim_wait = wait;
        self
    }

    /// The most heads claimed from one session in one claim (default 1:
    /// sessions are served in turn, longest-waiting first).
    pub fn per_session_limit(mut self, limit: usize) -> Self {
        self.config.per_session_limit = limit;
        self
    }

    /// Serves only these sessions (default: every session).
    pub fn sessions(mut self, sessions: Vec<String>) -> Self {
        self.config.sessions = Some(sessions);
        self
    }

    /// The retry policy (default [`RetryPolicy::DEFAULT`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// How long one attempt may run (default 10 min; `None`: no limit).
    /// A handler still running then is stopped and the attempt fails with a
    /// retry, so a hung handler cannot hold its head, whose lease it keeps
    /// renewed, forever.
    pub fn handler_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.handler_timeout = timeout;
        self
    }

    /// How long shutdown lets running handlers finish (default 30 s) before
    /// it stops them and gives their heads back with a retry.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// Whether an attempt whose handler waits (is still running after its
    /// first poll) moves to a Tokio task of its own (default `true`): such
    /// attempts run in parallel on a multi-threaded runtime, and one whose
    /// handler blocks its thread delays only itself. A handler that
    /// finishes at its first poll is completed from the worker's task,
    /// which costs no task. `false` keeps every attempt in the worker's
    /// task: no task per attempt and no wake-ups across threads, but the
    /// attempts share one thread at a time, so a handler must never block
    /// (use `tokio::task::spawn_blocking` for CPU work) or it delays every
    /// attempt and their lease renewals.
    pub fn spawn_handlers(mut self, spawn: bool) -> Self {
        self.config.spawn_handlers = spawn;
        self
    }

    /// Runs a retention task beside the claims (default: none): at start,
    /// then every `every`, it prunes the sessions nothing was appended to
    /// for `idle_for` that have nothing left to do (no head leased,
    /// claimable, waiting or scheduled, no dead letter), as
    /// `Store::prune` defines, [`RETENTION_PAGE_LIMIT`](crate::RETENTION_PAGE_LIMIT)
    /// sessions a page and at most [`RETENTION_PAGES_PER_ROUND`](crate::RETENTION_PAGES_PER_ROUND)
    /// pages a round (a round that stops there continues where it stopped
    /// at the next). It logs what it deleted (`pruned idle sessions` at
    /// INFO, each session at DEBUG, in a span `a2_worker.retention`) and
    /// counts it in [`WorkerStats::pruned`]; a failed prune is logged (WARN),
    /// counted in [`WorkerStats::prune_errors`] and tried again next round,
    /// never stopping the worker. It stops when the worker starts shutting
    /// down. Both durations must be at least 1 ms.
    ///
    /// Every worker given this prunes: enable it on one or a few (several
    /// are safe, as each delete is atomic, but repeat the reads). Dead
    /// letters keep their sessions; prune those with `a2-store prune
    /// --include-dead-letters` after looking at them.
    pub fn retention(mut self, idle_for: Duration, every: Duration) -> Self {
        self.config.retention = Some(Retention { idle_for, every });
        self
    }

    /// The worker, or `InvalidInput` when no consumer is served, a consumer
    /// has two handlers, or an option is out of range (the claim it would
    /// make is checked by the store's own rules).
    pub fn build(self) -> Result<Worker, StoreError> {
        if let Some(name) = self.duplicate {
            return Err(StoreError::invalid_input(format!(
                "consumer '{name}' is served twice: give each consumer one handler"
            )));
        }
        let mut config = self.config;
        if config.claims_in_flight.is_none() {
            config.claims_in_flight = Some(if self.store.claims_in_one_step() {
                1
            } else {
                DEFAULT_CLAIMS_IN_FLIGHT
            });
        }
        if !(1..=MAX_WORK_LIMIT).contains(&config.max_in_flight) {
            return Err(StoreError::invalid_input(format!(
                "max_in_flight must be 1 to {MAX_WORK_LIMIT}, not {}",
                config.max_in_flight
            )));
        }
        if !(1..=MAX_WORK_LIMIT).contains(&config.claim_batch) {
            return Err(StoreError::invalid_input(format!(
                "claim_batch must be 1 to {MAX_WORK_LIMIT}, not {}",
                config.claim_batch
            )));
        }
        if config
            .claim_low_water
            .is_some_and(|low| !(1..=config.max_in_flight).contains(&low))
        {
            return Err(StoreError::invalid_input(format!(
                "claim_low_water must be 1 to max_in_flight ({}), not {}",
                config.max_in_flight,
                config.claim_low_water.unwrap_or_default()
            )));
        }
        let claims = config.claims_in_flight.unwrap_or(DEFAULT_CLAIMS_IN_FLIGHT);
        if !(1..=MAX_WORK_LIMIT).contains(&claims) {
            return Err(StoreError::invalid_input(format!(
                "claims_in_flight must be 1 to {MAX_WORK_LIMIT}, not {claims}"
            )));
        }
        if config.lease_ttl < Duration::from_millis(3) {
            return Err(StoreError::invalid_input(
                "lease_ttl must be at least 3 ms (it is renewed every third)",
            ));
        }
        let wait = millis(config.claim_wait);
        if !(1..=MAX_WAIT_MS).contains(&wait) {
            return Err(StoreError::invalid_input(format!(
                "claim_wait must be 1 ms to {MAX_WAIT_MS} ms, not {wait} ms"
            )));
        }
        if let Some(retention) = &config.retention {
            retention.check()?;
        }
        if config.handler_timeout.is_some_and(|t| t.is_zero()) {
            return Err(StoreError::invalid_input(
                "handler_timeout must be positive (or None for no limit)",
            ));
        }
        let has_log = self.consumers.iter().any(|c| c.log.is_some());
        let shared = Shared {
            store: self.store,
            handlers: self.handlers,
            completion_consumers: has_log.then(|| self.consumers.clone()),
            consumers: self.consumers.into(),
            config,
            counters: Counters::default(),
        };
        validate::claim_work(&shared.claim_request(
            shared.config.claim_batch.min(shared.config.max_in_flight),
            true,
        ))?;
        Ok(Worker {
            shared: Arc::new(shared),
        })
    }
}

/// Runs handlers for its consumers over a store: claims heads across
/// sessions (waiting when there are none), runs each in its own task with
/// its lease renewed, completes or fails it, and retries per its policy.
///
/// Start it with [`spawn`](Self::spawn) (a [`WorkerHandle`] stops it) or
/// [`run_until`](Self::run_until). Runs on Tokio.
pub struct Worker {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("consumers", &self.shared.consumers)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A builder of a worker over `store`.
    pub fn builder(store: Arc<dyn Store>) -> WorkerBuilder {
        WorkerBuilder {
            store,
            handlers: HashMap::new(),
            consumers: Vec::new(),
            duplicate: None,
            config: Config::default(),
        }
    }

    /// The holder name its claims are made under.
    pub fn holder(&self) -> &str {
        &self.shared.config.holder
    }

    /// Starts the worker in a task of its own; `InvalidInput` outside a
    /// Tokio runtime.
    pub fn spawn(self) -> Result<WorkerHandle, StoreError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::invalid_input("Worker::spawn must be called inside a Tokio runtime")
        })?;
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::clone(&self.shared);
        let join = runtime.spawn(run(Arc::clone(&shared), stopped));
        Ok(WorkerHandle {
            trigger: ShutdownTrigger {
                stop: Arc::new(stop),
            },
            join,
            shared,
        })
    }

    /// Runs the worker until `signal` resolves (e.g. `tokio::signal::ctrl_c()`
    /// mapped to `()`), then shuts it down gracefully and returns the summary.
    /// Dropping the future instead stops its attempts where they are,
    /// without giving their heads back: their leases expire (counting a
    /// failure each) before another worker takes them.
    pub async fn run_until<F>(self, signal: F) -> ShutdownSummary
    where
        F: Future<Output = ()>,
    {
        let (stop, stopped) = watch::channel(false);
        let running = run(Arc::clone(&self.shared), stopped);
        tokio::pin!(running);
        tokio::pin!(signal);
        tokio::select! {
            summary = &mut running => return summary,
            () = &mut signal => {
                stop.send_replace(true);
            }
        }
        running.await
    }
}

/// Asks a worker to shut down. Clones share the request; when every trigger
/// of a worker (its [`WorkerHandle`]'s included) is dropped, it shuts down
/// as if asked.
#[derive(Debug, Clone)]
pub struct ShutdownTrigger {
    stop: Arc<watch::Sender<bool>>,
}

impl ShutdownTrigger {
    /// Starts the shutdown: no more claims; running handlers get the grace
    /// period, then their heads are given back with a retry.
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
    }

    /// Whether shutdown was asked for.
    pub fn is_shutting_down(&self) -> bool {
        *self.stop.borrow()
    }
}

/// A running worker: its counts, and the way to stop it.
#[derive(Debug)]
pub struct WorkerHandle {
    trigger: ShutdownTrigger,
    join: JoinHandle<ShutdownSummary>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("holder", &self.config.holder)
            .finish_non_exhaustive()
    }
}

impl WorkerHandle {
    /// Its counts now.
    pub fn stats(&self) -> WorkerStats {
        self.shared.counters.snapshot()
    }

    /// The holder name its claims are made under.
    pub fn holder(&self) -> &str {
        &self.shared.config.holder
    }

    /// A trigger to shut it down from elsewhere (a signal handler).
    pub fn trigger(&self) -> ShutdownTrigger {
        self.trigger.clone()
    }

    /// Shuts it down (see [`ShutdownTrigger::shutdown`]) and waits until
    /// it stopped: at most the grace period plus the time to give the
    /// remaining heads back.
    pub async fn shutdown(self) -> ShutdownSummary {
        self.trigger.shutdown();
        self.join().await
    }

    /// Waits until it stops (shut down by a trigger, or on its own after
    /// an error no retry can fix), without asking it to.
    pub async fn join(self) -> ShutdownSummary {
        let Self {
            trigger,
            join,
            shared,
        } = self;
        let ended = join.await;
        drop(trigger);
        match ended {
            Ok(summary) => summary,
            Err(error) => ShutdownSummary {
                stats: shared.counters.snapshot(),
                error: Some(format!("the worker task ended abnormally: {error}")),
            },
        }
    }
}

/// Resolves when the flag is set or its sender is gone.
async fn raised(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await;
}

/// A store error that no retry of the same claim can fix.
fn is_fatal(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::InvalidInput | ErrorCode::IncompatibleSchema
    )
}

/// The attempts the worker's task drives: every attempt until its handler
/// first waits, and all of it when handlers are not spawned.
struct Jobs(FuturesUnordered<BoxFuture<'static, ()>>);

impl Jobs {
    fn push(&mut self, job: impl Future<Output = ()> + Send + 'static) {
        self.0.push(Box::pin(job));
    }

    /// Drives the attempts until one of them ends; never resolves while
    /// there are none.
    async fn next(&mut self) {
        if self.0.next().await.is_none() {
            std::future::pending::<()>().await;
        }
    }

    /// Drives the attempts while `work` runs, then returns its output.
    async fn alongside<T>(&mut self, work: impl Future<Output = T>) -> T {
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                done = &mut work => return done,
                () = self.next() => {}
            }
        }
    }
}

/// A claim's answer, with the slots reserved for the heads it asked for.
struct Answer {
    reserved: OwnedSemaphorePermit,
    asked: usize,
    result: Result<ClaimWorkResult, StoreError>,
}

type PendingClaim = BoxFuture<'static, Answer>;

/// The claims in flight: at most one that waits in the store for work (the
/// one started while no other was in flight), and claims that answer at
/// once, started beside it over a backlog.
#[derive(Default)]
struct Claims {
    waiting: Option<PendingClaim>,
    quick: FuturesUnordered<PendingClaim>,
}

impl Claims {
    fn len(&self) -> usize {
        usize::from(self.waiting.is_some()) + self.quick.len()
    }

    /// Starts a claim for as many heads as `reserved` holds slots; it waits
    /// for work only when no other claim is in flight.
    fn start(&mut self, shared: &Shared, reserved: OwnedSemaphorePermit) {
        let asked = reserved.num_permits();
        let wait = self.len() == 0;
        let request = shared.claim_request(asked, wait);
        bump(&shared.counters.claim_calls);
        let store = Arc::clone(&shared.store);
        let claim = async move {
            let result = store.claim_work(request).await;
            Answer {
                reserved,
                asked,
                result,
            }
        };
        if wait {
            self.waiting = Some(Box::pin(claim));
        } else {
            self.quick.push(Box::pin(claim));
        }
    }

    /// The next answer; never resolves while no claim is in flight.
    async fn next(&mut self) -> Answer {
        std::future::poll_fn(|cx| {
            if let Some(waiting) = self.waiting.as_mut() {
                if let std::task::Poll::Ready(answer) = waiting.as_mut().poll(cx) {
                    self.waiting = None;
                    return std::task::Poll::Ready(answer);
                }
            }
            match self.quick.poll_next_unpin(cx) {
                std::task::Poll::Ready(Some(answer)) => std::task::Poll::Ready(answer),
                _ => std::task::Poll::Pending,
            }
        })
        .await
    }
}

/// Starts an attempt for each head of a claim's answer, each in a slot
/// taken from the ones reserved for the claim (slots left over go back
/// when `reserved` is dropped), and reports the dead letters it found.
fn start_heads(
    shared: &Arc<Shared>,
    sessions: Vec<SessionClaim>,
    reserved: &mut OwnedSemaphorePermit,
    jobs: &mut Jobs,
    abandoned: &watch::Receiver<bool>,
) {
    for session in sessions {
        for dead in &session.dead_lettered {
            bump(&shared.counters.dead_lettered);
            tracing::error!(
                target: TARGET,
                session = %session.session_id,
                consumer = %dead.consumer,
                lane = dead.lane.as_deref(),
                index = dead.event.index,
                attempt = dead.dispatch.attempt_count,
                failures = dead.dispatch.failure_count,
                "dead-lettered: its lease expired at max_failures"
            );
        }
        for head in session.heads {
            // A claim asks for no more heads than the slots reserved for it.
            let Some(permit) = reserved.split(1) else {
                tracing::error!(target: TARGET, "the store handed out more heads than asked for; the extra waits for its lease to end");
                continue;
            };
            jobs.push(supervise(
                Arc::clone(shared),
                session.session_id.clone(),
                head,
                permit,
                abandoned.clone(),
            ));
        }
    }
}

/// The claim loop, then the shutdown.
///
/// Slots are taken for a claim before it starts, as many as it asks for,
/// and those its answer does not fill go back at once: claims in flight
/// never ask, together, for more heads than there are free slots. While
/// work trickles in (the last claim came back short) one claim is in
/// flight, for every free slot, waiting in the store; it answers with what
/// is claimable as soon as anything is, so a lone head goes out at once.
/// Once a claim comes back full (a backlog), up to `claims_in_flight`
/// claims run at once, each for its share of the free slots, and a slot
/// that frees up is asked for by the next claim while the others run.
/// Attempts that are ready are driven before the next claim is sized, so
/// slots freed together are asked for together. Over a backlog with one
/// claim at a time, the next waits for `claim_low_water` free slots, at
/// most [`CLAIM_LOW_WATER_WAIT`] after one freed.
async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> ShutdownSummary {
    let (abandon, abandoned) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(shared.config.max_in_flight));
    let mut jobs = Jobs(FuturesUnordered::new());
    let mut claims = Claims::default();
    let mut error = None;
    let mut pause = CLAIM_ERROR_PAUSE;
    // After a failed claim, no claim starts before this.
    let mut paused_until: Option<tokio::time::Instant> = None;
    // Whether the last claim came back full.
    let mut backlog = false;
    let most = shared.config.claim_batch.min(shared.config.max_in_flight);
    let low_water = shared
        .config
        .claim_low_water
        .unwrap_or(shared.config.max_in_flight / 2)
        .clamp(1, shared.config.max_in_flight);
    // Since when free slots have waited for the low-water mark.
    let mut gathering_since: Option<tokio::time::Instant> = None;
    tracing::info!(target: TARGET, holder = %shared.config.holder, "worker started");
    let retention = shared.config.retention.map(|config| {
        retention::spawn(
            Arc::clone(&shared.store),
            config,
            &shared.config.holder,
            Arc::clone(&shared) as Arc<dyn Tally>,
            stop.clone(),
        )
    });
    loop {
        let allowed = if backlog {
            shared
                .config
                .claims_in_flight
                .unwrap_or(DEFAULT_CLAIMS_IN_FLIGHT)
        } else {
            1
        };
        let free = slots.available_permits();
        let gathering = paused_until.is_none()
            && backlog
            && allowed == 1
            && claims.len() == 0
            && (1..low_water).contains(&free)
            && gathering_since
                .get_or_insert_with(tokio::time::Instant::now)
                .elapsed()
                < CLAIM_LOW_WATER_WAIT;
        if !gathering {
            gathering_since = None;
        }
        if paused_until.is_none() && !gathering {
            while claims.len() < allowed {
                let free = slots.available_permits();
                if free == 0 {
                    break;
                }
                let share = free.div_ceil(allowed - claims.len()).min(most);
                let Ok(reserved) =
                    Arc::clone(&slots).try_acquire_many_owned(u32::try_from(share).unwrap_or(1))
                else {
                    break;
                };
                claims.start(&shared, reserved);
            }
        }
        let may_start = paused_until.is_none() && claims.len() < allowed && !gathering;
        let gathered = async {
            match gathering_since {
                Some(since) if gathering => {
                    let enough = slots.acquire_many(u32::try_from(low_water).unwrap_or(1));
                    // Either is the signal to size the claim again.
                    let _ = tokio::time::timeout_at(since + CLAIM_LOW_WATER_WAIT, enough).await;
                }
                _ => std::future::pending().await,
            }
        };
        let resume = async {
            match paused_until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let answer = tokio::select! {
            biased;
            () = raised(&mut stop) => break,
            // Attempts first: slots that free up now are in the next claim.
            () = jobs.next() => continue,
            answer = claims.next() => answer,
            // A slot freed while another claim may start: size it next round.
            _ = slots.acquire(), if may_start => continue,
            // Enough slots free for the next claim, or waited long enough.
            () = gathered => continue,
            () = resume => {
                paused_until = None;
                continue;
            }
        };
        let Answer {
            mut reserved,
            asked,
            result,
        } = answer;
        match result {
            Ok(ClaimWorkResult::Claimed { sessions }) => {
                pause = CLAIM_ERROR_PAUSE;
                let got: usize = sessions.iter().map(|s| s.heads.len()).sum();
                backlog = got >= asked;
                start_heads(&shared, sessions, &mut reserved, &mut jobs, &abandoned);
            }
            // Busy, Settled, or an outcome added later: nothing to start.
            Ok(_) => {
                pause = CLAIM_ERROR_PAUSE;
                backlog = false;
            }
            Err(claim_error) if is_fatal(claim_error.code()) => {
                tracing::error!(target: TARGET, error = %claim_error, "claim refused; the worker stops");
                error = Some(claim_error.to_string());
                break;
            }
            Err(claim_error) => {
                backlog = false;
                // Claims failing together count as one failure.
                if paused_until.is_none() {
                    tracing::warn!(target: TARGET, error = %claim_error, pause_ms = millis(pause), "claim failed; trying again");
                    paused_until = Some(tokio::time::Instant::now() + pause);
                    pause = pause.saturating_mul(2).min(CLAIM_ERROR_PAUSE_MAX);
                }
            }
        }
    }
    // The retention task stops with the claims.
    drop(retention);
    // No more claims: one waiting in the store is dropped; those that
    // answer at once are let answer, and their heads run like the others.
    claims.waiting = None;
    while !claims.quick.is_empty() {
        let answer = jobs.alongside(claims.next()).await;
        let Answer {
            mut reserved,
            result,
            ..
        } = answer;
        if let Ok(ClaimWorkResult::Claimed { sessions }) = result {
            start_heads(&shared, sessions, &mut reserved, &mut jobs, &abandoned);
        }
    }
    let in_flight = shared.counters.in_flight.load(Ordering::Relaxed);
    tracing::info!(target: TARGET, holder = %shared.config.holder, in_flight, "worker stopping: no more claims");
    // Every attempt holds a slot until it ends, in this task or its own.
    let all_slots = u32::try_from(shared.config.max_in_flight).unwrap_or(u32::MAX);
    let all_done = Arc::clone(&slots).acquire_many_owned(all_slots);
    tokio::pin!(all_done);
    let finished = jobs
        .alongside(tokio::time::timeout(
            shared.config.shutdown_grace,
            &mut all_done,
        ))
        .await
        .is_ok();
    if !finished {
        let remaining = shared.counters.in_flight.load(Ordering::Relaxed);
        tracing::warn!(target: TARGET, remaining, "grace period over: giving the remaining heads back");
        abandon.send_replace(true);
        let _ = jobs.alongside(&mut all_done).await;
    }
    let stats = shared.counters.snapshot();
    tracing::info!(target: TARGET, holder = %shared.config.holder, ?stats, "worker stopped");
    ShutdownSummary { stats, error }
}

/// How an attempt's handler ended.
enum Ended {
    Joined(Result<HandlerResult, Box<dyn Any + Send>>),
    TimedOut(Duration),
    Abandoned,
}

/// What a failure asks of the store.
enum FailMode {
    /// Retry after `delay`, dead-lettering at the policy's `max_failures`.
    Retry(Duration),
    /// Dead-letter now.
    DeadLetter,
    /// Give the head back at shutdown: claimable at once, never dead-lettered.
    Release,
}

/// One claimed head, from its claim to its completion or failure. Runs in
/// the worker's task; a handler still running after its first poll moves,
/// with the rest of the attempt, to a task of its own when the worker
/// spawns handlers.
async fn supervise(
    shared: Arc<Shared>,
    session_id: String,
    head: Head,
    permit: OwnedSemaphorePermit,
    abandoned: watch::Receiver<bool>,
) {
    let span = tracing::info_span!(
        target: TARGET,
        "a2_worker.job",
        session = %session_id,
        consumer = %head.consumer,
        lane = head.lane.as_deref(),
        index = head.event.index,
        attempt = head.dispatch.attempt_count,
    );
    let counters = &shared.counters;
    bump(&counters.claimed);
    counters.in_flight.fetch_add(1, Ordering::Relaxed);
    let job = Job::new(
        session_id,
        head,
        Arc::clone(&shared.store),
        Arc::clone(&shared.consumers),
        LeaseToken::new(),
    );
    let attempt = Attempt {
        shared,
        job,
        _permit: permit,
    };
    attempt.run(abandoned, span.clone()).instrument(span).await;
}

/// An attempt in progress; holds its in-flight slot until dropped.
struct Attempt {
    shared: Arc<Shared>,
    job: Job,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.shared
            .counters
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The running handler of an attempt: its future, panics caught.
type Running = futures::future::CatchUnwind<AssertUnwindSafe<BoxFuture<'static, HandlerResult>>>;

impl Attempt {
    fn head(&self) -> &Head {
        self.job.head()
    }

    fn session_id(&self) -> &str {
        self.job.session_id()
    }

    fn attempt(&self) -> u32 {
        self.job.attempt()
    }

    async fn run(self, abandoned: watch::Receiver<bool>, span: tracing::Span) {
        let shared = &self.shared;
        tracing::info!(target: TARGET, failures = self.head().dispatch.failure_count, "claimed");
        let Some(handler) = shared.handlers.get(&self.head().consumer).cloned() else {
            // The store handed out a consumer this worker does not serve.
            let message = format!("no handler for consumer '{}'", self.head().consumer);
            tracing::error!(target: TARGET, "{message}");
            self.fail(FailMode::Release, message).await;
            return;
        };
        // The handler runs inside the attempt's task; a panic is caught
        // there and is a failed attempt. Stopping it (timeout, shutdown)
        // drops it.
        let job = self.job.clone();
        let handling: BoxFuture<'static, HandlerResult> =
            Box::pin(async move { handler.handle(job).await });
        let mut task: Running = AssertUnwindSafe(handling).catch_unwind();
        // A handler that finishes at once needs no task, renewal or timer.
        if let std::task::Poll::Ready(joined) = futures::poll!(&mut task) {
            self.settle(Ended::Joined(joined)).await;
            return;
        }
        let spawn = self.shared.config.spawn_handlers;
        let rest = async move {
            let ended = self.watch(task, abandoned).await;
            self.settle(ended).await;
        };
        if spawn {
            tokio::spawn(rest.instrument(span));
        } else {
            Box::pin(rest).await;
        }
    }

    /// Waits for a running handler while renewing its lease, until it
    /// returns, reaches the handler timeout or shutdown abandons it.
    async fn watch(&self, mut task: Running, mut abandoned: watch::Receiver<bool>) -> Ended {
        let renew = self.renew_until_lost(self.job.lease());
        tokio::pin!(renew);
        let timeout = self.shared.config.handler_timeout;
        let deadline = async move {
            match timeout {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        let mut renewing = true;
        loop {
            tokio::select! {
                biased;
                joined = &mut task => return Ended::Joined(joined),
                () = &mut renew, if renewing => renewing = false,
                () = &mut deadline => return Ended::TimedOut(timeout.unwrap_or_default()),
                () = raised(&mut abandoned) => return Ended::Abandoned,
            }
        }
    }

    /// Renews the lease every [`RENEW_FRACTION`] of the ttl; returns once
    /// it is lost, after marking `lease` lost.
    async fn renew_until_lost(&self, lease: &LeaseToken) {
        let shared = &self.shared;
        let every = shared.renew_every();
        let held = HeldClaim {
            cursor: self.head().cursor_ref(),
            attempt: self.attempt(),
        };
        loop {
            tokio::time::sleep(every).await;
            let request = RenewRequest {
                // Fenced by the session's incarnation: a renewal never
                // reaches a new session of the same id after a delete.
                incarnation: self.head().fence(),
                session_id: self.session_id().to_owned(),
                holder: shared.config.holder.clone(),
                claims: vec![held.clone()],
                ttl_ms: Some(millis(shared.config.lease_ttl)),
                expires_at_ms: None,
            };
            match shared.store.renew_claims(request).await {
                Ok(renewed) if renewed.renewed.contains(&held.cursor) => {
                    tracing::debug!(target: TARGET, "lease renewed");
                }
                Ok(renewed) => {
                    let reason = if renewed.superseded.contains(&held.cursor) {
                        "superseded: another attempt owns the head, or it moved on"
                    } else {
                        "no longer held: the lease ended before it was renewed"
                    };
                    lease.mark_lost();
                    bump(&shared.counters.leases_lost);
                    tracing::warn!(target: TARGET, reason, "lease lost");
                    return;
                }
                Err(error) => {
                    tracing::warn!(target: TARGET, error = %error, next_ms = millis(every), "lease renewal failed; trying again");
                }
            }
        }
    }

    async fn settle(&self, ended: Ended) {
        let counters = &self.shared.counters;
        match ended {
            Ended::Joined(Ok(Ok(events))) => self.complete(events).await,
            Ended::Joined(Ok(Err(error))) => self.handler_failed(error).await,
            Ended::Joined(Err(panic)) => {
                bump(&counters.panicked);
                let message = format!("handler panicked: {}", panic_text(panic.as_ref()));
                tracing::warn!(target: TARGET, error = %message, "handler did not finish");
                self.fail(self.retry_mode(None), message).await;
            }
            Ended::TimedOut(limit) => {
                bump(&counters.timed_out);
                let message = format!("handler timed out after {} ms", millis(limit));
                tracing::warn!(target: TARGET, error = %message, "handler stopped");
                self.fail(self.retry_mode(None), message).await;
            }
            Ended::Abandoned => {
                let message = "worker shut down before the handler finished".to_owned();
                self.fail(FailMode::Release, message).await;
            }
        }
    }

    fn retry_mode(&self, delay: Option<Duration>) -> FailMode {
        let failures = self.head().dispatch.failure_count.saturating_add(1);
        FailMode::Retry(delay.unwrap_or_else(|| self.shared.config.retry.delay(failures)))
    }

    async fn handler_failed(&self, error: HandlerError) {
        let mode = if error.is_permanent() {
            FailMode::DeadLetter
        } else {
            self.retry_mode(error.delay())
        };
        self.fail(mode, error.message().to_owned()).await;
    }

    async fn complete(&self, mut events: Vec<NewEvent>) {
        let shared = &self.shared;
        let counters = &shared.counters;
        let job = &self.job;
        assign_ids(
            &mut events,
            job.session_id(),
            job.cause(),
            OutputKind::Returned,
            0,
        );
        // Built per call (a repeat after a transient error sends the same
        // request again), so the first call needs no copy kept aside.
        let request = || CompleteRequest {
            incarnation: job.head().fence(),
            session_id: job.session_id().to_owned(),
            consumer: job.consumer().to_owned(),
            lane: job.lane().map(str::to_owned),
            index: job.index(),
            attempt: job.attempt(),
            events: events.clone(),
            consumers: shared.completion_consumers.clone(),
        };
        let completed = with_transient_retry(|| shared.store.complete_attempt(request())).await;
        match completed {
            Ok(CompleteResult::Completed { events }) => {
                bump(&counters.completed);
                tracing::info!(target: TARGET, returned = events.len(), "completed");
            }
            Ok(CompleteResult::Superseded) => {
                bump(&counters.superseded);
                tracing::warn!(target: TARGET, "completion superseded: the attempt is no longer current, nothing applied");
            }
            Ok(other) => {
                bump(&counters.unsettled);
                tracing::error!(target: TARGET, outcome = ?other, "completion answered with an outcome this worker does not know; the lease will expire");
            }
            Err(error) => match error.code() {
                ErrorCode::SessionCleared
                | ErrorCode::NoSuchEvent
                | ErrorCode::SupersededAttempt => {
                    bump(&counters.superseded);
                    tracing::warn!(target: TARGET, error = %error, "completion superseded: nothing applied");
                }
                ErrorCode::InvalidInput
                | ErrorCode::IdempotencyConflict
                | ErrorCode::PartialDuplicateBatch => {
                    let message = format!("completion rejected: {error}");
                    self.fail(FailMode::DeadLetter, message).await;
                }
                code if is_transient(code) => {
                    let message = format!("completion failed: {error}");
                    tracing::warn!(target: TARGET, error = %error, "completion failed after retries");
                    self.fail(self.retry_mode(None), message).await;
                }
                _ => {
                    let message = format!("completion failed: {error}");
                    self.fail(self.retry_mode(None), message).await;
                }
            },
        }
    }

    async fn fail(&self, mode: FailMode, message: String) {
        let shared = &self.shared;
        let counters = &shared.counters;
        let (max_failures, retry_after, releasing) = match mode {
            FailMode::Retry(delay) => (
                Some(shared.config.retry.dead_letter_at()),
                Some(delay),
                false,
            ),
            FailMode::DeadLetter => (Some(1), None, false),
            FailMode::Release => (None, None, true),
        };
        let job = &self.job;
        let request = || FailRequest {
            incarnation: job.head().fence(),
            session_id: job.session_id().to_owned(),
            consumer: job.consumer().to_owned(),
            lane: job.lane().map(str::to_owned),
            index: job.index(),
            attempt: job.attempt(),
            error: message.clone(),
            max_failures,
            retry_after_ms: retry_after.map(millis),
        };
        match with_transient_retry(|| shared.store.fail_attempt(request())).await {
            Ok(result) => match result.outcome {
                FailOutcome::Failed if releasing => {
                    bump(&counters.released);
                    tracing::info!(target: TARGET, failures = result.failure_count, error = %message, "given back at shutdown");
                }
                FailOutcome::Failed => {
                    bump(&counters.failed);
                    tracing::warn!(
                        target: TARGET,
                        failures = result.failure_count,
                        retry_in_ms = retry_after.map(millis),
                        error = %message,
                        "failed; retried later"
                    );
                }
                FailOutcome::DeadLettered => {
                    bump(&counters.dead_lettered);
                    tracing::error!(target: TARGET, failures = result.failure_count, error = %message, "dead-lettered");
                }
                FailOutcome::Superseded => {
                    bump(&counters.superseded);
                    tracing::warn!(target: TARGET, error = %message, "failure superseded: the attempt is no longer current");
                }
                other => {
                    bump(&counters.unsettled);
                    tracing::error!(target: TARGET, outcome = ?other, error = %message, "failure answered with an outcome this worker does not know; the lease will expire");
                }
            },
            Err(error) => {
                bump(&counters.unsettled);
                tracing::error!(
                    target: TARGET,
                    error = %error,
                    handler_error = %message,
                    "could not record the failure; the lease will expire and count it"
                );
            }
        }
    }
}

/// The text of a panic's payload.
fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-text panic payload".to_owned()
    }
}
