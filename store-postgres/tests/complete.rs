//! Completions of heads this store claimed are decided on the row its claim
//! wrote and sent in one round trip behind a guard (`expect_unchanged`,
//! schema version 10). These tests count the guard's calls on the server
//! (`pg_stat_user_functions`, with `track_functions = pl` on the store's
//! connections) to show when that path is taken, and check that a stale
//! row (another store renewed the claim) still completes once. A call that
//! raises is not counted by PostgreSQL.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, ClaimRequest, CompleteRequest, CompleteResult, CounterIds, FailOutcome,
    FailRequest, Head, HeldClaim, ManualClock, NewEvent, RenewRequest, Store, Target,
};
use a2_store_postgres::PostgresStore;
use serde_json::json;
use support::PgFactory;

/// `url` with `-c track_functions=pl` added to its startup options.
fn tracking(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20track_functions%3Dpl")
}

fn claim(session: &str) -> ClaimRequest {
    ClaimRequest {
        session_id: session.into(),
        holder: "w".into(),
        ttl_ms: Some(10_000),
        ..ClaimRequest::default()
    }
}

/// Appends message `n` for consumer `agent` to session `s` and claims it
/// through `store`.
async fn append_and_claim(store: &PostgresStore, n: i64) -> Head {
    let event = NewEvent::new("e", json!(n)).with_target(Target::event("agent"));
    store
        .append("s", vec![event], AppendOptions::default())
        .await
        .expect("append");
    store
        .claim_available(claim("s"))
        .await
        .expect("claim")
        .into_heads()
        .remove(0)
}

/// How often the guard ran in `schema`, once the backends that ran it have
/// reported (they report when their connection closes; waits at most 20 s
/// for `expected`, then returns what it found).
async fn guard_calls(url: &str, schema: &str, expected: i64) -> i64 {
    let client = support::raw_client(url).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .expect("clear the stats snapshot");
        let row = client
            .query_one(
                "SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_user_functions \
                 WHERE schemaname = $1 AND funcname = 'expect_unchanged'",
                &[&schema],
            )
            .await
            .expect("read the function stats");
        let calls: i64 = row.get(0);
        if calls >= expected || Instant::now() >= deadline {
            return calls;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_of_heads_this_store_claimed_are_guarded_in_one_step() {
    let Some(plain) = support::url_or_skip("complete") else {
        return;
    };
    let url = tracking(&plain);
    let factory = PgFactory::for_url(&url);
    let schema = factory.schema();
    let clock = ManualClock::new(1_700_000_000_000);
    let open = || async {
        factory
            .store_on(
                &schema,
                Arc::new(clock.clone()),
                Arc::new(CounterIds::new("g")),
            )
            .await
            .expect("connect")
    };
    let (a, b) = (open().await, open().await);
    let event = |n: i64| NewEvent::new("e", json!(n)).with_target(Target::event("agent"));
    a.append("s", (1..=3).map(event).collect(), AppendOptions::default())
        .await
        .expect("append");
    let heads = a
        .claim_available(claim("s"))
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(heads.len(), 3);
    for head in &heads {
        let done = a
            .complete_attempt(CompleteRequest::for_head(head, Vec::new()))
            .await
            .expect("complete");
        assert!(matches!(done, CompleteResult::Completed { .. }), "{done:?}");
    }
    // Another store renews the claim: the claiming store's row is stale, its
    // guard fails, and the completion is decided on the row read instead.
    let head = append_and_claim(&a, 4).await;
    clock.advance(1_000);
    let renewed = b
        .renew_claims(RenewRequest {
            incarnation: None,
            session_id: "s".into(),
            holder: "w".into(),
            claims: vec![HeldClaim {
                cursor: head.cursor_ref(),
                attempt: head.dispatch.attempt_count,
            }],
            ttl_ms: Some(10_000),
            expires_at_ms: None,
        })
        .await
        .expect("renew");
    assert_eq!(renewed.renewed.len(), 1);
    let done = a
        .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
        .await
        .expect("complete after another store's renewal");
    assert!(matches!(done, CompleteResult::Completed { .. }), "{done:?}");
    assert_eq!(a.cursors("s").await.expect("cursors"), vec![]);
    // A store that claimed nothing itself reads the row first: no guard.
    let head = append_and_claim(&a, 5).await;
    let done = b
        .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
        .await
        .expect("complete through the other store");
    assert!(matches!(done, CompleteResult::Completed { .. }), "{done:?}");
    // A failure of a head this store claimed takes the guarded path too.
    let head = append_and_claim(&a, 6).await;
    let failed = a
        .fail_attempt(FailRequest::for_head(&head, "down", None))
        .await
        .expect("fail");
    assert_eq!(failed.outcome, FailOutcome::Failed);
    drop((a, b));
    // PostgreSQL counts only calls that return: the stale guard raised (the
    // conformance case `late_completion_after_reclaim_on_other_instance_is_superseded`
    // shows it refusing), so three completions and one failure.
    assert_eq!(
        guard_calls(&plain, &schema, 4).await,
        4,
        "three guarded completions and a guarded failure passed, none through the other store"
    );
}
