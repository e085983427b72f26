//! Work across sessions: what one `claim_work` costs as the number of
//! sessions grows (1% of them with work), next to a `claim_available` of one
//! known session; and how long a small session's message waits to be
//! claimed by workers calling `claim_work` while another session holds a
//! long backlog, against the same run without it.
//!
//! The contract asks the first to grow at most 2x from 100 to 100,000
//! sessions, and the second to stay within 2x of the run without a backlog.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult, CompleteRequest,
    CompleteResult, ConsumerDeclaration, Head, ManualClock, NewEvent, Store, Target,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use futures::StreamExt;
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::fixture::{
    append_all, claim_one, complete, must, open_store, work_events, LEASE_MS, START_MS, STORE_ROWS,
};
use crate::StoreFactory;

/// The consumer every work body serves; every event targets its lane `L1`.
const CONSUMER: &str = "agent";

/// The lane of [`CONSUMER`] every event targets.
const LANE: &str = "L1";

/// Store calls the fixture builders keep in flight at once (the benchmark
/// PostgreSQL pools hold 8 connections).
const BUILD_CALLS: usize = 8;

/// Heads appended to a work session whenever it has none left.
const CHUNK: u64 = 100;

/// Untimed iterations run on a freshly built scaling fixture.
const SETTLE_OPS: u64 = 200;

/// The least number of rows a scaling fixture may grow by before it is rebuilt.
const MIN_GROWTH: u64 = 2_000;

/// Knobs of the work bodies read from the environment, so quick runs can
/// shrink them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkSettings {
    /// The most sessions the scaling fixture holds (`A2_BENCH_MAX_SESSIONS`,
    /// default 100,000).
    pub max_sessions: u64,
    /// The backlog of the fairness body's big session
    /// (`A2_BENCH_BACKLOG`, default 10,000).
    pub backlog: u64,
}

impl WorkSettings {
    /// The default largest scaling fixture, in sessions.
    pub const DEFAULT_MAX_SESSIONS: u64 = 100_000;

    /// The default backlog of the fairness body, in events.
    pub const DEFAULT_BACKLOG: u64 = 10_000;

    /// Settings from `A2_BENCH_MAX_SESSIONS` and `A2_BENCH_BACKLOG` (an
    /// unset or unparsable value keeps its default; `_` separators allowed).
    pub fn from_env() -> Self {
        let read = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|text| text.trim().replace('_', "").parse::<u64>().ok())
                .unwrap_or(default)
        };
        Self {
            max_sessions: read("A2_BENCH_MAX_SESSIONS", Self::DEFAULT_MAX_SESSIONS),
            backlog: read("A2_BENCH_BACKLOG", Self::DEFAULT_BACKLOG),
        }
    }
}

impl Default for WorkSettings {
    fn default() -> Self {
        Self {
            max_sessions: Self::DEFAULT_MAX_SESSIONS,
            backlog: Self::DEFAULT_BACKLOG,
        }
    }
}

/// The consumers every claim of these bodies serves.
fn served() -> Vec<ConsumerDeclaration> {
    vec![ConsumerDeclaration::targeted(CONSUMER)]
}

/// `count` messages for the lane every body serves.
fn messages(count: u64, first_seq: u64) -> Vec<NewEvent> {
    work_events(
        "message",
        count as usize,
        first_seq,
        &[Target::lane(CONSUMER, LANE)],
    )
}

/// A one-head `claim_work` by `holder` (per-session limit 1), waiting up to
/// `wait_ms` when given.
fn work_request(holder: &str, wait_ms: Option<i64>) -> ClaimWorkRequest {
    ClaimWorkRequest {
        limit: Some(1),
        per_session_limit: Some(1),
        wait_ms,
        ..ClaimWorkRequest::new(holder, served(), LEASE_MS)
    }
}

/// The operation measured on a scaling fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkScalingOp {
    /// One `claim_work` (limit 1, per-session limit 1) across every session.
    ClaimWork,
    /// One `claim_available` (limit 1) of a known session with work, the
    /// sessions with work taken in turn as `claim_work` serves them: the
    /// per-session claim a cross-session claim is compared with, touching
    /// the same sessions.
    ClaimAvailable,
}

impl WorkScalingOp {
    /// The function id of `backend`'s figure: the backend's name for
    /// `claim_work`, `<backend>-claim_available` for the baseline.
    pub fn function_id(self, backend: &str) -> String {
        match self {
            Self::ClaimWork => backend.to_owned(),
            Self::ClaimAvailable => format!("{backend}-claim_available"),
        }
    }
}

/// `sessions` sessions on one store: every hundredth (1%, at least one) has
/// a lane with claimable heads, every other one a finished lane (one
/// message, claimed and completed: a cursor and no work left).
struct ScaleFixture {
    sessions: u64,
    clock: ManualClock,
    store: Arc<dyn Store>,
    /// The sessions with work, in id order.
    work: Vec<String>,
    /// Claimable heads left in each session with work.
    pending: HashMap<String, u64>,
    /// Rows appended since the build.
    added: u64,
    seq: u64,
    /// How many `claim_available`s were made: the next one claims
    /// `work[turn % work.len()]`.
    turn: usize,
}

/// The id of the `index`th session of a scaling fixture.
fn scale_session(index: u64) -> String {
    format!("work-{index:06}")
}

impl ScaleFixture {
    async fn build(factory: &dyn StoreFactory, sessions: u64) -> Self {
        let clock = ManualClock::new(START_MS);
        let store = open_store(factory, &clock).await;
        let sessions = sessions.max(1);
        let (work, idle): (Vec<u64>, Vec<u64>) = (0..sessions).partition(|index| index % 100 == 0);
        let idle = idle.into_iter().map(scale_session).collect::<Vec<_>>();
        let work = work.into_iter().map(scale_session).collect::<Vec<_>>();
        let shared: &dyn Store = store.as_ref();
        let consumers = served();
        let consumers = consumers.as_slice();
        futures::stream::iter(&idle)
            .map(|session| async move {
                must(
                    "append to an idle session",
                    shared
                        .append(session, messages(1, 0), AppendOptions::default())
                        .await,
                );
                let head = claim_one(shared, session, "builder", Some(consumers)).await;
                complete(shared, session, &head, None).await;
            })
            .buffer_unordered(BUILD_CALLS)
            .collect::<Vec<()>>()
            .await;
        futures::stream::iter(&work)
            .map(|session| async move {
                append_all(shared, session, messages(CHUNK, 0), None).await;
            })
            .buffer_unordered(BUILD_CALLS)
            .collect::<Vec<()>>()
            .await;
        let pending = work
            .iter()
            .map(|session| (session.clone(), CHUNK))
            .collect();
        Self {
            sessions,
            clock,
            store,
            work,
            pending,
            added: 0,
            seq: CHUNK,
            turn: 0,
        }
    }

    /// A fixture of `sessions` after [`SETTLE_OPS`] untimed `op`s (the first
    /// calls after a big build are not representative).
    async fn ready(factory: &dyn StoreFactory, sessions: u64, op: WorkScalingOp) -> Self {
        let mut fixture = Self::build(factory, sessions).await;
        fixture.run(op, SETTLE_OPS).await;
        fixture
    }

    /// The rows the fixture may grow by before it is rebuilt: its size, at
    /// least [`MIN_GROWTH`].
    fn budget(&self) -> u64 {
        self.sessions.max(MIN_GROWTH)
    }

    /// Completes `head` of `session` and appends a chunk to the session when
    /// it has no claimable head left (untimed), so every iteration sees the
    /// same shape: 1% of the sessions with work.
    async fn finish(&mut self, session: &str, head: &Head) {
        complete(self.store.as_ref(), session, head, None).await;
        let Some(left) = self.pending.get_mut(session) else {
            panic!("benchmark claimed a head of '{session}', which has no work");
        };
        *left = left.saturating_sub(1);
        if *left == 0 {
            append_all(
                self.store.as_ref(),
                session,
                messages(CHUNK, self.seq),
                None,
            )
            .await;
            self.seq += CHUNK;
            self.added += CHUNK;
            *left = CHUNK;
        }
    }

    /// Runs `iters` operations and returns the time the claims took (the
    /// completions and refills are not timed). The clock moves 1 ms before
    /// each claim, so `claim_work` rotates over the sessions with work.
    async fn run(&mut self, op: WorkScalingOp, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        let consumers = served();
        for _ in 0..iters {
            self.clock.advance(1);
            let (session, head) = match op {
                WorkScalingOp::ClaimWork => {
                    let request = work_request("w1", None);
                    let start = Instant::now();
                    let result = self.store.claim_work(request).await;
                    total += start.elapsed();
                    take_one(must("claim_work", result))
                }
                WorkScalingOp::ClaimAvailable => {
                    let session = self.work[self.turn % self.work.len()].clone();
                    self.turn += 1;
                    let request = ClaimRequest {
                        session_id: session.clone(),
                        holder: "w1".to_owned(),
                        ttl_ms: Some(LEASE_MS),
                        consumers: Some(consumers.clone()),
                        limit: Some(1),
                        ..ClaimRequest::default()
                    };
                    let start = Instant::now();
                    let result = self.store.claim_available(request).await;
                    total += start.elapsed();
                    match must("claim_available", result) {
                        ClaimResult::Claimed { mut heads, .. } if heads.len() == 1 => {
                            (session, heads.swap_remove(0))
                        }
                        other => {
                            panic!("benchmark expected one head in '{session}', got {other:?}")
                        }
                    }
                }
            };
            self.finish(&session, &head).await;
        }
        total
    }
}

/// The one head of a `claim_work` answer, or panics.
fn take_one(result: ClaimWorkResult) -> (String, Head) {
    if let ClaimWorkResult::Claimed { sessions } = &result {
        if let [claim] = sessions.as_slice() {
            if let [head] = claim.heads.as_slice() {
                return (claim.session_id.clone(), head.clone());
            }
        }
    }
    panic!("benchmark expected one claimed head, got {result:?}")
}

/// The cross-session claim series of one backend: one fixture at a time
/// (built the first time a benchmark of its size runs, kept for every
/// operation measured on that size, rebuilt once it has grown by its size,
/// at least 2,000 rows).
pub struct WorkScaling<'f> {
    factory: &'f dyn StoreFactory,
    fixture: Option<ScaleFixture>,
}

impl<'f> WorkScaling<'f> {
    /// A series of `factory`'s backend with no fixture built yet.
    pub fn new(factory: &'f dyn StoreFactory) -> Self {
        Self {
            factory,
            fixture: None,
        }
    }

    /// Registers `op` on `sessions` sessions of which 1% have work (the
    /// claim is timed, the completion of the claimed head is not); throughput
    /// counts claims. Id `(op's function id, sessions)`. A fixture of
    /// another size is dropped first.
    pub fn bench(
        &mut self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        rt: &Runtime,
        sessions: u64,
        op: WorkScalingOp,
    ) {
        let factory = self.factory;
        let slot = &mut self.fixture;
        group.throughput(Throughput::Elements(1));
        let id = BenchmarkId::new(op.function_id(factory.name()), sessions);
        group.bench_function(id, |b| {
            // Build outside `iter_custom` (criterion sizes the measurement
            // by the wall time of its warm-up calls), and drop the old
            // fixture first so two are never held at once.
            if slot
                .as_ref()
                .is_some_and(|f| f.sessions != sessions.max(1) || f.added > f.budget())
            {
                *slot = None;
            }
            if slot.is_none() {
                *slot = Some(rt.block_on(ScaleFixture::ready(factory, sessions, op)));
            }
            b.iter_custom(|iters| {
                rt.block_on(async {
                    // Rebuilt while measuring only when far past its budget.
                    if slot.as_ref().is_some_and(|f| f.added > 4 * f.budget()) {
                        *slot = None;
                    }
                    let fixture = match slot {
                        Some(fixture) => fixture,
                        None => slot.insert(ScaleFixture::ready(factory, sessions, op).await),
                    };
                    fixture.run(op, iters).await
                })
            })
        });
    }

    /// Drops the fixture built so far (frees its memory or files).
    pub fn release(&mut self) {
        self.fixture = None;
    }
}

/// Small sessions of the fairness body, one message each per round.
pub const FAIRNESS_SMALL_SESSIONS: u64 = 199;

/// Workers of the fairness body, claiming at once.
pub const FAIRNESS_WORKERS: usize = 3;

/// How long a fairness worker handles each message before completing it:
/// real workers take time, and workers that complete at once would measure
/// how a store saturated by claims slows the producer's appends, not the
/// order in which claims serve the sessions.
pub const FAIRNESS_HANDLING: Duration = Duration::from_millis(1);

/// How long a fairness worker's `claim_work` waits for work, ms (also how
/// long stopping the workers may take).
const WORKER_WAIT_MS: i64 = 20;

/// The longest a fairness round may take before the body gives up.
const ROUND_TIMEOUT: Duration = Duration::from_secs(120);

/// The big session; its id sorts before every small one, so a claim that
/// broke ties by session id would serve it first.
const BACKLOG_SESSION: &str = "fair-0-backlog";

/// The id of the `index`th small session of the fairness body.
fn small_session(index: u64) -> String {
    format!("fair-small-{index:03}")
}

/// What the fairness workers and the producer share.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// Small-session heads claimed since the fixture was built.
    small_claimed: AtomicU64,
    /// The count of `small_claimed` that ends the current round.
    target: AtomicU64,
    /// When the head ending the current round was claimed.
    round_end: Mutex<Option<Instant>>,
    /// Backlog heads claimed since the fixture was built.
    backlog_claimed: AtomicU64,
    /// The first store error a worker met.
    error: Mutex<Option<String>>,
    /// Woken when a round ends or a worker fails.
    progress: Notify,
}

impl Shared {
    fn fail(&self, step: &str, error: &dyn std::fmt::Display) {
        let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert_with(|| format!("benchmark step '{step}' failed: {error}"));
        self.stop.store(true, Ordering::SeqCst);
        self.progress.notify_one();
    }

    fn error(&self) -> Option<String> {
        self.error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// One fairness worker: claims one head at a time with `claim_work`
/// (waiting up to [`WORKER_WAIT_MS`]), moving the clock 1 ms before each
/// claim, handles it for [`FAIRNESS_HANDLING`] and completes it, until told
/// to stop.
async fn worker(store: Arc<dyn Store>, clock: ManualClock, shared: Arc<Shared>, holder: String) {
    while !shared.stop.load(Ordering::SeqCst) {
        clock.advance(1);
        let result = match store
            .claim_work(work_request(&holder, Some(WORKER_WAIT_MS)))
            .await
        {
            Ok(result) => result,
            Err(error) => return shared.fail("claim_work", &error),
        };
        let claimed_at = Instant::now();
        for (session, head) in result.heads() {
            if session == BACKLOG_SESSION {
                shared.backlog_claimed.fetch_add(1, Ordering::SeqCst);
            } else {
                let claimed = shared.small_claimed.fetch_add(1, Ordering::SeqCst) + 1;
                if claimed == shared.target.load(Ordering::SeqCst) {
                    *shared
                        .round_end
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(claimed_at);
                    shared.progress.notify_one();
                }
            }
            tokio::time::sleep(FAIRNESS_HANDLING).await;
            let request = CompleteRequest {
                incarnation: None,
                session_id: session.to_owned(),
                consumer: head.consumer.clone(),
                lane: head.lane.clone(),
                index: head.event.index,
                attempt: head.dispatch.attempt_count,
                events: Vec::new(),
                consumers: None,
            };
            match store.complete_attempt(request).await {
                Ok(CompleteResult::Completed { .. }) => {}
                Ok(other) => {
                    let error = format!("the completion was not applied: {other:?}");
                    return shared.fail("complete_attempt", &error);
                }
                Err(error) => return shared.fail("complete_attempt", &error),
            }
        }
    }
}

/// The fairness workers of one `iter_custom` call.
struct Workers {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Workers {
    fn spawn(fixture: &FairFixture) -> Self {
        fixture.shared.stop.store(false, Ordering::SeqCst);
        let tasks = (0..FAIRNESS_WORKERS)
            .map(|n| {
                tokio::spawn(worker(
                    Arc::clone(&fixture.store),
                    fixture.clock.clone(),
                    Arc::clone(&fixture.shared),
                    format!("w{n}"),
                ))
            })
            .collect();
        Self {
            shared: Arc::clone(&fixture.shared),
            tasks,
        }
    }

    /// Stops the workers after their current claim and waits for them.
    async fn stop(self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            if let Err(error) = task.await {
                panic!("a fairness worker failed: {error}");
            }
        }
        if let Some(error) = self.shared.error() {
            panic!("{error}");
        }
    }

    /// Panics when a worker failed or ended before it was told to stop.
    fn check(&self) {
        if let Some(error) = self.shared.error() {
            panic!("{error}");
        }
        if self.tasks.iter().any(JoinHandle::is_finished) {
            panic!("a fairness worker ended before the round did");
        }
    }
}

/// The store of the fairness body: the small sessions (created by a first,
/// untimed round) and, when `backlog > 0`, the big session holding about
/// `backlog` claimable messages on its lane.
struct FairFixture {
    clock: ManualClock,
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    backlog: u64,
    /// Backlog messages appended since the build.
    backlog_appended: u64,
    /// Rows appended since the build (rebuilt past [`STORE_ROWS`]).
    rows: u64,
    seq: u64,
}

impl FairFixture {
    async fn build(factory: &dyn StoreFactory, backlog: u64) -> Self {
        let clock = ManualClock::new(START_MS);
        let store = open_store(factory, &clock).await;
        let mut fixture = Self {
            clock,
            store,
            shared: Arc::new(Shared::default()),
            backlog,
            backlog_appended: 0,
            rows: 0,
            seq: 0,
        };
        fixture.top_up().await;
        fixture
    }

    /// A fixture after a first, untimed round (which creates the small
    /// sessions, so timed rounds never meet a new session).
    async fn ready(factory: &dyn StoreFactory, backlog: u64) -> Self {
        let mut fixture = Self::build(factory, backlog).await;
        let workers = Workers::spawn(&fixture);
        fixture.round(&workers).await;
        workers.stop().await;
        fixture
    }

    /// Appends to the backlog what the workers took from it, so it holds
    /// `backlog` claimable messages again (untimed).
    async fn top_up(&mut self) {
        let claimed = self.shared.backlog_claimed.load(Ordering::SeqCst);
        let pending = self.backlog_appended.saturating_sub(claimed);
        let missing = self.backlog.saturating_sub(pending);
        if missing == 0 {
            return;
        }
        append_all(
            self.store.as_ref(),
            BACKLOG_SESSION,
            messages(missing, self.seq),
            None,
        )
        .await;
        self.seq += missing;
        self.backlog_appended += missing;
        self.rows += missing;
    }

    /// One round: appends one message to each small session, one call each,
    /// while the workers claim; returns the time from the first append to
    /// the claim of the round's last small message.
    async fn round(&mut self, workers: &Workers) -> Duration {
        self.top_up().await;
        let shared = &self.shared;
        let target = shared.small_claimed.load(Ordering::SeqCst) + FAIRNESS_SMALL_SESSIONS;
        shared.target.store(target, Ordering::SeqCst);
        *shared
            .round_end
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        let start = Instant::now();
        for index in 0..FAIRNESS_SMALL_SESSIONS {
            let session = small_session(index);
            let events = messages(1, self.seq + index);
            must(
                "append to a small session",
                self.store
                    .append(&session, events, AppendOptions::default())
                    .await,
            );
        }
        self.seq += FAIRNESS_SMALL_SESSIONS;
        self.rows += FAIRNESS_SMALL_SESSIONS;
        let deadline = tokio::time::Instant::now() + ROUND_TIMEOUT;
        loop {
            workers.check();
            if shared.small_claimed.load(Ordering::SeqCst) >= target {
                break;
            }
            let slice = tokio::time::Instant::now() + Duration::from_millis(100);
            if slice > deadline {
                panic!("a fairness round did not end within {ROUND_TIMEOUT:?}");
            }
            // A timeout only means: look again.
            let _ = tokio::time::timeout_at(slice, shared.progress.notified()).await;
        }
        let end = shared
            .round_end
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match end {
            Some(end) => end.saturating_duration_since(start),
            None => panic!("a fairness round ended without its last claim's time"),
        }
    }
}

/// Per iteration, one round: the producer appends one message to each of
/// [`FAIRNESS_SMALL_SESSIONS`] small sessions (one `append` each) while
/// [`FAIRNESS_WORKERS`] workers claim one head at a time with `claim_work`
/// (per-session limit 1, waiting up to 20 ms), handle it for
/// [`FAIRNESS_HANDLING`] and complete it; the time runs
/// from the round's first append to the claim of its last small message (its
/// slowest message). With `backlog > 0` a big session holds that many
/// claimable messages on its lane throughout (topped up untimed between
/// rounds) and the workers serve it whenever nothing else is claimable; its
/// id sorts first. Throughput counts the small messages. The manual clock
/// moves 1 ms before every claim, so fairness order is by waiting time.
/// Id `(backend, backlog)`.
pub fn work_fairness(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    backlog: u64,
) {
    group.throughput(Throughput::Elements(FAIRNESS_SMALL_SESSIONS));
    let mut state: Option<FairFixture> = None;
    group.bench_function(BenchmarkId::new(factory.name(), backlog), |b| {
        let fixture =
            state.get_or_insert_with(|| rt.block_on(FairFixture::ready(factory, backlog)));
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                let mut workers = Workers::spawn(fixture);
                for _ in 0..iters {
                    if fixture.rows > STORE_ROWS {
                        workers.stop().await;
                        *fixture = FairFixture::ready(factory, backlog).await;
                        workers = Workers::spawn(fixture);
                    }
                    total += fixture.round(&workers).await;
                }
                workers.stop().await;
                total
            })
        })
    });
}
