//! The worker on PostgreSQL, each test in a fresh schema: the shared
//! scenarios in one process, three worker processes over one schema (one
//! killed mid-work), and the example program. Runs only when
//! `A2_POSTGRES_URL` is set; without it each test prints that it was not run.

mod common;

use a2_store::postgres::{fresh_schema_name, ScratchSchemas};
use common::processes::{open, run_example, three_processes};

/// A URL naming a fresh schema on the server of `A2_POSTGRES_URL`, and the
/// scratch handle that drops it; `None` (and a note) without a server.
fn postgres_url(test: &str) -> Option<(ScratchSchemas, String)> {
    let Ok(server) = std::env::var("A2_POSTGRES_URL") else {
        eprintln!("{test}: not run, A2_POSTGRES_URL is not set");
        return None;
    };
    let schema = fresh_schema_name("a2w_").expect("schema name");
    let scratch = ScratchSchemas::new(server.clone(), "a2w_");
    scratch.adopt(&schema).expect("adopt the schema");
    let joiner = if server.contains('?') { '&' } else { '?' };
    Some((scratch, format!("{server}{joiner}schema={schema}")))
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_with_unruly_handlers() {
    let Some((scratch, url)) = postgres_url("three_workers_with_unruly_handlers") else {
        return;
    };
    common::three_unruly_workers(open(&url).await, "pg", true).await;
    scratch.drop_all().await.expect("drop the schema");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_mid_work() {
    let Some((scratch, url)) = postgres_url("shutdown_mid_work") else {
        return;
    };
    common::shutdown_mid_work(open(&url).await, "pg").await;
    scratch.drop_all().await.expect("drop the schema");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_fills_every_slot() {
    let Some((scratch, url)) = postgres_url("a_backlog_fills_every_slot") else {
        return;
    };
    common::backlog_fills_every_slot(open(&url).await, "pg").await;
    scratch.drop_all().await.expect("drop the schema");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_worker_processes_one_killed() {
    let Some((scratch, url)) = postgres_url("three_worker_processes_one_killed") else {
        return;
    };
    three_processes(&url, true).await;
    scratch.drop_all().await.expect("drop the schema");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_worker_program() {
    let Some((scratch, url)) = postgres_url("example_worker_program") else {
        return;
    };
    run_example(&url).await;
    scratch.drop_all().await.expect("drop the schema");
}

#[test]
#[ignore = "a worker process that the process tests start themselves"]
fn worker_process() {
    common::processes::child_main();
}
