//! Worker overhead: a no-op handler run by the worker against hand-written
//! claim_work/complete_attempt loops, on the same workloads in the same run.
//!
//! `cargo bench -p a2-worker --bench overhead` runs three parts:
//!
//! - under criterion, on memory (4,096 messages over 64 sessions, two lanes
//!   each): a hand loop in one task claiming up to 16 heads, and the worker;
//! - side by side, alternately, on the same memory workload: their medians
//!   and the worker's share of the hand loop;
//! - *same calls*, alternately, on memory, a SQLite file and (when
//!   `A2_POSTGRES_URL` names a server) PostgreSQL, each run on a fresh
//!   store (a fresh schema, dropped after its run): the worker (16 in
//!   flight) against 16 tasks each looping over `claim_work` (limit 1) and
//!   `complete_attempt`, on two workloads: independent jobs (event
//!   targets) and one lane per session, 20,000 jobs over 1,000 sessions.
//!   It prints each side's median and the worker's ratio.
//!
//! `A2_WORKER_BENCH_MESSAGES` sets the messages of the first two parts
//! (default 4,096); `A2_WORKER_BENCH_JOBS`, `A2_WORKER_BENCH_SESSIONS` and
//! `A2_WORKER_BENCH_ROUNDS` size the third (default 20,000, 1,000 and 3),
//! `A2_WORKER_BENCH_BACKENDS` picks its backends (comma-separated, default
//! `memory,sqlite,postgres`) and `A2_WORKER_BENCH_CLAIMS` sets the worker's
//! `claims_in_flight`. `A2_WORKER_BENCH_PARTS` picks the parts
//! (comma-separated, default `criterion,side-by-side,same-calls`). With `--test` (as CI runs benches) criterion runs
//! each function once and the third part runs once on 200 jobs over 20
//! sessions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::postgres::ScratchSchemas;
use a2_store_api::{
    ClaimWorkRequest, ClaimWorkResult, CompleteRequest, ConsumerDeclaration, NewEvent, Store,
    Target,
};
use a2_store_memory::MemoryStore;
use a2_worker::{handler_fn, Job, Worker};
use criterion::{criterion_group, Criterion, Throughput};
use futures::stream::{self, StreamExt};
use serde_json::json;
use tokio::sync::{watch, Notify};

const CONSUMER: &str = "agent";
const SESSIONS: usize = 64;
const IN_FLIGHT: usize = 16;
/// The prefix of the PostgreSQL schemas this bench makes and drops.
const SCHEMA_PREFIX: &str = "a2wbench_";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn messages() -> usize {
    env_or("A2_WORKER_BENCH_MESSAGES", 4_096)
}

/// A fresh memory store holding `total` messages over [`SESSIONS`] sessions,
/// two lanes each.
async fn loaded(total: usize) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let per_session = total.div_ceil(SESSIONS);
    let mut left = total;
    for session in 0..SESSIONS {
        let batch: Vec<NewEvent> = (0..per_session.min(left))
            .map(|n| {
                NewEvent::new("msg", json!({"n": n}))
                    .with_target(Target::lane(CONSUMER, format!("L{}", n % 2)))
            })
            .collect();
        left -= batch.len();
        if !batch.is_empty() {
            store
                .append(&format!("s{session:03}"), batch, Default::default())
                .await
                .expect("append");
        }
    }
    store
}

fn consumers() -> Vec<ConsumerDeclaration> {
    vec![ConsumerDeclaration::targeted(CONSUMER)]
}

/// Completes a claimed head with nothing returned.
async fn complete(store: &dyn Store, session: &str, head: &a2_store_api::Head) {
    store
        .complete_attempt(CompleteRequest {
            incarnation: None,
            session_id: session.to_owned(),
            consumer: head.consumer.clone(),
            lane: head.lane.clone(),
            index: head.event.index,
            attempt: head.dispatch.attempt_count,
            events: Vec::new(),
            consumers: None,
        })
        .await
        .expect("complete");
}

/// The loop a user would write by hand (one task): claim up to [`IN_FLIGHT`] heads,
/// complete each with nothing returned, until nothing is left.
async fn hand_loop(store: Arc<dyn Store>, total: usize) -> Duration {
    let start = Instant::now();
    let mut done = 0;
    let request = ClaimWorkRequest::new("hand", consumers(), 30_000).with_limit(IN_FLIGHT);
    while done < total {
        let claimed = store.claim_work(request.clone()).await.expect("claim");
        if let ClaimWorkResult::Settled = claimed {
            break;
        }
        for (session, head) in claimed.heads() {
            complete(store.as_ref(), session, head).await;
            done += 1;
        }
    }
    assert_eq!(done, total);
    start.elapsed()
}

/// The hand loop as a task of the runtime, as an application runs it.
async fn hand_task(store: Arc<dyn Store>, total: usize) -> Duration {
    tokio::spawn(hand_loop(store, total))
        .await
        .expect("hand loop")
}

/// One of [`hand_tasks`]' tasks: claims one head (waiting for one when none
/// is claimable) and completes it, until `finished` is raised.
async fn hand_claimer(
    store: Arc<dyn Store>,
    holder: String,
    total: usize,
    done: Arc<AtomicUsize>,
    finished: watch::Sender<bool>,
) {
    let request = ClaimWorkRequest::new(holder, consumers(), 30_000)
        .with_limit(1)
        .with_wait_ms(1_000);
    let mut stopped = finished.subscribe();
    loop {
        let claimed = tokio::select! {
            biased;
            _ = stopped.wait_for(|f| *f) => return,
            claimed = store.claim_work(request.clone()) => claimed.expect("claim"),
        };
        for (session, head) in claimed.heads() {
            complete(store.as_ref(), session, head).await;
            if done.fetch_add(1, Ordering::Relaxed) + 1 == total {
                finished.send_replace(true);
            }
        }
    }
}

/// [`IN_FLIGHT`] tasks each claiming one head and completing it, from their
/// start until the last of `total` heads is completed.
async fn hand_tasks(store: Arc<dyn Store>, total: usize) -> Duration {
    let done = Arc::new(AtomicUsize::new(0));
    let (finished, mut all_done) = watch::channel(false);
    let start = Instant::now();
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|n| {
            tokio::spawn(hand_claimer(
                Arc::clone(&store),
                format!("hand-{n}"),
                total,
                Arc::clone(&done),
                finished.clone(),
            ))
        })
        .collect();
    all_done.wait_for(|f| *f).await.expect("finished");
    let elapsed = start.elapsed();
    for task in tasks {
        task.await.expect("hand task");
    }
    assert_eq!(done.load(Ordering::Relaxed), total);
    elapsed
}

/// The worker with a no-op handler, from spawn until every message is
/// completed; `claims` sets its `claims_in_flight` (its default: `None`).
async fn worker_noop(
    store: Arc<dyn Store>,
    total: usize,
    spawn: bool,
    claims: Option<usize>,
) -> Duration {
    let handled = Arc::new(AtomicUsize::new(0));
    let all_handled = Arc::new(Notify::new());
    let handler = {
        let (handled, all_handled) = (Arc::clone(&handled), Arc::clone(&all_handled));
        handler_fn(move |_job: Job| {
            if handled.fetch_add(1, Ordering::Relaxed) + 1 == total {
                all_handled.notify_one();
            }
            async move { Ok(Vec::new()) }
        })
    };
    let start = Instant::now();
    let mut builder = Worker::builder(store)
        .holder("bench")
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .max_in_flight(IN_FLIGHT)
        .spawn_handlers(spawn);
    if let Some(claims) = claims {
        builder = builder.claims_in_flight(claims);
    }
    let worker = builder.build().expect("worker").spawn().expect("spawn");
    all_handled.notified().await;
    // The last completions land right after their handlers returned.
    while worker.stats().completed < total as u64 {
        tokio::task::yield_now().await;
    }
    let elapsed = start.elapsed();
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.completed, total as u64);
    if std::env::var_os("A2_WORKER_BENCH_VERBOSE").is_some() {
        eprintln!("{:?}", summary.stats);
    }
    elapsed
}

fn runtime() -> tokio::runtime::Runtime {
    let threads: usize = env_or("A2_WORKER_BENCH_THREADS", 2);
    if threads == 0 {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime")
}

fn overhead(c: &mut Criterion) {
    let rt = runtime();
    let total = messages();
    let mut group = c.benchmark_group("worker_overhead");
    group.throughput(Throughput::Elements(total as u64));
    group.sample_size(10);
    group.bench_function("hand_loop", |b| {
        b.to_async(&rt).iter_custom(|iters| async move {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                elapsed += hand_task(loaded(total).await, total).await;
            }
            elapsed
        });
    });
    for (name, spawn) in [("worker_noop", true), ("worker_noop_in_task", false)] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| async move {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    elapsed += worker_noop(loaded(total).await, total, spawn, None).await;
                }
                elapsed
            });
        });
    }
    group.finish();
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

/// Runs both alternately and prints the worker's share of the hand loop's
/// throughput (medians of the rounds). Skipped in `--test` mode.
fn side_by_side() {
    let rt = runtime();
    let total = messages();
    let rounds = 7;
    let (mut hand, mut spawned, mut in_task) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        hand.push(rt.block_on(async { hand_task(loaded(total).await, total).await }));
        spawned
            .push(rt.block_on(async { worker_noop(loaded(total).await, total, true, None).await }));
        in_task.push(
            rt.block_on(async { worker_noop(loaded(total).await, total, false, None).await }),
        );
    }
    let rate = |runs| total as f64 / median(runs).as_secs_f64();
    let (hand, spawned, in_task) = (rate(hand), rate(spawned), rate(in_task));
    println!(
        "worker_overhead side by side ({total} messages, {rounds} rounds, medians): \
         hand loop {hand:.0} msg/s; worker no-op, a task per attempt {spawned:.0} msg/s = {:.0}%; \
         in the worker's task {in_task:.0} msg/s = {:.0}%",
        100.0 * spawned / hand,
        100.0 * in_task / hand
    );
}

/// The workloads of the same-calls comparison.
#[derive(Debug, Clone, Copy)]
enum Workload {
    /// Independent jobs: event targets, any number of a session at once.
    Jobs,
    /// One lane per session: a session's jobs one after another.
    Lanes,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Self::Jobs => "independent jobs",
            Self::Lanes => "one lane per session",
        }
    }

    fn target(self) -> Target {
        match self {
            Self::Jobs => Target::event(CONSUMER),
            Self::Lanes => Target::lane(CONSUMER, "main"),
        }
    }
}

/// The size of the same-calls comparison.
#[derive(Debug, Clone, Copy)]
struct Scale {
    jobs: usize,
    sessions: usize,
    rounds: usize,
}

/// Appends `scale.jobs` no-op jobs of `workload` spread evenly over
/// `scale.sessions` sessions, one append per session, 16 at a time.
async fn fill(store: &dyn Store, workload: Workload, scale: Scale) {
    let sessions = scale.sessions.max(1);
    stream::iter(0..sessions)
        .map(|session| {
            let count = scale.jobs / sessions + usize::from(session < scale.jobs % sessions);
            let batch: Vec<NewEvent> = (0..count)
                .map(|n| NewEvent::new("job", json!({"n": n})).with_target(workload.target()))
                .collect();
            async move {
                if !batch.is_empty() {
                    store
                        .append(&format!("s{session:05}"), batch, Default::default())
                        .await
                        .expect("append");
                }
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
}

/// Where the same-calls comparison opens a fresh store for each run.
enum Backend {
    Memory,
    Sqlite(tempfile::TempDir),
    /// Scratch schemas of the server named by `A2_POSTGRES_URL`, opened
    /// with the backend's default options (a pool of 16).
    Postgres(Box<ScratchSchemas>),
}

/// A store of one run, and what to remove once it is done.
struct Fresh {
    store: Arc<dyn Store>,
    schema: Option<String>,
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }

    async fn open(&self, run: usize) -> Fresh {
        match self {
            Self::Memory => Fresh {
                store: Arc::new(MemoryStore::new()),
                schema: None,
            },
            Self::Sqlite(dir) => {
                let url = format!(
                    "sqlite:{}",
                    dir.path().join(format!("run{run}.db")).display()
                );
                Fresh {
                    store: a2_store::open(&url, a2_store::OpenOptions::default())
                        .await
                        .expect("open a SQLite file"),
                    schema: None,
                }
            }
            Self::Postgres(scratch) => {
                let schema = scratch.fresh_schema().expect("a schema name");
                let options = a2_store::OpenOptions::default();
                let store = scratch
                    .open(&schema, options.clock, options.ids)
                    .await
                    .expect("open a fresh schema");
                Fresh {
                    store: Arc::new(store),
                    schema: Some(schema),
                }
            }
        }
    }

    /// Drops a run's store, then its schema or file.
    async fn discard(&self, fresh: Fresh, run: usize) {
        drop(fresh.store);
        match self {
            Self::Memory => {}
            Self::Sqlite(dir) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(dir.path().join(format!("run{run}.db{suffix}")));
                }
            }
            Self::Postgres(scratch) => {
                if let Some(schema) = fresh.schema {
                    scratch.drop_schema(&schema).await.expect("drop the schema");
                }
            }
        }
    }
}

/// The backends of the same-calls comparison: those `A2_WORKER_BENCH_BACKENDS`
/// names (default all), PostgreSQL only when `A2_POSTGRES_URL` is set.
fn backends() -> Vec<Backend> {
    let chosen = std::env::var("A2_WORKER_BENCH_BACKENDS")
        .unwrap_or_else(|_| "memory,sqlite,postgres".to_owned());
    let mut backends = Vec::new();
    for name in chosen.split(',').map(str::trim) {
        match name {
            "memory" => backends.push(Backend::Memory),
            "sqlite" => backends.push(Backend::Sqlite(
                tempfile::tempdir().expect("temporary directory"),
            )),
            "postgres" => match std::env::var("A2_POSTGRES_URL") {
                Ok(server) if !server.trim().is_empty() => backends.push(Backend::Postgres(
                    Box::new(ScratchSchemas::new(server.trim(), SCHEMA_PREFIX)),
                )),
                _ => println!("same calls: PostgreSQL not run, A2_POSTGRES_URL is not set"),
            },
            other => panic!("unknown backend '{other}' in A2_WORKER_BENCH_BACKENDS"),
        }
    }
    backends
}

/// The worker against the hand loop of the same calls: alternating runs on
/// fresh stores of each backend, each workload; prints the medians and the
/// worker's ratio.
fn same_calls(quick: bool) {
    let rt = runtime();
    let scale = if quick {
        Scale {
            jobs: 200,
            sessions: 20,
            rounds: 1,
        }
    } else {
        Scale {
            jobs: env_or("A2_WORKER_BENCH_JOBS", 20_000),
            sessions: env_or("A2_WORKER_BENCH_SESSIONS", 1_000),
            rounds: env_or("A2_WORKER_BENCH_ROUNDS", 3usize).max(1),
        }
    };
    let claims: Option<usize> = std::env::var("A2_WORKER_BENCH_CLAIMS")
        .ok()
        .and_then(|n| n.parse().ok());
    let total = scale.jobs;
    for backend in backends() {
        for workload in [Workload::Jobs, Workload::Lanes] {
            let (mut hand, mut worker) = (Vec::new(), Vec::new());
            let mut run = 0;
            for _ in 0..scale.rounds {
                for by_hand in [true, false] {
                    run += 1;
                    let elapsed = rt.block_on(async {
                        let fresh = backend.open(run).await;
                        fill(fresh.store.as_ref(), workload, scale).await;
                        let store = Arc::clone(&fresh.store);
                        let elapsed = if by_hand {
                            hand_tasks(store, total).await
                        } else {
                            worker_noop(store, total, true, claims).await
                        };
                        backend.discard(fresh, run).await;
                        elapsed
                    });
                    if by_hand { &mut hand } else { &mut worker }.push(elapsed);
                }
            }
            let rate = |d: &Duration| total as f64 / d.as_secs_f64();
            let list = |runs: &[Duration]| {
                runs.iter()
                    .map(|d| format!("{:.0}", rate(d)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (hand_rate, worker_rate) =
                (rate(&median(hand.clone())), rate(&median(worker.clone())));
            println!(
                "same calls, {:<8} {:<20} ({total} jobs over {} sessions, {} rounds, medians): \
                 hand loop (16 tasks: claim 1 + complete) {hand_rate:.0} jobs/s; worker (16 in flight) \
                 {worker_rate:.0} jobs/s = {:.2}x  [hand {}; worker {}]",
                backend.name(),
                workload.name(),
                scale.sessions,
                scale.rounds,
                worker_rate / hand_rate,
                list(&hand),
                list(&worker),
            );
        }
    }
}

criterion_group!(benches, overhead);

fn main() {
    let parts = std::env::var("A2_WORKER_BENCH_PARTS")
        .unwrap_or_else(|_| "criterion,side-by-side,same-calls".to_owned());
    let part = |name: &str| parts.split(',').any(|p| p.trim() == name);
    if part("criterion") {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let quick = args.iter().any(|a| a == "--test");
    if !quick && part("side-by-side") {
        side_by_side();
    }
    if part("same-calls") {
        same_calls(quick);
    }
}
