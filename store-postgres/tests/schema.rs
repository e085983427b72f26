//! Connecting: option validation (always run), and against a server (when
//! `A2_POSTGRES_URL` is set) migrations, version refusal, schema isolation.

mod support;

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, ErrorCode, ManualClock, NewEvent, RandomIds,
    ReadOptions, Store, SystemClock, Target,
};
use a2_store_postgres::{PostgresOptions, PostgresStore, SCHEMA_VERSION};
use serde_json::json;
use support::{PgFactory, UNDO_10, UNDO_12, UNDO_14, UNDO_15, UNDO_9};

fn options(schema: &str) -> PostgresOptions {
    support::options(schema, Arc::new(SystemClock), Arc::new(RandomIds))
}

#[tokio::test]
async fn unsafe_schema_names_are_refused_before_connecting() {
    for schema in [
        "",
        "Public",
        "a-b",
        "x\"; DROP SCHEMA public; --",
        "pg_catalog",
    ] {
        let error = PostgresStore::connect("postgres://nobody@127.0.0.1:1/none", options(schema))
            .await
            .expect_err("refused");
        assert_eq!(error.code(), ErrorCode::InvalidInput, "{schema}: {error}");
    }
}

#[tokio::test]
async fn a_bad_url_or_pool_size_is_invalid_input() {
    let error = PostgresStore::connect("postgres://[::1", options("a2"))
        .await
        .expect_err("refused");
    assert_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
    let mut empty_pool = options("a2");
    empty_pool.pool_size = 0;
    let error = PostgresStore::connect("postgres://u@127.0.0.1/db", empty_pool)
        .await
        .expect_err("refused");
    assert_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_retryable() {
    // Port 1 on loopback: nothing listens there.
    let url = "postgres://postgres@127.0.0.1:1/test?connect_timeout=2";
    let error = PostgresStore::connect(url, options("a2"))
        .await
        .expect_err("no server");
    assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    assert!(error.is_retryable());
    assert!(!error.to_string().contains("127.0.0.1:1"), "{error}");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_connects_migrate_once() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let connects = (0..4).map(|_| PostgresStore::connect(factory.url(), options(&schema)));
    for store in futures::future::join_all(connects).await {
        store.expect("every concurrent connect succeeds");
    }
    let client = support::raw_client(factory.url()).await;
    let rows = client
        .query(
            &format!("SELECT version FROM \"{schema}\".schema_version"),
            &[],
        )
        .await
        .expect("version rows");
    let versions: Vec<i32> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(versions, vec![SCHEMA_VERSION]);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_a_newer_version_is_refused() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("first connect creates the schema");
    let client = support::raw_client(factory.url()).await;
    client
        .execute(
            &format!("UPDATE \"{schema}\".schema_version SET version = $1"),
            &[&(SCHEMA_VERSION + 1)],
        )
        .await
        .expect("pretend a newer build migrated");
    let error = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect_err("refused");
    assert_eq!(error.code(), ErrorCode::IncompatibleSchema, "{error}");
}

/// Undoes migration 7 (in a connection whose `search_path` is the schema).
const UNDO_7: &str = "DROP TABLE work;";

/// Undoes migration 6 (in a connection whose `search_path` is the schema):
/// dropping the column drops the two indexes over it; version 5's come back.
const UNDO_6: &str = "ALTER TABLE cursors DROP COLUMN expired; \
    CREATE INDEX cursors_ready ON cursors (session_id, head, consumer, lane) \
      WHERE head IS NOT NULL AND failed_at IS NULL; \
    CREATE INDEX cursors_busy ON cursors (session_id, claim_expires_at) \
      WHERE head IS NOT NULL AND failed_at IS NULL AND claim_expires_at IS NOT NULL;";

/// The live heads a version-4 schema already holds stay pending after the
/// upgrade: migration 7 indexes them in `work`, which `has_pending` reads
/// (version 5 counted them in `pending_counts`, which version 12 drops).
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_from_version_4_counts_existing_live_heads() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let store = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("connect");
    let mut event = NewEvent::new("e", json!({}));
    event.targets = vec![Target::event("notifier")];
    store
        .append("s", vec![event], AppendOptions::default())
        .await
        .expect("append a targeted event");
    drop(store);
    let client = support::raw_client(factory.url()).await;
    // Undo migrations 10 to 5 by hand: the schema as a version-4 build left
    // it (version 12 already dropped version 5's counts).
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; {UNDO_15} {UNDO_14} {UNDO_10} {UNDO_9} {UNDO_7} {UNDO_6} \
             CREATE INDEX cursors_pending ON cursors (session_id, consumer) \
               WHERE head IS NOT NULL AND failed_at IS NULL; \
             UPDATE schema_version SET version = 4"
        ))
        .await
        .expect("downgrade to version 4");
    let upgraded = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("reconnect migrates");
    let pending = upgraded
        .append("s", Vec::new(), AppendOptions::default())
        .await
        .expect("empty append");
    assert!(
        pending.has_pending,
        "the head stored before the upgrade is pending"
    );
    let other = upgraded
        .append("t", Vec::new(), AppendOptions::default())
        .await
        .expect("empty append");
    assert!(!other.has_pending, "another session has nothing pending");
}

/// Migration 6 leaves the heads claimed under version 5 unpromoted: one
/// whose lease is still running stays busy (and sets `retry_at`), one whose
/// lease ran out is promoted and claimed again by the next claim.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_from_version_5_keeps_leases_and_promotes_expired_ones() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000);
    let connect = || {
        factory.store_on(
            &schema,
            Arc::new(clock.clone()),
            Arc::new(a2_store_api::CounterIds::new("g")),
        )
    };
    let store = connect().await.expect("connect");
    let events = ["short", "long"]
        .iter()
        .map(|consumer| NewEvent::new("e", json!({})).with_target(Target::event(*consumer)))
        .collect();
    store
        .append("s", events, AppendOptions::default())
        .await
        .expect("append");
    for (consumer, ttl) in [("short", 100), ("long", 10_000)] {
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: "s".into(),
                holder: "w1".into(),
                ttl_ms: Some(ttl),
                consumers: Some(vec![a2_store_api::ConsumerDeclaration::targeted(consumer)]),
                ..ClaimRequest::default()
            })
            .await
            .expect("claim");
        assert!(
            matches!(claimed, ClaimResult::Claimed { .. }),
            "{claimed:?}"
        );
    }
    drop(store);
    let client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; {UNDO_15} {UNDO_14} {UNDO_12} {UNDO_10} {UNDO_9} {UNDO_7} {UNDO_6} \
             UPDATE schema_version SET version = 5"
        ))
        .await
        .expect("downgrade to version 5");
    clock.advance(200);
    let upgraded = connect().await.expect("reconnect migrates");
    let claim = ClaimRequest {
        session_id: "s".into(),
        holder: "w2".into(),
        ttl_ms: Some(100),
        ..ClaimRequest::default()
    };
    let ClaimResult::Claimed { heads, .. } = upgraded
        .claim_available(claim.clone())
        .await
        .expect("claim")
    else {
        panic!("the expired lease is claimed again");
    };
    let taken: Vec<(&str, u32)> = heads
        .iter()
        .map(|head| (head.consumer.as_str(), head.dispatch.attempt_count))
        .collect();
    assert_eq!(taken, vec![("short", 2)]);
    assert_eq!(
        upgraded.claim_available(claim).await.expect("claim"),
        ClaimResult::Busy { retry_at: 1_300 },
        "the running leases keep their heads busy"
    );
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_keep_deployments_apart_and_data_outlives_the_store() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let (one, two) = (factory.schema(), factory.schema());
    let first = PostgresStore::connect(factory.url(), options(&one))
        .await
        .expect("connect");
    let other = PostgresStore::connect(factory.url(), options(&two))
        .await
        .expect("connect");
    first
        .append(
            "s",
            vec![NewEvent::new("e", json!({"x": 1}))],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let elsewhere = other.read("s", ReadOptions::default()).await.expect("read");
    assert!(elsewhere.is_empty(), "another schema sees nothing");
    drop(first);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let again = PostgresStore::connect(factory.url(), options(&one))
        .await
        .expect("reconnect");
    let rows = again.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].payload, json!({"x": 1}));
    assert_eq!(again.schema(), one);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_postgres_cannot_hold_are_invalid_input_and_change_nothing() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let store = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("connect");
    // PostgreSQL text and jsonb cannot hold U+0000.
    let error = store
        .append(
            "s",
            vec![NewEvent::new("e", json!("nul \u{0}"))],
            AppendOptions::default(),
        )
        .await
        .expect_err("refused");
    assert_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
    let error = store
        .append(
            "nul\u{0}session",
            vec![NewEvent::new("e", json!(1))],
            AppendOptions::default(),
        )
        .await
        .expect_err("refused");
    assert_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
    let rows = store.read("s", ReadOptions::default()).await.expect("read");
    assert!(rows.is_empty(), "nothing was written");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_payloads_round_trip_through_jsonb() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let store = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("connect");
    let payloads = [
        json!(null),
        json!(true),
        json!(0.1),
        json!(1.5e300),
        json!(-2.5e-300),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(-0.0),
        json!("ünïcödé \u{1F600} \"quoted\" \\ back\nslash"),
        json!({"b": [1, {"a": null}], "a": {}, "": []}),
        json!([]),
    ];
    let events = payloads
        .iter()
        .map(|payload| NewEvent::new("e", payload.clone()))
        .collect();
    store
        .append("json", events, AppendOptions::default())
        .await
        .expect("append");
    let rows = store
        .read("json", ReadOptions::default())
        .await
        .expect("read");
    let read: Vec<_> = rows.into_iter().map(|row| row.payload).collect();
    assert_eq!(read, payloads);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_schema_name_still_notifies_subscribers() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema_with_suffix(&"x".repeat(27));
    assert_eq!(schema.len(), 63);
    let reader = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("connect");
    let writer = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("connect");
    let mut stream = reader.subscribe("s", 0).await.expect("subscribe");
    writer
        .append(
            "s",
            vec![NewEvent::new("e", json!(1))],
            AppendOptions::default(),
        )
        .await
        .expect("append on a 63-byte schema");
    let event = tokio::time::timeout(
        Duration::from_secs(10),
        futures::StreamExt::next(&mut stream),
    )
    .await
    .expect("delivered")
    .expect("open")
    .expect("row");
    assert_eq!(event.index, 1);
}

/// A schema at version 7 (no `rewrite_work`) holding pending work (an idle
/// head and one under a lease) opens at the current version: the idle head
/// is claimed across sessions, then completed, and the leased one is
/// claimed once its lease ends, each through the rewrite the upgrade
/// installed.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_from_version_7_finds_pending_work() {
    use a2_store_api::{ClaimWorkRequest, CompleteRequest, ConsumerDeclaration};
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let open = || async {
        factory
            .store_on(&schema, Arc::new(clock.clone()), Arc::new(RandomIds))
            .await
            .expect("connect")
    };
    let store = open().await;
    for session in ["idle", "leased"] {
        let event = NewEvent::new("e", json!({})).with_target(Target::event("agent"));
        store
            .append(session, vec![event], AppendOptions::default())
            .await
            .expect("append");
    }
    let leased = store
        .claim_available(ClaimRequest {
            session_id: "leased".into(),
            holder: "w".into(),
            ttl_ms: Some(1_000),
            ..ClaimRequest::default()
        })
        .await
        .expect("claim");
    assert!(matches!(leased, ClaimResult::Claimed { .. }), "{leased:?}");
    drop(store);
    let client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; {UNDO_15} {UNDO_14} {UNDO_12} {UNDO_10} {UNDO_9} DROP FUNCTION rewrite_work; \
             UPDATE schema_version SET version = 7"
        ))
        .await
        .expect("downgrade to version 7");
    let upgraded = open().await;
    let version: i32 = client
        .query_one(
            &format!("SELECT version FROM \"{schema}\".schema_version"),
            &[],
        )
        .await
        .expect("version")
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
    let request =
        || ClaimWorkRequest::new("w2", vec![ConsumerDeclaration::targeted("agent")], 5_000);
    let claimed = upgraded.claim_work(request()).await.expect("claim work");
    let heads: Vec<_> = claimed
        .heads()
        .map(|(s, h)| (s.to_owned(), h.clone()))
        .collect();
    assert_eq!(heads.len(), 1, "{claimed:?}");
    assert_eq!(heads[0].0, "idle");
    let head = &heads[0].1;
    upgraded
        .complete_attempt(CompleteRequest {
            incarnation: None,
            session_id: "idle".into(),
            consumer: head.consumer.clone(),
            lane: head.lane.clone(),
            index: head.event.index,
            attempt: head.dispatch.attempt_count,
            events: Vec::new(),
            consumers: None,
        })
        .await
        .expect("complete");
    clock.advance(1_000);
    let claimed = upgraded.claim_work(request()).await.expect("claim work");
    let sessions: Vec<&str> = claimed.heads().map(|(s, _)| s).collect();
    assert_eq!(sessions, vec!["leased"], "the lease ran out: {claimed:?}");
}

/// A schema at version 8 (no schedules, pauses or fork origins) holding a
/// lane with a queued index behind its head and a dead letter opens at the
/// current version: the queued index is claimable once the lane reaches
/// it, the dead letter is found by `redrive_all`, the sessions list no
/// fork, and pauses work.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_from_version_8_keeps_lanes_and_dead_letters() {
    use a2_store_api::{BulkRedrive, CompleteRequest, ListSessions, PauseRequest, RedriveAction};
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let open = || async {
        factory
            .store_on(&schema, Arc::new(clock.clone()), Arc::new(RandomIds))
            .await
            .expect("connect")
    };
    let store = open().await;
    let lane = |n: i64| NewEvent::new("e", json!(n)).with_target(Target::lane("agent", "main"));
    store
        .append("lanes", vec![lane(1), lane(2)], AppendOptions::default())
        .await
        .expect("append to the lane");
    let dead = NewEvent::new("e", json!({})).with_target(Target::event("agent"));
    store
        .append("dead", vec![dead], AppendOptions::default())
        .await
        .expect("append");
    let claim = |session: &str| ClaimRequest {
        session_id: session.into(),
        holder: "w".into(),
        ttl_ms: Some(1_000),
        ..ClaimRequest::default()
    };
    support::dead_letter_one(&store, claim("dead")).await;
    drop(store);
    let client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; {UNDO_15} {UNDO_14} {UNDO_12} {UNDO_10} {UNDO_9} UPDATE schema_version SET version = 8"
        ))
        .await
        .expect("downgrade to version 8");
    let upgraded = open().await;
    let head = upgraded
        .claim_available(claim("lanes"))
        .await
        .expect("claim")
        .into_heads()
        .remove(0);
    assert_eq!(head.event.index, 1);
    upgraded
        .complete_attempt(CompleteRequest {
            incarnation: None,
            session_id: "lanes".into(),
            consumer: head.consumer.clone(),
            lane: head.lane.clone(),
            index: 1,
            attempt: head.dispatch.attempt_count,
            events: Vec::new(),
            consumers: None,
        })
        .await
        .expect("complete");
    let next = upgraded
        .claim_available(claim("lanes"))
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(next.len(), 1, "the queued index is claimable at once");
    assert_eq!(next[0].event.index, 2);
    let done = upgraded
        .redrive_all(BulkRedrive::new(RedriveAction::Retry))
        .await
        .expect("redrive all");
    assert_eq!(done.redriven.len(), 1, "{done:?}");
    assert_eq!(done.redriven[0].session_id, "dead");
    let sessions = upgraded
        .sessions(ListSessions::default())
        .await
        .expect("sessions");
    assert!(
        sessions.iter().all(|s| s.forked_from.is_none()),
        "{sessions:?}"
    );
    upgraded
        .pause(PauseRequest {
            consumer: "agent".into(),
            session_id: Some("dead".into()),
            until_ms: None,
        })
        .await
        .expect("pause");
    assert_eq!(
        upgraded
            .claim_available(claim("dead"))
            .await
            .expect("claim"),
        ClaimResult::Settled,
        "the paused consumer's redriven head is held"
    );
}

/// A schema at version 11 (live-head counts kept by triggers) opens at the
/// current version without them: the counts' table and function are gone,
/// and `has_pending` (now read from the work rows) still tells a session
/// with a live head from one whose only head is dead-lettered.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_from_version_11_drops_the_counts_and_keeps_pending() {
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let store = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("connect");
    let targeted = || NewEvent::new("e", json!({})).with_target(Target::event("agent"));
    for session in ["live", "dead"] {
        store
            .append(session, vec![targeted()], AppendOptions::default())
            .await
            .expect("append a targeted event");
    }
    let claim = ClaimRequest {
        session_id: "dead".into(),
        holder: "w".into(),
        ttl_ms: Some(60_000),
        ..ClaimRequest::default()
    };
    support::dead_letter_one(&store, claim).await;
    drop(store);
    let client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; {UNDO_15} {UNDO_14} {UNDO_12} UPDATE schema_version SET version = 11"
        ))
        .await
        .expect("downgrade to version 11");
    let upgraded = PostgresStore::connect(factory.url(), options(&schema))
        .await
        .expect("reconnect migrates");
    let gone = client
        .query_one(
            "SELECT to_regclass(format('%I.pending_counts', $1::text)) IS NULL \
               AND to_regproc(format('%I.count_pending', $1::text)) IS NULL",
            &[&schema],
        )
        .await
        .expect("look up the counts")
        .get::<_, bool>(0);
    assert!(
        gone,
        "migration 12 drops the counts and their trigger function"
    );
    let untargeted = || NewEvent::new("note", json!({}));
    let live = upgraded
        .append("live", vec![untargeted()], AppendOptions::default())
        .await
        .expect("append");
    assert!(live.has_pending, "the live head stored before the upgrade");
    let dead = upgraded
        .append("dead", vec![untargeted()], AppendOptions::default())
        .await
        .expect("append");
    assert!(!dead.has_pending, "a dead letter is not pending");
}

/// A schema at version 14 (no incarnations, no last activity) opens at the
/// current version with its data: every session, a presence-only one
/// included, gets an incarnation of its own that its heads and listing
/// carry, and its last activity (its head event's time), so prune finds
/// the idle ones and a session holding only presence can be deleted.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_from_version_14_assigns_incarnations_and_activity() {
    use a2_store_api::{
        DeleteSessionRequest, DeleteSessionResult, ListSessions, PresenceMeta, PruneRequest,
    };
    let Some(factory) = PgFactory::from_env("schema") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let open = || async {
        factory
            .store_on(&schema, Arc::new(clock.clone()), Arc::new(RandomIds))
            .await
            .expect("connect")
    };
    let store = open().await;
    for session in ["a", "b"] {
        let event = NewEvent::new("e", json!({})).with_target(Target::event("agent"));
        store
            .append(session, vec![event], AppendOptions::default())
            .await
            .expect("append");
        clock.advance(1_000);
    }
    store
        .set_presence(
            "p",
            "alice",
            [("typing".to_owned(), json!(true))].into_iter().collect(),
            PresenceMeta {
                at: 1,
                seen: None,
                ttl_ms: 3_600_000,
            },
        )
        .await
        .expect("presence");
    drop(store);
    let client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; {UNDO_15} DELETE FROM sessions WHERE head = 0; \
             UPDATE schema_version SET version = 14"
        ))
        .await
        .expect("downgrade to version 14");
    let upgraded = open().await;
    let listed = upgraded
        .sessions(ListSessions::default())
        .await
        .expect("sessions");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|info| info.incarnation > 0), "{listed:?}");
    assert_ne!(listed[0].incarnation, listed[1].incarnation);
    let read = upgraded
        .read("a", ReadOptions::default())
        .await
        .expect("read");
    assert_eq!(read.len(), 1, "the rows are kept");
    let claim = ClaimRequest::new("a", "w", Duration::from_secs(60));
    let heads = upgraded
        .claim_available(claim)
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].incarnation, listed[0].incarnation);
    let activity: Vec<(String, Option<i64>)> = client
        .query(
            &format!(
                "SELECT session_id, last_activity FROM \"{schema}\".sessions ORDER BY session_id"
            ),
            &[],
        )
        .await
        .expect("activity")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        activity,
        vec![
            ("a".to_owned(), Some(1_000_000)),
            ("b".to_owned(), Some(1_001_000)),
            ("p".to_owned(), Some(1)),
        ]
    );
    // The presence-only `p` goes; `a` (leased) stays; `b`'s head is
    // claimable: a delete needs force.
    clock.advance(10_000);
    let pruned = upgraded
        .prune(PruneRequest::idle_for(Duration::from_millis(5_000)).with_limit(2))
        .await
        .expect("prune");
    assert_eq!(
        (pruned.sessions, pruned.examined),
        (vec!["p".to_owned()], 2)
    );
    let deleted = upgraded
        .delete_session(DeleteSessionRequest::new("b").forced())
        .await
        .expect("delete");
    assert!(
        matches!(deleted, DeleteSessionResult::Deleted { .. }),
        "{deleted:?}"
    );
}
