//! Claim + complete throughput with several tokio tasks sharing one store,
//! or two stores over one database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{ManualClock, RandomIds, Store, Target};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use tokio::runtime::Runtime;

use super::fixture::{
    append_all, claim_one, complete, must, open_store, work_events, START_MS, STORE_ROWS,
};
use crate::StoreFactory;

/// The stores the tasks share and how many rows they hold so far.
struct Shared {
    stores: Vec<Arc<dyn Store>>,
    rows: u64,
    generation: u64,
}

/// Opens the stores the tasks share: one, or a pair over one database.
async fn open_shared(
    factory: &dyn StoreFactory,
    clock: &ManualClock,
    pair: bool,
) -> Option<Vec<Arc<dyn Store>>> {
    if pair {
        let stores = must(
            "create a pair of stores",
            factory
                .create_pair(Arc::new(clock.clone()), Arc::new(RandomIds))
                .await,
        );
        stores.map(Vec::from)
    } else {
        Some(vec![open_store(factory, clock).await])
    }
}

/// Claim + complete cycles on one lane per task, run by `tasks` tokio tasks
/// at once, each on its own session of one shared store (with `pair`: tasks
/// alternate between two stores over one database). Throughput counts
/// cycles, so the figure is the time per cycle of the whole group of tasks.
/// Id `(backend, tasks)`, or `(backend-2stores, tasks)`; registers nothing
/// when `pair` is asked of a factory that cannot open two stores on one
/// database. Needs a multi-thread runtime for the tasks to run in parallel.
pub fn concurrent_claim_complete(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    tasks: usize,
    pair: bool,
) {
    let tasks = tasks.max(1);
    let clock = ManualClock::new(START_MS);
    let Some(stores) = rt.block_on(open_shared(factory, &clock, pair)) else {
        return;
    };
    let mut shared = Shared {
        stores,
        rows: 0,
        generation: 0,
    };
    let name = if pair {
        format!("{}-2stores", factory.name())
    } else {
        factory.name().to_owned()
    };
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new(name, tasks), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                if shared.rows + iters > STORE_ROWS {
                    if let Some(stores) = open_shared(factory, &clock, pair).await {
                        shared.stores = stores;
                    }
                    shared.rows = 0;
                }
                shared.rows += iters;
                shared.generation += 1;
                let mut work = Vec::with_capacity(tasks);
                for task in 0..tasks {
                    let cycles =
                        iters / tasks as u64 + u64::from((task as u64) < iters % tasks as u64);
                    let store = Arc::clone(&shared.stores[task % shared.stores.len()]);
                    let session = format!("concurrent-{}-{task}", shared.generation);
                    let events =
                        work_events("work", cycles as usize, 0, &[Target::lane("agent", "L1")]);
                    append_all(store.as_ref(), &session, events, None).await;
                    work.push((store, session, cycles));
                }
                let start = Instant::now();
                let handles = work
                    .into_iter()
                    .map(|(store, session, cycles)| {
                        tokio::spawn(async move {
                            for _ in 0..cycles {
                                let head = claim_one(store.as_ref(), &session, "w1", None).await;
                                complete(store.as_ref(), &session, &head, None).await;
                            }
                        })
                    })
                    .collect::<Vec<_>>();
                for handle in handles {
                    if let Err(error) = handle.await {
                        panic!("a concurrent claim task failed: {error}");
                    }
                }
                let elapsed: Duration = start.elapsed();
                elapsed
            })
        })
    });
}
