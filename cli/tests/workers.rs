//! The worker workloads of `a2-store bench` (runtime, worker, idle, fairness) in
//! CI-sized forms: they complete and report numbers. Behaviour, not speed.

#[path = "fixture/postgres.rs"]
mod postgres;

use std::process::{Command, Output};

use serde_json::Value;

fn a2(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(args)
        .env_remove("A2_STORE_URL")
        .env_remove("A2_BENCH_WORKER_URL")
        .output()
        .expect("run a2-store")
}

/// Runs `args` plus `--json`, asserts success and returns the report.
fn report(args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let output = a2(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// Asserts a one-line error with status 2 containing `needle`.
fn fails(args: &[&str], needle: &str) {
    let output = a2(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}\nstderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
}

fn number(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// Asserts a runtime backend report claimed every message it sent and
/// has latencies for them, and for new sessions' first messages.
fn assert_runtime(backend: &Value, processes: bool) {
    let sent = backend["sent"].as_u64().unwrap();
    assert!(sent >= 40, "{backend}");
    assert!(backend["sent_new"].as_u64().unwrap() > 0, "{backend}");
    assert_eq!(backend["claimed"].as_u64(), Some(sent), "{backend}");
    assert_eq!(backend["drained"], true, "{backend}");
    assert_eq!(backend["worker_processes"], processes, "{backend}");
    for latency in ["append_to_claim", "new_session_first", "append"] {
        let p50 = number(&backend[latency]["p50_ms"]);
        let p99 = number(&backend[latency]["p99_ms"]);
        assert!(0.0 <= p50 && p50 <= p99, "{latency}: {backend}");
    }
    assert_eq!(
        backend["append_to_claim"]["count"].as_u64(),
        Some(sent),
        "{backend}"
    );
    let workers = backend["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{backend}");
    let claimed: u64 = workers.iter().map(|w| w["claimed"].as_u64().unwrap()).sum();
    assert_eq!(claimed, sent, "{backend}");
    assert!(number(&backend["handled_per_s"]) > 0.0, "{backend}");
}

const RUNTIME: &[&str] = &[
    "bench",
    "--workload",
    "runtime",
    "--seconds",
    "0.5",
    "--sessions",
    "5",
    "--rate",
    "100",
    "--workers",
    "2",
    "--wait-ms",
    "200",
];

#[test]
fn runtime_on_memory_claims_every_message() {
    let mut args = RUNTIME.to_vec();
    args.push("memory:");
    let out = report(&args);
    assert_eq!(out["workload"], "runtime");
    assert_eq!(out["settings"]["sessions"], 5);
    // The default warm-up ran: its messages were claimed but are counted
    // nowhere (`assert_runtime` checks the workers claimed exactly what
    // was sent after it).
    assert_eq!(out["settings"]["warm_up_s"], 1.0);
    assert_runtime(&out["backends"][0], false);
}

#[test]
fn runtime_on_sqlite_uses_worker_processes_and_a_scratch_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("given.db");
    let url = format!("sqlite:{}?durability=full", path.display());
    let mut args = RUNTIME.to_vec();
    args.push(&url);
    let out = report(&args);
    assert_runtime(&out["backends"][0], true);
    assert_eq!(out["backends"][0]["url"], url.as_str());
    // The given path is never opened and the scratch directory is gone.
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `RUNTIME` with the workers running `a2-worker`.
fn worker_args() -> Vec<&'static str> {
    let mut args = RUNTIME.to_vec();
    args[2] = "worker";
    args.extend(["--max-in-flight", "4"]);
    args
}

#[test]
fn worker_on_memory_handles_every_message_once() {
    let mut args = worker_args();
    args.push("memory:");
    let out = report(&args);
    assert_eq!(out["workload"], "worker");
    assert_eq!(out["settings"]["max_in_flight"], 4);
    // Every message handled exactly once: a start recorded per message.
    assert_runtime(&out["backends"][0], false);
    let table = String::from_utf8_lossy(&a2(&args).stdout).into_owned();
    assert!(
        table.contains("a→s p99") && table.contains("handled/s"),
        "{table}"
    );
}

#[test]
fn worker_on_sqlite_runs_a2_worker_processes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("worker.db").display());
    let mut args = worker_args();
    args.push(&url);
    let out = report(&args);
    assert_runtime(&out["backends"][0], true);
    for worker in out["backends"][0]["workers"].as_array().unwrap() {
        assert!(number(&worker["claim_calls_per_s"]) > 0.0, "{out}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn idle_workers_wait_and_claim_nothing() {
    let out = report(&[
        "bench",
        "--workload",
        "idle",
        "memory:",
        "--seconds",
        "0.5",
        "--sessions",
        "20",
        "--workers",
        "2",
        "--wait-ms",
        "100",
    ]);
    let backend = &out["backends"][0];
    let workers = backend["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{backend}");
    for worker in workers {
        assert_eq!(worker["claimed"], 0, "{backend}");
        // Waits of 100 ms over 0.5 s: a few calls, never a busy loop.
        let rate = number(&worker["claim_calls_per_s"]);
        assert!(rate > 0.0 && rate < 100.0, "{backend}");
        assert!(worker["cpu_percent"].is_null(), "{backend}");
    }
    if cfg!(target_os = "linux") {
        assert!(
            number(&backend["in_process_cpu_percent"]) >= 0.0,
            "{backend}"
        );
    }
}

#[test]
fn idle_worker_processes_report_their_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("idle.db").display());
    let out = report(&[
        "bench",
        "--workload",
        "idle",
        &url,
        "--seconds",
        "0.5",
        "--sessions",
        "20",
        "--workers",
        "1",
        "--wait-ms",
        "100",
    ]);
    let worker = &out["backends"][0]["workers"][0];
    assert_eq!(worker["claimed"], 0, "{out}");
    if cfg!(target_os = "linux") {
        let cpu = number(&worker["cpu_percent"]);
        assert!((0.0..=100.0).contains(&cpu), "{out}");
    }
}

#[test]
fn fairness_compares_small_sessions_with_and_without_a_backlog() {
    let out = report(&[
        "bench",
        "--workload",
        "fairness",
        "memory:",
        "--sessions",
        "20",
        "--backlog",
        "300",
        "--rate",
        "200",
        "--workers",
        "2",
        "--wait-ms",
        "200",
    ]);
    let backend = &out["backends"][0];
    assert_eq!(backend["drained"], true, "{backend}");
    assert_eq!(backend["without_backlog"]["count"], 20, "{backend}");
    assert_eq!(backend["with_backlog"]["count"], 20, "{backend}");
    assert!(number(&backend["p99_ratio"]) > 0.0, "{backend}");
    assert_eq!(backend["append_with_backlog"]["count"], 20, "{backend}");
    assert!(
        number(&backend["append_without_backlog"]["p99_ms"]) >= 0.0,
        "{backend}"
    );
    let table = String::from_utf8_lossy(
        &a2(&[
            "bench",
            "--workload",
            "fairness",
            "memory:",
            "--sessions",
            "5",
            "--backlog",
            "10",
        ])
        .stdout,
    )
    .into_owned();
    let row = table.lines().find(|l| l.starts_with("[1] ")).unwrap();
    assert_eq!(row.split_whitespace().count(), 9, "{table}");
    assert!(
        backend["backlog_claimed"].as_u64().unwrap() > 0,
        "{backend}"
    );
}

#[test]
fn worker_workload_arguments_are_checked() {
    fails(
        &["bench", "--workload", "runtime", "--csv", "memory:"],
        "--csv is for --workload mix",
    );
    fails(
        &[
            "bench",
            "--workload",
            "fairness",
            "--seconds",
            "1",
            "memory:",
        ],
        "--seconds does not apply",
    );
    fails(
        &["bench", "--workload", "idle", "sqlite::memory:"],
        "worker processes must share the store",
    );
    fails(
        &["bench", "--workload", "runtime", "--rate", "0"],
        "not a rate",
    );
    fails(&["bench", "--workload", "sideways"], "sideways");
    fails(
        &[
            "bench-worker",
            "--worker",
            "1",
            "--wait-ms",
            "10",
            "--claim-limit",
            "1",
        ],
        "started by `a2-store bench`",
    );
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn runtime_and_worker_on_postgres_use_a_scratch_schema_and_drop_it() {
    let Some(url) = postgres::server_url("runtime_and_worker_on_postgres") else {
        return;
    };
    let schemas = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(a2_store::postgres::schemas_with_prefix(&url, "a2_bench_"))
            .unwrap()
    };
    let before = schemas();
    for mut args in [RUNTIME.to_vec(), worker_args()] {
        args.push(&url);
        let out = report(&args);
        assert_runtime(&out["backends"][0], true);
        assert_eq!(schemas(), before, "scratch schemas left behind: {args:?}");
    }
}
