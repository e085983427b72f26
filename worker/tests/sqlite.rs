//! The worker on a SQLite file: the shared scenarios in one process, three
//! worker processes over one file (one killed mid-work), and the example
//! program.

mod common;

use common::processes::{open, run_example, three_processes};

/// A SQLite file in a fresh temporary directory (kept while the guard lives).
fn sqlite_url() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite:{}", dir.path().join("worker.db").display());
    (dir, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_with_unruly_handlers() {
    let (_dir, url) = sqlite_url();
    common::three_unruly_workers(open(&url).await, "sq", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_mid_work() {
    let (_dir, url) = sqlite_url();
    common::shutdown_mid_work(open(&url).await, "sq").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_fills_every_slot() {
    let (_dir, url) = sqlite_url();
    common::backlog_fills_every_slot(open(&url).await, "sq").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_worker_processes_one_killed() {
    let (_dir, url) = sqlite_url();
    three_processes(&url, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_worker_program() {
    let (_dir, url) = sqlite_url();
    run_example(&url).await;
}

#[test]
#[ignore = "a worker process that the process tests start themselves"]
fn worker_process() {
    common::processes::child_main();
}
