//! `redrive_all` costs in proportion to the dead letters, not to the
//! cursors or sessions: `EXPLAIN (ANALYZE, FORMAT JSON)` of the very
//! statement it runs (included from the crate's source) among 40,000
//! cursors of 20,000 sessions, 8 of them dead letters, counts the cursor
//! rows each plan reads. Counts of rows, not timings.

mod support;

#[allow(dead_code)]
#[path = "../src/ops/fail/sql.rs"]
mod fail_sql;

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, BulkRedrive, ClaimRequest, ManualClock, NewEvent, RandomIds, RedriveAction,
    Store, Target,
};
use serde_json::{json, Value};
use support::PgFactory;

/// Cursor rows a plan node and its children read (rows returned plus rows
/// removed by a filter, over every loop), and the scans of `cursors` (an
/// index scan by its index, a bitmap scan by the index under it).
fn cursor_rows_read(node: &Value, scans: &mut Vec<String>) -> f64 {
    let mut read = 0.0;
    if node["Node Type"] == "Bitmap Index Scan" {
        scans.push(node["Index Name"].as_str().unwrap_or("?").to_owned());
    }
    if node["Relation Name"] == "cursors" {
        let loops = node["Actual Loops"].as_f64().unwrap_or(1.0);
        let rows = node["Actual Rows"].as_f64().unwrap_or(0.0);
        let removed = node["Rows Removed by Filter"].as_f64().unwrap_or(0.0);
        read += (rows + removed) * loops;
        if node["Node Type"] != "Bitmap Heap Scan" {
            let how = node["Index Name"]
                .as_str()
                .unwrap_or_else(|| node["Node Type"].as_str().unwrap_or("?"));
            scans.push(how.to_owned());
        }
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        read += cursor_rows_read(child, scans);
    }
    read
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_all_reads_only_dead_letters() {
    let Some(factory) = PgFactory::from_env("redrive_all") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let store = factory
        .store_on(&schema, Arc::new(clock.clone()), Arc::new(RandomIds))
        .await
        .expect("connect");
    const DEAD: usize = 8;
    for n in 0..DEAD {
        let session = format!("d{n}");
        let event = NewEvent::new("e", json!(n)).with_target(Target::event("agent"));
        store
            .append(&session, vec![event], AppendOptions::default())
            .await
            .expect("append");
        let claim = ClaimRequest::new(&session, "w", std::time::Duration::from_secs(1));
        support::dead_letter_one(&store, claim).await;
    }
    let mut client = support::raw_client(factory.url()).await;
    // Sessions with a live head and a finished event cursor each, written
    // directly (their events are not needed: nothing reads them here).
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; \
             INSERT INTO sessions (session_id, head) \
               SELECT 'l' || n, 2 FROM generate_series(1, 20000) AS n; \
             INSERT INTO cursors (session_id, consumer, lane, slot, kind, position, head) \
               SELECT 'l' || n, 'agent', '', k, 0, k - 1, CASE WHEN k = 2 THEN 2 END \
               FROM generate_series(1, 20000) AS n, generate_series(1, 2) AS k; \
             ANALYZE cursors; ANALYZE sessions;"
        ))
        .await
        .expect("fill the cursors");
    let sql = fail_sql::bulk("c.session_id, c.head", false);
    let consumer: Option<&str> = Some("agent");
    let none: Option<&str> = None;
    let no_time: Option<i64> = None;
    let no_sessions: Option<Vec<String>> = None;
    let limit: i64 = 5;
    for plan in ["custom", "generic"] {
        let tx = client.transaction().await.expect("begin");
        tx.batch_execute(&format!("SET LOCAL search_path TO \"{schema}\""))
            .await
            .expect("search path");
        let row = if plan == "custom" {
            tx.query_one(
                &format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"),
                &[
                    &consumer,
                    &none,
                    &none,
                    &no_time,
                    &no_time,
                    &no_sessions,
                    &limit,
                ],
            )
            .await
            .expect("explain")
        } else {
            tx.batch_execute(&format!(
                "SET LOCAL plan_cache_mode = force_generic_plan; \
                 PREPARE bulk (text, text, text, bigint, bigint, text[], bigint) AS {sql}"
            ))
            .await
            .expect("prepare");
            tx.query_one(
                "EXPLAIN (ANALYZE, FORMAT JSON) \
                 EXECUTE bulk ('agent', NULL, NULL, NULL, NULL, NULL, 5)",
                &[],
            )
            .await
            .expect("explain")
        };
        tx.rollback().await.expect("rollback");
        if plan == "generic" {
            client
                .batch_execute("DEALLOCATE bulk")
                .await
                .expect("deallocate");
        }
        let json: Value = row.get(0);
        let mut scans = Vec::new();
        let read = cursor_rows_read(&json[0]["Plan"], &mut scans);
        assert!(
            read <= DEAD as f64,
            "{plan}: read {read} cursor rows through {scans:?} for {DEAD} dead letters"
        );
        assert_eq!(scans, vec!["cursors_dead"], "{plan}");
    }
    let mut bulk = BulkRedrive::new(RedriveAction::Retry);
    bulk.limit = Some(5);
    let page = store.redrive_all(bulk.clone()).await.expect("redrive all");
    let sessions: Vec<&str> = page
        .redriven
        .iter()
        .map(|h| h.session_id.as_str())
        .collect();
    assert_eq!(sessions, vec!["d0", "d1", "d2", "d3", "d4"]);
    assert!(page.more);
    let rest = store.redrive_all(bulk).await.expect("redrive all");
    assert_eq!((rest.redriven.len(), rest.more), (3, false));
}
