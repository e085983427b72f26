//! The multi-process harness the load tests share: a parent produces the
//! load, re-executes the test binary as worker processes that each drain
//! with their workers and write a report, then verifies the merged reports
//! against the log and prints throughput.
#![allow(dead_code)] // each load test uses part of it

use std::future::Future;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_differential::load::{
    drain, produce, verify, LoadPlan, WorkerReport, CLAIM_LIMIT, CLAIM_PER_SESSION, CLAIM_WAIT_MS,
};
use a2_store_api::Store;

/// Set in a worker process; the value names the database (file or schema).
const ROLE: &str = "A2_LOAD_ROLE";
const OUT: &str = "A2_LOAD_OUT";
const PROCESS: &str = "A2_LOAD_PROCESS";

/// A multi-thread runtime with the time driver (stalled leases sleep).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// In a worker process: the database the parent named; `None` in the parent.
pub fn worker_database() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// The worker role: drain the load on `store` with this process's workers
/// and write the report where the parent asked.
pub fn work<F>(store: F)
where
    F: Future<Output = Arc<dyn Store>>,
{
    let out = std::env::var(OUT).expect("report path");
    let process: usize = std::env::var(PROCESS)
        .expect("process number")
        .parse()
        .expect("a number");
    let report = runtime()
        .block_on(async { drain(store.await, LoadPlan::from_env(), process).await })
        .expect("the workers drain the load");
    std::fs::write(out, serde_json::to_vec(&report).expect("encode")).expect("write the report");
}

/// The parent role: open `store` on the harness's runtime, produce the load,
/// run `processes` workers (this binary's `test`, told `database`), verify
/// and print throughput.
pub fn run<F>(backend: &str, test: &str, processes: usize, store: F, database: &str, dir: &Path)
where
    F: Future<Output = Arc<dyn Store>>,
{
    let plan = LoadPlan::from_env();
    let rt = runtime();
    let store = rt.block_on(store);
    let started = Instant::now();
    rt.block_on(produce(store.as_ref(), &plan))
        .expect("produce the load");
    let produced = started.elapsed();

    let started = Instant::now();
    let children: Vec<_> = (0..processes)
        .map(|process| {
            let out = dir.join(format!("report-{process}.json"));
            let child = Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", test, "--nocapture", "--test-threads", "1"])
                .env(ROLE, database)
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
    let processes = format!("{processes} processes");
    print_run(backend, &plan, &processes, produced, drained, &report);
}

/// Prints a verified run's throughput and what the workers did;
/// `processes` says how the workers were grouped (e.g. "2 processes").
pub fn print_run(
    backend: &str,
    plan: &LoadPlan,
    processes: &str,
    produced: Duration,
    drained: Duration,
    report: &WorkerReport,
) {
    let expected = plan.expected();
    println!(
        "{backend} load: {} events over {} sessions, {} x {} workers claiming across sessions \
         (limit {CLAIM_LIMIT}, {CLAIM_PER_SESSION} per session, wait {CLAIM_WAIT_MS} ms): produced in {:.2?}, drained in {:.2?} \
         ({:.0} events/s, {:.0} completions/s); {} claim_work calls ({:.2} heads each, {} empty), \
         {} failures, {} dead letters, {} stalls ({} fenced), {} busy retries",
        plan.events,
        plan.sessions,
        processes,
        plan.workers_per_process,
        produced,
        drained,
        plan.events as f64 / drained.as_secs_f64(),
        expected.completions as f64 / drained.as_secs_f64(),
        report.claim_calls,
        report.claims.len() as f64 / report.claim_calls.max(1) as f64,
        report.empty_claims,
        report.failed,
        report.dead_lettered,
        expected.stalls,
        report.stalls_superseded.len(),
        report.busy_retries,
    );
}
