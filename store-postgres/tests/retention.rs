//! Retention on PostgreSQL beyond the conformance cases: a 10,000-event
//! session deleted in one call, a stream on another store instance ended by
//! the delete's `NOTIFY`, completions of a deleted incarnation superseded
//! through the batching writer, and prune's candidates read from the
//! `sessions_idle` index. Runs only when `A2_POSTGRES_URL` is set.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, ClaimRequest, CompleteRequest, CompleteResult, DeleteSessionRequest,
    DeleteSessionResult, ErrorCode, ManualClock, NewEvent, PruneRequest, RandomIds, Store, Target,
};
use a2_store_postgres::PostgresStore;
use futures::StreamExt;
use serde_json::json;
use support::PgFactory;

/// A store on `schema` of `factory` with `clock`.
async fn store_on(factory: &PgFactory, schema: &str, clock: &ManualClock) -> PostgresStore {
    factory
        .store_on(schema, Arc::new(clock.clone()), Arc::new(RandomIds))
        .await
        .expect("connect")
}

/// A session of 10,000 events (each with a finished event cursor kept for
/// replay) is deleted by one call, within the statement timeout; the
/// time is printed (the README's figure is a release build's).
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10000_event_session_is_deleted_in_one_call() {
    let Some(factory) = PgFactory::from_env("retention") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let store = store_on(&factory, &schema, &clock).await;
    for batch in 0..20 {
        let events = (0..500)
            .map(|n| {
                let event = NewEvent::new("e", json!({"n": batch * 500 + n}));
                if n % 10 == 0 {
                    event.with_target(Target::event("agent"))
                } else {
                    event
                }
            })
            .collect();
        store
            .append("big", events, AppendOptions::default())
            .await
            .expect("append");
    }
    // Finish the targeted heads so the delete needs no force.
    loop {
        let claim = ClaimRequest::new("big", "w", Duration::from_secs(60)).with_limit(100);
        let heads = store
            .claim_available(claim)
            .await
            .expect("claim")
            .into_heads();
        if heads.is_empty() {
            break;
        }
        for head in &heads {
            let done = store
                .complete_attempt(CompleteRequest::for_head(head, Vec::new()))
                .await
                .expect("complete");
            assert!(matches!(done, CompleteResult::Completed { .. }), "{done:?}");
        }
    }
    let started = Instant::now();
    let result = store
        .delete_session(DeleteSessionRequest::new("big"))
        .await
        .expect("delete");
    let took = started.elapsed();
    eprintln!("deleting a 10,000-event session took {took:?}");
    let DeleteSessionResult::Deleted { removed } = result else {
        panic!("expected Deleted, got {result:?}");
    };
    assert_eq!((removed.head, removed.events), (10_000, 10_000));
    let client = support::raw_client(factory.url()).await;
    for table in ["events", "cursors", "completions", "sessions", "work"] {
        let left: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM \"{schema}\".{table} WHERE session_id = 'big'"),
                &[],
            )
            .await
            .expect("count")
            .get(0);
        assert_eq!(left, 0, "{table} keeps rows of the deleted session");
    }
}

/// A stream opened through one store instance ends with `SessionDeleted`
/// when another instance on the same schema deletes the session (the
/// delete's `NOTIFY` wakes it), and does not follow the new session of the
/// same id.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_another_instance_ends_with_the_delete() {
    let Some(factory) = PgFactory::from_env("retention") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let follower = store_on(&factory, &schema, &clock).await;
    let deleter = store_on(&factory, &schema, &clock).await;
    follower
        .append(
            "s",
            vec![NewEvent::new("a", json!(1))],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let mut stream = follower.subscribe("s", 0).await.expect("subscribe");
    let first = stream.next().await.expect("open").expect("row");
    assert_eq!(first.index, 1);
    deleter
        .delete_session(DeleteSessionRequest::new("s"))
        .await
        .expect("delete");
    deleter
        .append(
            "s",
            vec![NewEvent::new("b", json!(2))],
            AppendOptions::default(),
        )
        .await
        .expect("append to the new session");
    let ended = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the stream ended within 10 s");
    match ended {
        Some(Err(error)) => assert_eq!(error.code(), ErrorCode::SessionDeleted, "{error}"),
        other => panic!("expected SessionDeleted, got {other:?}"),
    }
    assert!(
        stream.next().await.is_none(),
        "the stream ends after the error"
    );
}

/// Completions of a deleted incarnation's heads, sent together so the
/// batching writer takes them in one transaction, are all superseded; the
/// new session's heads (same consumer, index and attempt) stay leased.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_completions_of_a_deleted_incarnation_are_superseded() {
    let Some(factory) = PgFactory::from_env("retention") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let store = store_on(&factory, &schema, &clock).await;
    let events = || -> Vec<NewEvent> {
        (0..32)
            .map(|n| NewEvent::new("e", json!(n)).with_target(Target::event("agent")))
            .collect()
    };
    let claim = || ClaimRequest::new("s", "w", Duration::from_secs(60)).with_limit(32);
    store
        .append("s", events(), AppendOptions::default())
        .await
        .expect("append");
    let old = store
        .claim_available(claim())
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(old.len(), 32);
    store
        .delete_session(DeleteSessionRequest::new("s").forced())
        .await
        .expect("delete");
    store
        .append("s", events(), AppendOptions::default())
        .await
        .expect("append again");
    let new = store
        .claim_available(claim())
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(new.len(), 32);
    assert_ne!(old[0].incarnation, new[0].incarnation);
    let answers = futures::future::join_all(
        old.iter()
            .map(|head| store.complete_attempt(CompleteRequest::for_head(head, Vec::new()))),
    )
    .await;
    for answer in answers {
        assert_eq!(answer.expect("complete"), CompleteResult::Superseded);
    }
    let cursors = store.cursors("s").await.expect("cursors");
    let leased = cursors
        .iter()
        .filter(|cursor| cursor.head.is_some() && cursor.dispatch.claim_holder.is_some())
        .count();
    assert_eq!(leased, 32, "a stale completion finished a new head");
    let answers = futures::future::join_all(
        new.iter()
            .map(|head| store.complete_attempt(CompleteRequest::for_head(head, Vec::new()))),
    )
    .await;
    for answer in answers {
        assert!(matches!(
            answer.expect("complete"),
            CompleteResult::Completed { .. }
        ));
    }
}

/// Prune's candidates come from the `sessions_idle` index, a page at a
/// time, whatever the number of sessions: the plan of both candidate
/// queries is an index scan of it.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_pages_read_the_idle_index() {
    let Some(factory) = PgFactory::from_env("retention") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let store = store_on(&factory, &schema, &clock).await;
    let client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; \
             INSERT INTO sessions (session_id, head, last_activity) \
               SELECT 'bulk-' || n, 1, n FROM generate_series(1, 20000) n; ANALYZE sessions"
        ))
        .await
        .expect("many sessions");
    for (sql, params) in [
        (
            "EXPLAIN SELECT session_id, last_activity FROM sessions WHERE last_activity < $1 \
             ORDER BY last_activity, session_id LIMIT $2",
            "(1000000::bigint, 100::bigint)",
        ),
        (
            "EXPLAIN SELECT session_id, last_activity FROM sessions WHERE last_activity < $1 \
             AND (last_activity, session_id) > ($2, $3) ORDER BY last_activity, session_id LIMIT $4",
            "(1000000::bigint, 500::bigint, 'bulk-500'::text, 100::bigint)",
        ),
    ] {
        let plan: Vec<String> = client
            .simple_query(&format!(
                "SET search_path TO \"{schema}\"; SET plan_cache_mode = force_generic_plan; \
                 PREPARE q AS {}; EXPLAIN EXECUTE q{params}; DEALLOCATE q",
                sql.trim_start_matches("EXPLAIN ")
            ))
            .await
            .expect("explain")
            .into_iter()
            .filter_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .collect();
        let plan = plan.join("\n");
        assert!(plan.contains("sessions_idle"), "{plan}");
        assert!(!plan.contains("Sort"), "{plan}");
    }
    let page = store
        .prune(PruneRequest::idle_for(Duration::from_millis(1)).with_limit(100))
        .await
        .expect("prune");
    assert_eq!(page.examined, 100);
    assert_eq!(page.sessions.len(), 100);
    let next = page.next.expect("more");
    assert_eq!(
        (next.last_activity_ms, next.session_id.as_str()),
        (100, "bulk-100")
    );
}
