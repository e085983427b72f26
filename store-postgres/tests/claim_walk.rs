//! Busy heads and the claim walk (schema version 6).
//!
//! A claim's statements visit O(1) cursor rows however many heads other
//! holders have in flight: `EXPLAIN (ANALYZE, FORMAT JSON)` of the very
//! statements a claim runs (included from the crate's source) counts the
//! cursor rows each plan reads. Counts of rows, not timings: speed is the
//! benches' business. And a promoted head stays busy when the clock moves
//! back before its expiry.

mod support;

#[allow(dead_code)]
#[path = "../src/ops/claims/sql.rs"]
mod claim_sql;

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, ConsumerDeclaration, CounterIds, ManualClock,
    NewEvent, Store, Target,
};
use serde_json::{json, Value};
use support::PgFactory;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

/// Heads claimed by another holder, all below the one free head.
const IN_FLIGHT: usize = 2_000;

const SESSION: &str = "s";
const NOW: i64 = 1_000;

/// Appends `count` events for the event consumer `notifier`.
async fn append(store: &dyn Store, count: usize) {
    let events = (0..count)
        .map(|i| NewEvent::new("e", json!(i)).with_target(Target::event("notifier")))
        .collect();
    store
        .append(SESSION, events, AppendOptions::default())
        .await
        .expect("append");
}

fn claim(holder: &str, limit: Option<usize>) -> ClaimRequest {
    ClaimRequest {
        session_id: SESSION.into(),
        holder: holder.into(),
        ttl_ms: Some(60_000),
        limit,
        ..ClaimRequest::default()
    }
}

/// Cursor rows a plan node and its children read: rows returned plus rows
/// removed by a filter, over every loop, for each scan of `cursors`.
fn cursor_rows_read(node: &Value, scans: &mut Vec<String>) -> f64 {
    let mut read = 0.0;
    if node["Relation Name"] == "cursors" {
        let loops = node["Actual Loops"].as_f64().unwrap_or(1.0);
        let rows = node["Actual Rows"].as_f64().unwrap_or(0.0);
        let removed = node["Rows Removed by Filter"].as_f64().unwrap_or(0.0);
        read += (rows + removed) * loops;
        let how = node["Index Name"]
            .as_str()
            .unwrap_or_else(|| node["Node Type"].as_str().unwrap_or("?"));
        scans.push(how.to_owned());
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        read += cursor_rows_read(child, scans);
    }
    read
}

/// What one plan of a statement read: the cursor rows and the scans of
/// `cursors` that read them.
struct Read {
    plan: &'static str,
    rows: f64,
    scans: Vec<String>,
}

/// The parameter types of the walk and the `Busy` answer, and the values
/// the test binds, spelled as SQL for `EXECUTE` (whose arguments cannot be
/// bound): session `s`, no `through`, every consumer, nothing excluded, now.
const TYPES: &str = "text, bigint, text[], text[], text[], bigint[], bigint";
const ARGS: &str = "'s', NULL, NULL, '{}', '{}', '{}', 1000";

/// Runs `sql` under `EXPLAIN (ANALYZE, FORMAT JSON)` twice: planned for the
/// values bound (a custom plan), and prepared with a generic plan as a
/// statement the store reuses may be (`types` and `args` spell the
/// parameters for `PREPARE` and `EXECUTE`). Each run is in a transaction
/// that is rolled back (the walk and the promotion take locks).
async fn reads(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    (types, args): (&str, &str),
) -> Vec<Read> {
    let mut reads = Vec::new();
    for plan in ["custom", "generic"] {
        let tx = client.transaction().await.expect("begin");
        let row = if plan == "custom" {
            tx.query_one(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), params)
                .await
                .expect("explain")
        } else {
            tx.batch_execute(&format!(
                "SET LOCAL plan_cache_mode = force_generic_plan; \
                 PREPARE explained ({types}) AS {sql}"
            ))
            .await
            .expect("prepare");
            tx.query_one(
                &format!("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained ({args})"),
                &[],
            )
            .await
            .expect("explain")
        };
        let json: Value = row.get(0);
        tx.rollback().await.expect("rollback");
        if plan == "generic" {
            // PREPARE outlives the rollback.
            client
                .batch_execute("DEALLOCATE explained")
                .await
                .expect("deallocate");
        }
        let mut scans = Vec::new();
        let rows = cursor_rows_read(&json[0]["Plan"], &mut scans);
        reads.push(Read { plan, rows, scans });
    }
    reads
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_no_busy_head() {
    let Some(factory) = PgFactory::from_env("claim_walk") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(NOW);
    let store = factory
        .store_on(
            &schema,
            Arc::new(clock.clone()),
            Arc::new(CounterIds::new("g")),
        )
        .await
        .expect("connect");
    append(&store, IN_FLIGHT).await;
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(claim("other", None))
        .await
        .expect("claim")
    else {
        panic!("the heads are claimable");
    };
    assert_eq!(heads.len(), IN_FLIGHT);
    append(&store, 1).await;

    let mut client = support::raw_client(factory.url()).await;
    // Statistics as autovacuum would leave them, so the plans do not depend
    // on whether it has run yet.
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; ANALYZE cursors; ANALYZE events"
        ))
        .await
        .expect("analyze");
    let no_keys: Vec<String> = Vec::new();
    let no_slots: Vec<i64> = Vec::new();
    let through: Option<i64> = None;
    let served: Option<Vec<String>> = None;
    let limit: Option<i64> = Some(1);
    let base: [&(dyn ToSql + Sync); 7] = [
        &SESSION, &through, &served, &no_keys, &no_keys, &no_slots, &NOW,
    ];

    // Nothing expired: the promotion's selection reads no row.
    let due: [&(dyn ToSql + Sync); 2] = [&SESSION, &NOW];
    let spelled = ("text, bigint", "'s', 1000");
    for read in reads(&mut client, claim_sql::DUE, &due, spelled).await {
        assert_eq!(
            read.rows, 0.0,
            "the {} plan promoting nothing read busy heads ({:?})",
            read.plan, read.scans
        );
    }

    // The walk reads the one free head, not the busy heads below it.
    let walk = claim_sql::walk("c.consumer, c.slot, e.idx");
    let mut walk_params = base.to_vec();
    walk_params.push(&limit);
    for read in reads(
        &mut client,
        &walk,
        &walk_params,
        (&format!("{TYPES}, bigint"), &format!("{ARGS}, 1")),
    )
    .await
    {
        assert_eq!(read.scans, vec!["cursors_ready"], "{} plan", read.plan);
        assert_eq!(
            read.rows, 1.0,
            "the {} plan of the walk read busy heads to reach the free one",
            read.plan
        );
    }

    // The store agrees: the free head is claimed.
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(claim("w", Some(1)))
        .await
        .expect("claim")
    else {
        panic!("the free head is claimable");
    };
    let claimed: Vec<u64> = heads.iter().map(|head| head.event.index).collect();
    assert_eq!(claimed, vec![u64::try_from(IN_FLIGHT + 1).expect("index")]);

    // With every head busy, the `Busy` answer is three probes of one row
    // at most each, and says when the first lease ends.
    for read in reads(&mut client, &claim_sql::retry_at(), &base, (TYPES, ARGS)).await {
        assert!(
            read.rows <= 3.0,
            "the {} plan of the busy answer read {} rows ({:?})",
            read.plan,
            read.rows,
            read.scans
        );
    }
    assert_eq!(
        store
            .claim_available(claim("w", None))
            .await
            .expect("claim"),
        ClaimResult::Busy {
            retry_at: NOW + 60_000
        }
    );
}

/// A head promoted after its lease ran out is busy again when the clock
/// moves back before its expiry: it sets `retry_at` and is not claimed
/// until then (as the memory backend's
/// `a_clock_moving_back_keeps_a_promoted_claim_busy`).
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_moving_back_keeps_a_promoted_claim_busy() {
    let Some(factory) = PgFactory::from_env("claim_walk") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(NOW);
    let store = factory
        .store_on(
            &schema,
            Arc::new(clock.clone()),
            Arc::new(CounterIds::new("g")),
        )
        .await
        .expect("connect");
    append(&store, 2).await;
    let request = |consumers: Option<Vec<ConsumerDeclaration>>, limit| ClaimRequest {
        ttl_ms: Some(100),
        consumers,
        ..claim("w", limit)
    };
    let claimed = store
        .claim_available(request(None, None))
        .await
        .expect("claim");
    assert!(
        matches!(claimed, ClaimResult::Claimed { .. }),
        "{claimed:?}"
    );
    clock.advance(200);
    // A claim for another consumer promotes both expired heads without
    // taking them; one more claim takes the first again.
    let other = Some(vec![ConsumerDeclaration::targeted("other")]);
    assert_eq!(
        store
            .claim_available(request(other, None))
            .await
            .expect("claim"),
        ClaimResult::Settled
    );
    let taken = store
        .claim_available(request(None, Some(1)))
        .await
        .expect("claim");
    assert!(matches!(taken, ClaimResult::Claimed { .. }), "{taken:?}");
    // Back before the second head's expiry: it is busy until then, sooner
    // than the first head's new lease ends.
    clock.set(NOW + 50);
    assert_eq!(
        store
            .claim_available(request(None, None))
            .await
            .expect("claim"),
        ClaimResult::Busy {
            retry_at: NOW + 100
        }
    );
    clock.set(NOW + 100);
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(request(None, None))
        .await
        .expect("claim")
    else {
        panic!("the expired claim is claimed again");
    };
    let taken: Vec<(u64, u32, u32)> = heads
        .iter()
        .map(|head| {
            let dispatch = &head.dispatch;
            (
                head.event.index,
                dispatch.attempt_count,
                dispatch.failure_count,
            )
        })
        .collect();
    assert_eq!(taken, vec![(2, 2, 1)]);
}

/// With a pause in force in the session, the walk stays an ordered scan
/// of `cursors_ready` (the paused consumer's head is passed over, the free
/// head taken), and the `Busy` answer reads a bounded number of rows.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_keeps_the_claim_walk_on_its_index() {
    use a2_store_api::PauseRequest;
    let Some(factory) = PgFactory::from_env("claim_walk") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(NOW);
    let store = factory
        .store_on(
            &schema,
            Arc::new(clock.clone()),
            Arc::new(CounterIds::new("g")),
        )
        .await
        .expect("connect");
    let paused = NewEvent::new("e", json!("p")).with_target(Target::event("paused"));
    store
        .append(SESSION, vec![paused], AppendOptions::default())
        .await
        .expect("append");
    store
        .pause(PauseRequest::in_session("paused", SESSION))
        .await
        .expect("pause");
    append(&store, IN_FLIGHT).await;
    let notifier = Some(vec![ConsumerDeclaration::targeted("notifier")]);
    let taken = store
        .claim_available(ClaimRequest {
            consumers: notifier,
            ..claim("other", None)
        })
        .await
        .expect("claim");
    assert_eq!(taken.heads().len(), IN_FLIGHT);
    append(&store, 1).await;
    let mut client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; ANALYZE cursors; ANALYZE events; ANALYZE pauses"
        ))
        .await
        .expect("analyze");
    let no_keys: Vec<String> = Vec::new();
    let no_slots: Vec<i64> = Vec::new();
    let through: Option<i64> = None;
    let served: Option<Vec<String>> = None;
    let limit: Option<i64> = Some(1);
    let base: [&(dyn ToSql + Sync); 7] = [
        &SESSION, &through, &served, &no_keys, &no_keys, &no_slots, &NOW,
    ];
    let walk = claim_sql::walk("c.consumer, c.slot, e.idx");
    let mut walk_params = base.to_vec();
    walk_params.push(&limit);
    for read in reads(
        &mut client,
        &walk,
        &walk_params,
        (&format!("{TYPES}, bigint"), &format!("{ARGS}, 1")),
    )
    .await
    {
        assert_eq!(read.scans, vec!["cursors_ready"], "{} plan", read.plan);
        assert!(
            read.rows <= 2.0,
            "the {} plan of the walk read {} rows to pass the paused head",
            read.plan,
            read.rows
        );
    }
    let claimed = store
        .claim_available(claim("w", None))
        .await
        .expect("claim");
    let heads: Vec<&str> = claimed
        .heads()
        .iter()
        .map(|h| h.consumer.as_str())
        .collect();
    assert_eq!(heads, vec!["notifier"], "the paused head is not claimed");
    for read in reads(&mut client, &claim_sql::retry_at(), &base, (TYPES, ARGS)).await {
        assert!(
            read.rows <= 4.0,
            "the {} plan of the busy answer read {} rows ({:?})",
            read.plan,
            read.rows,
            read.scans
        );
    }
    assert_eq!(
        store
            .claim_available(claim("w", None))
            .await
            .expect("claim"),
        ClaimResult::Busy {
            retry_at: NOW + 60_000
        }
    );
}
