//! `PostgresStore::health`: the schema's tables with their tuple counts and
//! sizes, and the server's oldest open transaction.

mod support;

use std::sync::Arc;

use a2_store_api::{AppendOptions, CounterIds, NewEvent, Store, SystemClock, Target};
use support::PgFactory;

/// Every table of the schema is reported with its sizes; a dead row
/// version shows in the table's count; a transaction a side connection
/// holds open (with a transaction id) is the oldest, holding the horizon.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_tables_dead_tuples_and_the_oldest_transaction() {
    let Some(factory) = PgFactory::from_env("health") else {
        return;
    };
    let schema = factory.schema();
    let store = factory
        .store_on(
            &schema,
            Arc::new(SystemClock),
            Arc::new(CounterIds::new("h")),
        )
        .await
        .expect("connect");
    let event = NewEvent::new("e", serde_json::json!({})).with_target(Target::event("agent"));
    store
        .append("s", vec![event], AppendOptions::default())
        .await
        .expect("append");

    // A dead version of the session row, reported by the side connection
    // as soon as it goes idle.
    let side = support::raw_client(factory.url()).await;
    side.batch_execute(&format!(
        "SELECT pg_stat_force_next_flush(); UPDATE \"{schema}\".sessions SET head = head"
    ))
    .await
    .expect("an update behind the store's back");
    side.batch_execute("SELECT 1").await.expect("idle");

    let holder = support::raw_client(factory.url()).await;
    holder
        .batch_execute("SET application_name = 'a2-health-test'; BEGIN; SELECT txid_current()")
        .await
        .expect("hold a transaction open");
    let pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);

    let health = store.health().await.expect("health");
    assert_eq!(health.schema, schema);
    for name in ["sessions", "events", "cursors", "work"] {
        let table = health
            .table(name)
            .unwrap_or_else(|| panic!("{name}: {health:?}"));
        assert!(table.table_bytes > 0, "{table:?}");
        assert!(table.index_bytes > 0, "{table:?}");
    }
    let sessions = health.table("sessions").expect("sessions");
    assert!(sessions.dead_tuples >= 1, "{sessions:?}");
    assert!(sessions.updates >= 1, "{sessions:?}");
    assert!(health.dead_tuples() >= 1);
    assert!(health.total_bytes() > sessions.total_bytes());
    // Other tests may hold older transactions on a shared server; when the
    // holder is the oldest, it is reported as such.
    let oldest = health
        .oldest_transaction
        .clone()
        .expect("an open transaction");
    if oldest.pid == pid {
        assert_eq!(oldest.application_name, "a2-health-test");
        assert!(oldest.holds_horizon, "{oldest:?}");
        assert_eq!(oldest.state.as_deref(), Some("idle in transaction"));
    }
    holder.batch_execute("COMMIT").await.expect("commit");

    store.drop_schema().await.expect("drop");
    let gone = store.health().await.expect_err("no tables after the drop");
    assert_eq!(gone.code(), a2_store_api::ErrorCode::Backend, "{gone}");
}
