//! Load on PostgreSQL: 4 processes of 4 worker tasks each drain targeted
//! work across 100 sessions on one fresh schema (dropped afterwards), with
//! the same injected failures, stalls and checks as the SQLite load test.
//! Runs only when `A2_POSTGRES_URL` is set; 2,000 events, 50,000 with
//! `A2_LOAD_FULL=1`, N with `A2_LOAD_EVENTS=N`. The children are this binary re-executed.

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use a2_differential::load::{drain, produce, verify, LoadPlan, WorkerReport};
use a2_store_api::{RandomIds, Store, SystemClock};
use a2_store_postgres::PostgresStore;

const ROLE: &str = "A2_LOAD_ROLE";
const SCHEMA: &str = "A2_LOAD_SCHEMA";
const OUT: &str = "A2_LOAD_OUT";
const PROCESS: &str = "A2_LOAD_PROCESS";
const PROCESSES: usize = 4;
const TEST: &str = "postgres_processes_drain_targeted_load_exactly_once";

fn plan() -> LoadPlan {
    LoadPlan::from_env()
}

async fn open(url: &str, schema: &str) -> Arc<dyn Store> {
    Arc::new(
        PostgresStore::connect(
            url,
            support::postgres_options(schema, Arc::new(SystemClock), Arc::new(RandomIds)),
        )
        .await
        .expect("connect to PostgreSQL"),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Drops the schema even when the test fails.
struct DropSchema(String, String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        support::drop_schemas(&self.0, vec![self.1.clone()]);
    }
}

#[test]
fn postgres_processes_drain_targeted_load_exactly_once() {
    let Some(url) = support::postgres_url(TEST) else {
        return;
    };
    if let (Ok(_), Ok(schema)) = (std::env::var(ROLE), std::env::var(SCHEMA)) {
        let out = std::env::var(OUT).expect("report path");
        let process: usize = std::env::var(PROCESS)
            .expect("process number")
            .parse()
            .expect("a number");
        let report = runtime()
            .block_on(async { drain(open(&url, &schema).await, plan(), process).await })
            .expect("the workers drain the load");
        std::fs::write(out, serde_json::to_vec(&report).expect("encode"))
            .expect("write the report");
        return;
    }
    let plan = plan();
    let schema = support::fresh_schema();
    let _cleanup = DropSchema(url.clone(), schema.clone());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rt = runtime();
    let store = rt.block_on(open(&url, &schema));
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
                .env(SCHEMA, &schema)
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
        "postgres load: {} events over {} sessions, {} processes x {} workers: produced in {:.2?}, drained in {:.2?} \
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
