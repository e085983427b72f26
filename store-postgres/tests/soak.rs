//! Bloat: append + claim + complete cycles on one lane with autovacuum off
//! on the schema's tables, the sizes of the queue's state tables watched
//! through `PostgresStore::health`. Two phases of equal length: without
//! and then with a transaction held open on a side connection.
//!
//! Short by default (1,000 cycles a phase, sizes compared with those after
//! 333); with `A2_PG_SOAK=1`, 1,000,000 cycles a phase compared with those
//! after 10,000 (`A2_PG_SOAK_CYCLES=N` sets another count a phase). Sizes
//! are behaviour, so they are asserted; time is not measured.
//!
//! Asserted: in the first phase, the table updated in place only in
//! columns no index holds (`sessions`: HOT updates, pruned without vacuum)
//! stays within twice its size; in the second,
//! `health` reports the held transaction as holding back the horizon (an
//! idle transaction block keeps its catalog snapshot). Printed, not
//! asserted: `cursors`, `work` and `lane_queue` change indexed columns on
//! every claim and completion (non-HOT), and without vacuum each such
//! update leaves a dead line pointer behind (a page holds at most 291), so
//! they grow with the cycles until vacuum runs; in the second phase every
//! table grows, as no dead version can be removed (see the README, "Bloat").

mod support;

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, CounterIds, NewEvent, Store,
    SystemClock, Target,
};
use a2_store_postgres::{Health, PostgresStore};
use support::PgFactory;

/// The queue's state tables. The log (`events`) and the replay records
/// (`completions`) grow with the work done, by design, until the session is
/// cleared and reclaimed.
const STATE_TABLES: [&str; 4] = ["cursors", "lane_queue", "sessions", "work"];

/// The state tables whose updates are HOT.
const HOT_TABLES: [&str; 1] = ["sessions"];

fn bytes_of(health: &Health, tables: &[&str]) -> u64 {
    health
        .tables
        .iter()
        .filter(|table| tables.contains(&table.name.as_str()))
        .map(|table| table.total_bytes())
        .sum()
}

fn describe(health: &Health) -> String {
    health
        .tables
        .iter()
        .filter(|table| STATE_TABLES.contains(&table.name.as_str()))
        .map(|t| {
            format!(
                "{}: {} + {} bytes, {} dead, {}/{} HOT",
                t.name, t.table_bytes, t.index_bytes, t.dead_tuples, t.hot_updates, t.updates
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

async fn cycle(store: &PostgresStore, n: u64) {
    let event = NewEvent::new("job", serde_json::json!({ "n": n }))
        .with_target(Target::lane("agent", "main"));
    store
        .append("soak", vec![event], AppendOptions::default())
        .await
        .expect("append");
    let claimed = store
        .claim_available(ClaimRequest {
            session_id: "soak".into(),
            holder: "w".into(),
            ttl_ms: Some(60_000),
            limit: Some(1),
            ..ClaimRequest::default()
        })
        .await
        .expect("claim");
    let ClaimResult::Claimed { heads, .. } = claimed else {
        panic!("cycle {n}: {claimed:?}");
    };
    assert_eq!(heads.len(), 1, "cycle {n}");
    let head = &heads[0];
    store
        .complete_attempt(CompleteRequest {
            session_id: "soak".into(),
            consumer: head.consumer.clone(),
            lane: head.lane.clone(),
            index: head.event.index,
            attempt: head.dispatch.attempt_count,
            events: Vec::new(),
            consumers: None,
        })
        .await
        .expect("complete");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_updated_tables_stay_bounded_without_vacuum() {
    let Some(factory) = PgFactory::from_env("soak") else {
        return;
    };
    let long = std::env::var("A2_PG_SOAK").is_ok_and(|v| v == "1");
    let cycles: u64 = std::env::var("A2_PG_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if long { 1_000_000 } else { 1_000 });
    let base_after = if long || cycles >= 100_000 {
        cycles / 100
    } else {
        cycles / 3
    };
    let schema = factory.schema();
    let store = factory
        .store_on(
            &schema,
            Arc::new(SystemClock),
            Arc::new(CounterIds::new("s")),
        )
        .await
        .expect("connect");
    let raw = support::raw_client(factory.url()).await;
    let tables = raw
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = $1",
            &[&schema],
        )
        .await
        .expect("tables");
    for row in tables {
        let table: String = row.get(0);
        raw.batch_execute(&format!(
            "ALTER TABLE \"{schema}\".\"{table}\" SET (autovacuum_enabled = false)"
        ))
        .await
        .expect("autovacuum off");
    }
    let mut base = None;
    for n in 1..=cycles {
        cycle(&store, n).await;
        if n == base_after {
            let health = store.health().await.expect("health");
            let state = bytes_of(&health, &STATE_TABLES);
            eprintln!("after {n} cycles: {state} bytes; {}", describe(&health));
            base = Some(bytes_of(&health, &HOT_TABLES));
        }
    }
    let health = store.health().await.expect("health");
    let state = bytes_of(&health, &STATE_TABLES);
    eprintln!(
        "after {cycles} cycles: {state} bytes; {}",
        describe(&health)
    );
    let end = bytes_of(&health, &HOT_TABLES);
    let base = base.expect("base size");
    assert!(
        end <= 2 * base,
        "HOT-updated tables grew from {base} to {end} bytes: {}",
        describe(&health)
    );

    // Held open for the whole second phase, the way an idle client's is.
    let holder = support::raw_client(factory.url()).await;
    holder
        .batch_execute("BEGIN; SELECT 1")
        .await
        .expect("open a transaction");
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    for n in cycles + 1..=2 * cycles {
        cycle(&store, n).await;
    }
    let health = store.health().await.expect("health");
    let state = bytes_of(&health, &STATE_TABLES);
    eprintln!(
        "after {} more cycles under an open transaction: {state} bytes; {}",
        cycles,
        describe(&health)
    );
    let oldest = health
        .oldest_transaction
        .clone()
        .expect("the held transaction is open");
    // Other tests may hold older transactions on a shared server.
    if oldest.pid == holder_pid {
        assert!(oldest.holds_horizon, "{oldest:?}");
        assert_eq!(oldest.state.as_deref(), Some("idle in transaction"));
    }
    holder.batch_execute("COMMIT").await.expect("commit");
}
