//! Load: 2 processes of 4 worker tasks each share one SQLite file and drain
//! targeted work across 100 sessions (lanes, event cursors, a log consumer)
//! with injected handler failures and stalled leases; every event is
//! completed exactly once per targeted consumer, in lane order, and the
//! failures and dead letters are exactly the injected ones.
//!
//! 2,000 events by default; `A2_LOAD_FULL=1` runs 50,000, `A2_LOAD_EVENTS=N` N. The children are
//! this test binary re-executed with `A2_LOAD_ROLE=worker`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use a2_differential::load::{drain, produce, verify, LoadPlan, WorkerReport};
use a2_store_api::{RandomIds, Store, SystemClock};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};

const ROLE: &str = "A2_LOAD_ROLE";
const DB: &str = "A2_LOAD_DB";
const OUT: &str = "A2_LOAD_OUT";
const PROCESS: &str = "A2_LOAD_PROCESS";
const PROCESSES: usize = 2;
const TEST: &str = "sqlite_processes_drain_targeted_load_exactly_once";

fn plan() -> LoadPlan {
    LoadPlan::from_env()
}

fn open(path: &Path) -> Arc<dyn Store> {
    Arc::new(
        SqliteStore::open(
            path,
            SqliteOptions {
                clock: Arc::new(SystemClock),
                ids: Arc::new(RandomIds),
                durability: Durability::Normal,
                ..SqliteOptions::default()
            },
        )
        .expect("open the shared database"),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The child role: drain with this process's workers, write the report.
fn child(db: &str) {
    let out = std::env::var(OUT).expect("report path");
    let process: usize = std::env::var(PROCESS)
        .expect("process number")
        .parse()
        .expect("a number");
    let report = runtime()
        .block_on(drain(open(Path::new(db)), plan(), process))
        .expect("the workers drain the load");
    std::fs::write(out, serde_json::to_vec(&report).expect("encode")).expect("write the report");
}

#[test]
fn sqlite_processes_drain_targeted_load_exactly_once() {
    if let (Ok(_), Ok(db)) = (std::env::var(ROLE), std::env::var(DB)) {
        child(&db);
        return;
    }
    let plan = plan();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("load.db");
    let store = open(&db);
    let rt = runtime();
    let started = Instant::now();
    rt.block_on(produce(store.as_ref(), &plan))
        .expect("produce the load");
    let produced = started.elapsed();

    let started = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|process| {
            let out = dir.path().join(format!("report-{process}.json"));
            let child = Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
                .env(ROLE, "worker")
                .env(DB, &db)
                .env(OUT, &out)
                .env(PROCESS, process.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a worker process");
            (child, out)
        })
        .collect();
    let mut report = WorkerReport::default();
    for (mut child, out) in children {
        let status = child.wait().expect("wait for a worker process");
        assert!(status.success(), "a worker process failed: {status}");
        let bytes = std::fs::read(&out).expect("the worker's report");
        report.merge(serde_json::from_slice(&bytes).expect("a report"));
    }
    let drained = started.elapsed();

    rt.block_on(verify(store.as_ref(), &plan, &report))
        .unwrap_or_else(|problem| panic!("{problem}\nworkers: {report:?}"));
    let expected = plan.expected();
    println!(
        "sqlite load: {} events over {} sessions, {} processes x {} workers: produced in {:.2?}, drained in {:.2?} \
         ({:.0} events/s, {:.0} completions/s); {} failures, {} dead letters, {} stalls ({} fenced), {} busy retries",
        plan.events,
        plan.sessions,
        PROCESSES,
        plan.workers_per_process,
        produced,
        drained,
        plan.events as f64 / drained.as_secs_f64(),
        expected.completions as f64 / drained.as_secs_f64(),
        report.failed,
        report.dead_lettered,
        expected.stalls,
        report.stalls_superseded.len(),
        report.busy_retries,
    );
}
