//! Load on the memory store, in one process: 2 groups of 4 worker tasks
//! claim across 100 sessions on one store, with the same injected
//! failures, stalls and checks as the SQLite and PostgreSQL load tests.
//! 2,000 events by default; `A2_LOAD_FULL=1` runs 50,000, `A2_LOAD_EVENTS=N` N.

mod load_harness;

use std::sync::Arc;
use std::time::Instant;

use a2_differential::load::{drain, produce, verify, LoadPlan, WorkerReport};
use a2_store_api::{RandomIds, Store, SystemClock};
use a2_store_memory::{MemoryOptions, MemoryStore};

const GROUPS: usize = 2;

#[test]
fn memory_workers_drain_targeted_load_exactly_once() {
    let plan = LoadPlan::from_env();
    let rt = load_harness::runtime();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_options(MemoryOptions {
        clock: Arc::new(SystemClock),
        ids: Arc::new(RandomIds),
    }));
    let started = Instant::now();
    rt.block_on(produce(store.as_ref(), &plan))
        .expect("produce the load");
    let produced = started.elapsed();
    let started = Instant::now();
    let report = rt.block_on(async {
        let groups: Vec<_> = (0..GROUPS)
            .map(|group| tokio::spawn(drain(Arc::clone(&store), plan, group)))
            .collect();
        let mut report = WorkerReport::default();
        for group in groups {
            report.merge(
                group
                    .await
                    .expect("a worker group")
                    .expect("the workers drain the load"),
            );
        }
        report
    });
    let drained = started.elapsed();
    rt.block_on(verify(store.as_ref(), &plan, &report))
        .unwrap_or_else(|problem| panic!("{problem}\nworkers: {report:?}"));
    let groups = format!("{GROUPS} groups in one process");
    load_harness::print_run("memory", &plan, &groups, produced, drained, &report);
}
