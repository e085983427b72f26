//! Load on PostgreSQL: 4 processes of 4 worker tasks each drain targeted
//! work across 100 sessions on one fresh schema (dropped afterwards), with
//! the same injected failures, stalls and checks as the SQLite load test.
//! Runs only when `A2_POSTGRES_URL` is set; 2,000 events, 50,000 with
//! `A2_LOAD_FULL=1`, N with `A2_LOAD_EVENTS=N`. The children are this binary re-executed.

mod load_harness;
mod support;

use std::sync::Arc;

use a2_store_api::{RandomIds, Store, SystemClock};
use a2_store_postgres::PostgresStore;

const PROCESSES: usize = 4;
const TEST: &str = "postgres_processes_drain_targeted_load_exactly_once";

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

/// Drops the schema even when the test fails.
struct DropSchema(String, String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        support::drop_schemas(&self.0, vec![self.1.clone()]);
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn postgres_processes_drain_targeted_load_exactly_once() {
    let Some(url) = support::postgres_url(TEST) else {
        return;
    };
    if let Some(schema) = load_harness::worker_database() {
        load_harness::work(async move { open(&url, &schema).await });
        return;
    }
    let schema = support::fresh_schema();
    let _cleanup = DropSchema(url.clone(), schema.clone());
    let dir = tempfile::tempdir().expect("a temporary directory");
    load_harness::run(
        "postgres",
        TEST,
        PROCESSES,
        open(&url, &schema),
        &schema,
        dir.path(),
    );
}
