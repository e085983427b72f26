//! Claim + complete throughput on PostgreSQL next to SQLite (a file with
//! full durability, like PostgreSQL's default synchronous commit), in one
//! run, with 1, 4 and 16 concurrent workers — the "Scaling out" figures of
//! the PostgreSQL README:
//!
//! - `concurrent_claim_complete_scale_out`: the shared body, each worker on
//!   its own session of one store (scaling across sessions);
//! - `one_session_claim_complete`: every worker on ONE session whose heads
//!   are independent event cursors (scaling within a session).
//!
//! Function id = backend (`sqlite-file-full`, `postgres`), parameter =
//! workers. Stores pool up to 20 connections, more than the most workers.
//!
//! Run: `A2_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p a2-benches --bench scale_out`.
//! Without `A2_POSTGRES_URL` only SQLite is measured. Schemas are dropped at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_benches::backends::SqliteFileFactory;
use a2_benches::postgres::{self, PostgresFactory};
use a2_benches::settings;
use a2_conformance::bench::{concurrent_claim_complete, work_events, LEASE_MS, START_MS};
use a2_conformance::StoreFactory;
use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, ManualClock,
    RandomIds, Store, Target,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use tokio::runtime::Runtime;

const WORKERS: [usize; 3] = [1, 4, 16];

/// Connections per PostgreSQL store: more than the 16 workers at most.
const POOL_SIZE: usize = 20;

/// SQLite files with full durability (and otherwise default options), then
/// PostgreSQL when `A2_POSTGRES_URL` names a server.
fn factories() -> Vec<Box<dyn StoreFactory>> {
    let sqlite = match SqliteFileFactory::full() {
        Ok(sqlite) => sqlite,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let mut list: Vec<Box<dyn StoreFactory>> = vec![Box::new(sqlite)];
    if let Some(url) = postgres::url_from_env("scale_out") {
        list.push(Box::new(PostgresFactory::with_pool_size(url, POOL_SIZE)));
    }
    list
}

/// `workers` tasks claim (one head each time) and complete heads of ONE
/// session until `iters` heads are done; only that is timed.
fn one_session(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    workers: usize,
) {
    let clock = ManualClock::new(START_MS);
    let store = rt
        .block_on(factory.create(Arc::new(clock.clone()), Arc::new(RandomIds)))
        .expect("create a store");
    let mut round = 0_u64;
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new(factory.name(), workers), |b| {
        b.iter_custom(|iters| {
            round += 1;
            let session = format!("one-session-{round}");
            rt.block_on(async {
                let mut rest = work_events("work", iters as usize, 0, &[Target::event("agent")]);
                while !rest.is_empty() {
                    let tail = rest.split_off(rest.len().min(1_000));
                    store
                        .append(&session, rest, AppendOptions::default())
                        .await
                        .expect("append");
                    rest = tail;
                }
                let start = Instant::now();
                let tasks: Vec<_> = (0..workers)
                    .map(|w| {
                        let store = Arc::clone(&store);
                        let session = session.clone();
                        tokio::spawn(async move { drain(store, session, format!("w{w}")).await })
                    })
                    .collect();
                let mut done = 0;
                for task in tasks {
                    done += task.await.expect("worker");
                }
                assert_eq!(done, iters, "every head completed once");
                start.elapsed()
            })
        })
    });
}

async fn drain(store: Arc<dyn Store>, session: String, holder: String) -> u64 {
    let mut done = 0;
    loop {
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: session.clone(),
                holder: holder.clone(),
                ttl_ms: Some(LEASE_MS),
                limit: Some(1),
                ..ClaimRequest::default()
            })
            .await
            .expect("claim");
        let heads = match claimed {
            ClaimResult::Claimed { heads, .. } => heads,
            ClaimResult::Busy { .. } => {
                // The rest is held by other workers: wait a moment, as a
                // worker honouring `retry_at` would.
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            ClaimResult::Settled => return done,
            other => panic!("claim answered {other:?}, an outcome this bench does not know"),
        };
        for head in heads {
            let result = store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: session.clone(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    events: Vec::new(),
                    consumers: None,
                })
                .await
                .expect("complete");
            assert!(matches!(result, CompleteResult::Completed { .. }));
            done += 1;
        }
    }
}

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let factories = factories();
    {
        let mut group = c.benchmark_group("concurrent_claim_complete_scale_out");
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(4));
        for workers in WORKERS {
            for factory in &factories {
                concurrent_claim_complete(&mut group, &rt, factory.as_ref(), workers, false);
            }
        }
        group.finish();
    }
    {
        let mut group = c.benchmark_group("one_session_claim_complete");
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(4));
        for workers in WORKERS {
            for factory in &factories {
                one_session(&mut group, &rt, factory.as_ref(), workers);
            }
        }
        group.finish();
    }
    drop(factories);
    c.final_summary();
}
