//! Claim + complete throughput on PostgreSQL next to SQLite (a file with
//! full durability, like PostgreSQL's default synchronous commit), in one
//! run, with 1, 4 and 16 concurrent workers:
//!
//! - `concurrent_claim_complete`: the shared body, each worker on its own
//!   session of one store (scaling across sessions);
//! - `one_session_claim_complete`: every worker on ONE session whose heads
//!   are independent event cursors (scaling within a session).
//!
//! Run: `A2_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p a2-store-postgres`.
//! Without `A2_POSTGRES_URL` only SQLite is measured. Schemas are dropped at the end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2_conformance::bench::{concurrent_claim_complete, work_events, LEASE_MS, START_MS};
use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, Clock, CompleteRequest, CompleteResult, IdGenerator,
    ManualClock, RandomIds, Result, Store, Target,
};
use a2_store_postgres::{PostgresOptions, PostgresStore};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use tokio::runtime::Runtime;

const WORKERS: [usize; 3] = [1, 4, 16];

/// Fresh schemas on the server named by `A2_POSTGRES_URL`, dropped on drop.
struct PgFactory {
    url: String,
    schemas: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl StoreFactory for PgFactory {
    fn name(&self) -> &str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let schema = format!("a2b_{}", uuid::Uuid::new_v4().simple());
        self.schemas.lock().expect("lock").push(schema.clone());
        let options = PostgresOptions {
            clock,
            ids,
            pool_size: 20,
            schema,
            ..PostgresOptions::default()
        };
        Ok(Arc::new(PostgresStore::connect(&self.url, options).await?))
    }
}

impl Drop for PgFactory {
    fn drop(&mut self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().expect("lock"));
        let url = self.url.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("connect");
                tokio::spawn(connection);
                for schema in schemas {
                    client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .await
                        .expect("drop a bench schema");
                }
            });
        })
        .join();
        if dropped.is_err() {
            eprintln!("could not drop the bench schemas");
        }
    }
}

/// Fresh SQLite files (default options: full durability, 4 connections).
struct SqliteFactory {
    dir: tempfile::TempDir,
    files: AtomicUsize,
}

#[async_trait::async_trait]
impl StoreFactory for SqliteFactory {
    fn name(&self) -> &str {
        "sqlite"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let n = self.files.fetch_add(1, Ordering::SeqCst);
        let path = self.dir.path().join(format!("bench-{n}.db"));
        let options = SqliteOptions {
            clock,
            ids,
            ..SqliteOptions::default()
        };
        Ok(Arc::new(SqliteStore::open(path, options)?))
    }
}

fn factories() -> Vec<Box<dyn StoreFactory>> {
    let mut list: Vec<Box<dyn StoreFactory>> = vec![Box::new(SqliteFactory {
        dir: tempfile::tempdir().expect("a temporary directory"),
        files: AtomicUsize::new(0),
    })];
    match std::env::var("A2_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => list.push(Box::new(PgFactory {
            url,
            schemas: Mutex::new(Vec::new()),
        })),
        _ => eprintln!(
            "A2_POSTGRES_URL is not set: measuring SQLite only. Set it (e.g. \
             postgres://postgres@127.0.0.1:5432/test) to measure PostgreSQL too."
        ),
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
        };
        for head in heads {
            let result = store
                .complete_attempt(CompleteRequest {
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

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let factories = factories();
    {
        let mut group = c.benchmark_group("concurrent_claim_complete");
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
