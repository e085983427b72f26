//! Worker overhead: a no-op handler run by the worker against a
//! hand-written claim_work/complete_attempt loop, on the same memory store
//! workload in the same run.
//!
//! `cargo bench -p a2-worker --bench overhead` runs both under criterion
//! (throughput in messages per second), then measures them alternately and
//! prints the worker's throughput as a share of the hand-written loop's.
//! `A2_WORKER_BENCH_MESSAGES` sets the messages per run (default 4,096).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    ClaimWorkRequest, ClaimWorkResult, CompleteRequest, ConsumerDeclaration, NewEvent, Store,
    Target,
};
use a2_store_memory::MemoryStore;
use a2_worker::{handler_fn, Job, Worker};
use criterion::{criterion_group, Criterion, Throughput};
use serde_json::json;
use tokio::sync::Notify;

const CONSUMER: &str = "agent";
const SESSIONS: usize = 64;
const IN_FLIGHT: usize = 16;

fn messages() -> usize {
    std::env::var("A2_WORKER_BENCH_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4_096)
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
            store
                .complete_attempt(CompleteRequest {
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

/// The worker with a no-op handler, from spawn until every message is completed.
async fn worker_noop(store: Arc<dyn Store>, total: usize, spawn: bool) -> Duration {
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
    let worker = Worker::builder(store)
        .holder("bench")
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .max_in_flight(IN_FLIGHT)
        .spawn_handlers(spawn)
        .build()
        .expect("worker")
        .spawn()
        .expect("spawn");
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
    let threads: usize = std::env::var("A2_WORKER_BENCH_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
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
                    elapsed += worker_noop(loaded(total).await, total, spawn).await;
                }
                elapsed
            });
        });
    }
    group.finish();
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
        spawned.push(rt.block_on(async { worker_noop(loaded(total).await, total, true).await }));
        in_task.push(rt.block_on(async { worker_noop(loaded(total).await, total, false).await }));
    }
    let median = |mut runs: Vec<Duration>| {
        runs.sort();
        total as f64 / runs[rounds / 2].as_secs_f64()
    };
    let (hand, spawned, in_task) = (median(hand), median(spawned), median(in_task));
    println!(
        "worker_overhead side by side ({total} messages, {rounds} rounds, medians): \
         hand loop {hand:.0} msg/s; worker no-op, a task per attempt {spawned:.0} msg/s = {:.0}%; \
         in the worker's task {in_task:.0} msg/s = {:.0}%",
        100.0 * spawned / hand,
        100.0 * in_task / hand
    );
}

criterion_group!(benches, overhead);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--test" || a == "--list");
    if !quick {
        side_by_side();
    }
}
