//! Worker processes over one database: this test binary run again on its
//! ignored test `worker_process`, told the URL and holder through the
//! environment; a process shuts down gracefully when its standard input
//! closes.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::{OpenOptions, Store};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

const CHILD_URL: &str = "A2_WORKER_CHILD_URL";
const CHILD_HOLDER: &str = "A2_WORKER_CHILD_HOLDER";

/// The store at `url`, opened through the facade.
pub async fn open(url: &str) -> Arc<dyn Store> {
    a2_store::open(url, OpenOptions::default())
        .await
        .unwrap_or_else(|error| panic!("open {url}: {error}"))
}

/// Starts a worker process on `url`.
fn start_worker(url: &str, holder: &str) -> Child {
    start_child(
        "worker_process",
        &[(CHILD_URL, url), (CHILD_HOLDER, holder)],
        Stdio::null(),
    )
}

/// Runs this test binary again on its ignored test `test` alone, with
/// `env` set, standard input and output piped, `stderr` where asked.
pub fn start_child(test: &str, env: &[(&str, &str)], stderr: Stdio) -> Child {
    let exe = std::env::current_exe().expect("the test binary");
    Command::new(exe)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker process")
}

/// Closes the process's standard input (asking it to shut down), waits for
/// it and returns its summary line's counts (`SUMMARY name=count …`).
pub async fn stop_worker(mut child: Child) -> Vec<(String, u64)> {
    drop(child.stdin.take());
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut text = String::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stdout.read_to_string(&mut text));
    read.await
        .expect("the worker stops")
        .expect("read its output");
    let status = child.wait().await.expect("wait for it");
    assert!(status.success(), "worker process failed: {status}\n{text}");
    let line = text
        .lines()
        .find_map(|line| line.split_once("SUMMARY ").map(|(_, counts)| counts))
        .unwrap_or_else(|| panic!("no summary in:\n{text}"));
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.parse().expect("a count")))
        .collect()
}

/// Three worker processes over the database at `url`, handlers that fail,
/// panic and hang; with `kill_one`, one process is killed (SIGKILL) once a
/// third of the work is done. Every message is done exactly once, in lane
/// order, nothing dead-lettered.
pub async fn three_processes(url: &str, kill_one: bool) {
    let store = open(url).await;
    let sessions = super::session_ids("proc", 6);
    let mut workers: Vec<Child> = (0..3)
        .map(|n| start_worker(url, &format!("proc-w{n}")))
        .collect();
    let expected = super::produce(store.as_ref(), &sessions, 2, 10).await;
    if kill_one {
        let start = Instant::now();
        while super::done_count(store.as_ref(), &sessions).await < expected / 3 {
            assert!(start.elapsed() < Duration::from_secs(60), "no progress");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut victim = workers.remove(0);
        victim.kill().await.expect("kill a worker process");
    }
    super::wait_for_done(store.as_ref(), &sessions, expected, Duration::from_secs(90)).await;
    let mut completed = 0;
    let mut dead_lettered = 0;
    for worker in workers {
        for (name, value) in stop_worker(worker).await {
            match name.as_str() {
                "completed" => completed += value,
                "dead_lettered" => dead_lettered += value,
                _ => {}
            }
        }
    }
    assert_eq!(dead_lettered, 0);
    if !kill_one {
        assert_eq!(completed, expected as u64);
    }
    super::assert_exactly_once_in_order(store.as_ref(), &sessions, 20).await;
}

/// One worker process of [`three_processes`]: the body of each test
/// binary's ignored `worker_process` test, which only it starts.
pub fn child_main() {
    let url = std::env::var(CHILD_URL).expect("started by the process tests, with a URL");
    let holder = std::env::var(CHILD_HOLDER).expect("and a holder");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = open(&url).await;
        let calls = Arc::new(super::Calls::default());
        let worker = super::unruly_worker(store, &holder, calls, true)
            .spawn()
            .expect("spawn");
        // Runs until the parent closes standard input.
        let _ = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)
        })
        .await;
        let summary = worker.shutdown().await;
        assert_eq!(summary.error, None);
        let stats = summary.stats;
        println!(
            "SUMMARY completed={} failed={} panicked={} timed_out={} dead_lettered={} released={} superseded={}",
            stats.completed,
            stats.failed,
            stats.panicked,
            stats.timed_out,
            stats.dead_lettered,
            stats.released,
            stats.superseded
        );
    });
}

/// The example program (`examples/worker.rs`, built by `cargo test`) in its
/// demo mode on `url`: it answers every message once and exits 0.
pub async fn run_example(url: &str) {
    let exe = std::env::current_exe().expect("the test binary");
    let name = format!("worker{}", std::env::consts::EXE_SUFFIX);
    let example = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join(name))
        .expect("the target directory");
    assert!(
        example.exists(),
        "{} is missing: `cargo test -p a2-worker` builds it",
        example.display()
    );
    let output = Command::new(&example)
        .args([url, "--demo", "40"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("the example finishes")
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "example failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("all 40 messages answered once"), "{stdout}");
}
