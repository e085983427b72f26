//! Each operation's main path and each error code, against the memory store.

use std::collections::BTreeMap;
use std::sync::Arc;

use a2_store_api::{
    AppendOptions, Cause, ClaimRequest, ClaimResult, ClearRequest, ClearResult, CompleteRequest,
    CompleteResult, ConsumerDeclaration, CounterIds, CursorKind, CursorRef, ErrorCode, FailOutcome,
    FailRequest, Head, HeldClaim, ListSessions, ManualClock, NewEvent, PresenceMeta, ReadOptions,
    ReadStateOptions, RedriveAction, RedriveRequest, RenewRequest, StateWrite, Store, StoreError,
    Target, CLEAR_EVENT_TYPE,
};
use a2_store_memory::{MemoryOptions, MemoryStore};
use futures::StreamExt;
use serde_json::{json, Value};

const T: i64 = 5_000;

fn store() -> (MemoryStore, ManualClock) {
    let clock = ManualClock::new(T);
    let store = MemoryStore::with_options(MemoryOptions {
        clock: Arc::new(clock.clone()),
        ids: Arc::new(CounterIds::new("g")),
    });
    (store, clock)
}

fn msg(n: i64) -> NewEvent {
    NewEvent::new("msg", json!(n))
}

fn claim_req(session: &str) -> ClaimRequest {
    ClaimRequest {
        session_id: session.into(),
        holder: "w".into(),
        ttl_ms: Some(100),
        ..ClaimRequest::default()
    }
}

async fn claim(store: &MemoryStore, request: ClaimRequest) -> Vec<Head> {
    match store.claim_available(request).await.unwrap() {
        ClaimResult::Claimed { heads, .. } => heads,
        other => panic!("expected Claimed, got {other:?}"),
    }
}

fn complete_req(head: &Head, events: Vec<NewEvent>) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: head.event.session_id.clone(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events,
        consumers: None,
    }
}

fn fail_req(head: &Head, max_failures: Option<u32>, retry: Option<i64>) -> FailRequest {
    FailRequest {
        incarnation: None,
        session_id: head.event.session_id.clone(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        error: "boom".into(),
        max_failures,
        retry_after_ms: retry,
    }
}

fn code<T: std::fmt::Debug>(result: Result<T, StoreError>) -> ErrorCode {
    result.expect_err("expected an error").code()
}

async fn append(store: &MemoryStore, session: &str, events: Vec<NewEvent>) -> Vec<u64> {
    store
        .append(session, events, AppendOptions::default())
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.index)
        .collect()
}

#[tokio::test]
async fn invalid_input_is_rejected_and_changes_nothing() {
    let (store, _) = store();
    let none = AppendOptions::default();
    assert_eq!(
        code(store.append("", vec![msg(1)], none.clone()).await),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(store.read("", ReadOptions::default()).await),
        ErrorCode::InvalidInput
    );
    let bad_batches = [
        NewEvent::new("", json!(1)),
        NewEvent::new(CLEAR_EVENT_TYPE, json!(null)),
        msg(1).with_id(""),
        msg(1).with_target(Target::lane("c", "")),
        msg(1).with_target(Target::event("")),
    ];
    for event in bad_batches {
        assert_eq!(
            code(store.append("s", vec![event], none.clone()).await),
            ErrorCode::InvalidInput
        );
    }
    let no_lane = AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("c", "", None, false)]),
        origin_index: None,
    };
    assert_eq!(
        code(store.append("s", vec![msg(1)], no_lane).await),
        ErrorCode::InvalidInput
    );
    for (ttl, expiry) in [
        (None, None),
        (Some(1), Some(1)),
        (Some(0), None),
        (Some(-5), None),
    ] {
        let request = ClaimRequest {
            ttl_ms: ttl,
            expires_at_ms: expiry,
            ..claim_req("s")
        };
        assert_eq!(
            code(store.claim_available(request).await),
            ErrorCode::InvalidInput
        );
    }
    let no_holder = ClaimRequest {
        holder: String::new(),
        ..claim_req("s")
    };
    assert_eq!(
        code(store.claim_available(no_holder).await),
        ErrorCode::InvalidInput
    );
    let zero_limit = ClaimRequest {
        limit: Some(0),
        ..claim_req("s")
    };
    assert_eq!(
        code(store.claim_available(zero_limit).await),
        ErrorCode::InvalidInput
    );
    let backwards = ReadOptions {
        after: Some(3),
        through: Some(2),
        limit: None,
    };
    assert_eq!(
        code(store.read("s", backwards).await),
        ErrorCode::InvalidInput
    );
    let meta = PresenceMeta {
        at: 1,
        seen: None,
        ttl_ms: 0,
    };
    assert_eq!(
        code(store.set_presence("s", "p", BTreeMap::new(), meta).await),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(
            store
                .wake_log("s", &ConsumerDeclaration::targeted("c"))
                .await
        ),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(store.write_state("s", "", vec![]).await),
        ErrorCode::InvalidInput
    );
    assert!(store
        .read("s", ReadOptions::default())
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .sessions(ListSessions::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn negative_retry_delay_is_invalid() {
    let (store, _) = store();
    append(&store, "s", vec![msg(1).with_target(Target::event("c"))]).await;
    let head = claim(&store, claim_req("s")).await.remove(0);
    assert_eq!(
        code(store.fail_attempt(fail_req(&head, None, Some(-1))).await),
        ErrorCode::InvalidInput
    );
    assert_eq!(store.dead_letters("s").await.unwrap(), vec![]);
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors[0].dispatch.failure_count, 0);
}

#[tokio::test]
async fn lane_conflicts_are_invalid_input() {
    let (store, _) = store();
    let log = AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("c", "L", None, false)]),
        origin_index: None,
    };
    // Same call: a target on the lane the call declares as a log lane.
    let clash = msg(1).with_target(Target::lane("c", "L"));
    assert_eq!(
        code(store.append("s", vec![clash.clone()], log.clone()).await),
        ErrorCode::InvalidInput
    );
    // A stored log cursor, then a target on its lane.
    store.append("s", vec![msg(1)], log.clone()).await.unwrap();
    assert_eq!(
        code(
            store
                .append("s", vec![clash], AppendOptions::default())
                .await
        ),
        ErrorCode::InvalidInput
    );
    // A stored lane cursor, then a log declaration on its lane.
    append(
        &store,
        "s",
        vec![msg(2).with_target(Target::lane("d", "M"))],
    )
    .await;
    let declare = AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("d", "M", None, false)]),
        origin_index: None,
    };
    assert_eq!(
        code(store.append("s", vec![msg(3)], declare).await),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(
            store
                .wake_log("s", &ConsumerDeclaration::log("d", "M", None, true))
                .await
        ),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn duplicates_replays_and_conflicts() {
    let (store, _) = store();
    let none = AppendOptions::default();
    let twice = vec![msg(1).with_id("a"), msg(2).with_id("a")];
    assert_eq!(
        code(store.append("s", twice, none.clone()).await),
        ErrorCode::PartialDuplicateBatch
    );
    let batch = vec![msg(1).with_id("a"), msg(2).with_id("b")];
    let first = store
        .append("s", batch.clone(), none.clone())
        .await
        .unwrap();
    let replay = store.append("s", batch, none.clone()).await.unwrap();
    assert_eq!(first.events, replay.events);
    let swapped = vec![msg(2).with_id("b"), msg(1).with_id("a")];
    let replay = store.append("s", swapped, none.clone()).await.unwrap();
    assert_eq!(replay.events[0].index, 2, "replay keeps the batch's order");
    let mixed = vec![msg(1).with_id("a"), msg(3).with_id("c")];
    assert_eq!(
        code(store.append("s", mixed, none.clone()).await),
        ErrorCode::PartialDuplicateBatch
    );
    let changed = vec![msg(9).with_id("a")];
    assert_eq!(
        code(store.append("s", changed, none.clone()).await),
        ErrorCode::IdempotencyConflict
    );
    // Ids are per session.
    append(&store, "other", vec![msg(1).with_id("a")]).await;
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn fencing_cleared_sessions_and_missing_events() {
    let (store, _) = store();
    append(&store, "s", vec![msg(1).with_target(Target::event("c"))]).await;
    let head = claim(&store, claim_req("s")).await.remove(0);
    let cause = head.cause();
    let fenced = msg(2).with_cause(cause.clone());
    store
        .append("s", vec![fenced], AppendOptions::default())
        .await
        .unwrap();
    let stale = Cause {
        attempt: 2,
        ..cause.clone()
    };
    assert_eq!(
        code(
            store
                .append(
                    "s",
                    vec![msg(3).with_cause(stale)],
                    AppendOptions::default()
                )
                .await
        ),
        ErrorCode::SupersededAttempt
    );
    let missing = CompleteRequest {
        index: 99,
        ..complete_req(&head, vec![])
    };
    assert_eq!(
        code(store.complete_attempt(missing).await),
        ErrorCode::NoSuchEvent
    );
    let missing = FailRequest {
        index: 99,
        ..fail_req(&head, None, None)
    };
    assert_eq!(
        code(store.fail_attempt(missing).await),
        ErrorCode::NoSuchEvent
    );
    let cleared = store
        .clear(ClearRequest {
            session_id: "s".into(),
            ..ClearRequest::default()
        })
        .await
        .unwrap();
    let ClearResult::Cleared { marker } = cleared else {
        panic!("expected Cleared");
    };
    assert_eq!(marker.index, 3);
    assert_eq!(marker.event_type, CLEAR_EVENT_TYPE);
    let late = AppendOptions {
        consumers: None,
        origin_index: Some(1),
    };
    assert_eq!(
        code(store.append("s", vec![msg(4)], late).await),
        ErrorCode::SessionCleared
    );
    assert_eq!(
        code(
            store
                .append(
                    "s",
                    vec![msg(4).with_cause(cause.clone())],
                    AppendOptions::default()
                )
                .await
        ),
        ErrorCode::SupersededAttempt
    );
    assert_eq!(
        store
            .complete_attempt(complete_req(&head, vec![]))
            .await
            .unwrap(),
        CompleteResult::Superseded
    );
    assert_eq!(
        store
            .fail_attempt(fail_req(&head, None, None))
            .await
            .unwrap()
            .outcome,
        FailOutcome::Superseded
    );
    assert!(store.cursors("s").await.unwrap().is_empty());
    let fenced_clear = ClearRequest {
        incarnation: None,
        session_id: "s".into(),
        if_last_index: None,
        cause: Some(cause),
    };
    assert_eq!(
        code(store.clear(fenced_clear).await),
        ErrorCode::SupersededAttempt
    );
    let conditional = ClearRequest {
        incarnation: None,
        session_id: "s".into(),
        if_last_index: Some(1),
        cause: None,
    };
    assert_eq!(
        store.clear(conditional).await.unwrap(),
        ClearResult::NotCleared { head: 3 }
    );
}

#[tokio::test]
async fn fail_retry_dead_letter_and_redrive() {
    let (store, clock) = store();
    append(
        &store,
        "s",
        vec![msg(1).with_target(Target::lane("c", "L"))],
    )
    .await;
    append(
        &store,
        "s",
        vec![msg(2).with_target(Target::lane("c", "L"))],
    )
    .await;
    let head = claim(&store, claim_req("s")).await.remove(0);
    let failed = store
        .fail_attempt(fail_req(&head, Some(2), Some(50)))
        .await
        .unwrap();
    assert_eq!(
        (failed.outcome, failed.failure_count),
        (FailOutcome::Failed, 1)
    );
    let repeat = store
        .fail_attempt(fail_req(&head, Some(2), Some(50)))
        .await
        .unwrap();
    assert_eq!(repeat, failed, "repeating a failure is idempotent");
    assert_eq!(
        store.claim_available(claim_req("s")).await.unwrap(),
        ClaimResult::Busy { retry_at: T + 50 }
    );
    clock.advance(50);
    let head = claim(&store, claim_req("s")).await.remove(0);
    assert_eq!(
        (head.dispatch.attempt_count, head.dispatch.failure_count),
        (2, 1)
    );
    let dead = store
        .fail_attempt(fail_req(&head, Some(2), Some(50)))
        .await
        .unwrap();
    assert_eq!(
        (dead.outcome, dead.failure_count),
        (FailOutcome::DeadLettered, 2)
    );
    let letters = store.dead_letters("s").await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].dispatch.failed_at, Some(T + 50));
    assert_eq!(letters[0].dispatch.claim_expires_at, None);
    assert_eq!(
        store.claim_available(claim_req("s")).await.unwrap(),
        ClaimResult::Settled,
        "a dead-lettered lane head blocks its lane"
    );
    let redrive = |action| RedriveRequest {
        incarnation: None,
        lane: None,
        session_id: "s".into(),
        consumer: "c".into(),
        index: 1,
        action,
        consumers: None,
    };
    let retried = store.redrive(redrive(RedriveAction::Retry)).await.unwrap();
    assert!(retried.redriven && retried.has_pending);
    let head = claim(&store, claim_req("s")).await.remove(0);
    assert_eq!(
        (
            head.event.index,
            head.dispatch.attempt_count,
            head.dispatch.failure_count
        ),
        (1, 3, 0)
    );
    store
        .fail_attempt(fail_req(&head, Some(1), None))
        .await
        .unwrap();
    let skipped = store.redrive(redrive(RedriveAction::Skip)).await.unwrap();
    assert!(skipped.redriven);
    let again = store.redrive(redrive(RedriveAction::Skip)).await.unwrap();
    assert!(!again.redriven);
    let head = claim(&store, claim_req("s")).await.remove(0);
    assert_eq!(head.event.index, 2, "skip moved the lane on");
}

#[tokio::test]
async fn renew_extends_held_claims_and_reports_superseded() {
    let (store, clock) = store();
    append(&store, "s", vec![msg(1).with_target(Target::event("c"))]).await;
    let head = claim(&store, claim_req("s")).await.remove(0);
    let held = HeldClaim {
        cursor: head.cursor_ref(),
        attempt: 1,
    };
    let renew = |holder: &str| RenewRequest {
        incarnation: None,
        session_id: "s".into(),
        holder: holder.into(),
        claims: vec![held.clone()],
        ttl_ms: Some(500),
        expires_at_ms: None,
    };
    let other = store.renew_claims(renew("other")).await.unwrap();
    assert!(other.renewed.is_empty() && other.superseded.is_empty());
    let renewed = store.renew_claims(renew("w")).await.unwrap();
    assert_eq!(renewed.renewed, vec![head.cursor_ref()]);
    clock.advance(400);
    assert!(matches!(
        store.claim_available(claim_req("s")).await.unwrap(),
        ClaimResult::Busy { retry_at } if retry_at == T + 500
    ));
    store
        .complete_attempt(complete_req(&head, vec![]))
        .await
        .unwrap();
    let after = store.renew_claims(renew("w")).await.unwrap();
    assert_eq!(after.superseded, vec![head.cursor_ref()]);
    let unknown = RenewRequest {
        claims: vec![HeldClaim {
            cursor: CursorRef::new("nobody", None, 1),
            attempt: 1,
        }],
        ..renew("w")
    };
    let unknown = store.renew_claims(unknown).await.unwrap();
    assert!(unknown.renewed.is_empty() && unknown.superseded.is_empty());
}

#[tokio::test]
async fn log_cursors_follow_the_log_by_type() {
    let (store, _) = store();
    append(&store, "s", vec![msg(1), NewEvent::new("other", json!(2))]).await;
    let declare = |backfill| AppendOptions {
        consumers: Some(vec![
            ConsumerDeclaration::log("fresh", "log", Some(vec!["msg".into()]), false),
            ConsumerDeclaration::log("back", "log", Some(vec!["msg".into()]), backfill),
        ]),
        origin_index: None,
    };
    let batch = vec![NewEvent::new("other", json!(3)), msg(4)];
    store.append("s", batch, declare(true)).await.unwrap();
    let cursors = store.cursors("s").await.unwrap();
    let summary: Vec<(&str, u64, Option<u64>, CursorKind)> = cursors
        .iter()
        .map(|c| (c.consumer.as_str(), c.position, c.head, c.kind))
        .collect();
    assert_eq!(
        summary,
        [
            ("back", 0, Some(1), CursorKind::Log),
            ("fresh", 2, Some(4), CursorKind::Log)
        ]
    );
    let heads = claim(&store, claim_req("s")).await;
    let back = heads.iter().find(|h| h.consumer == "back").unwrap();
    store
        .complete_attempt(complete_req(back, vec![]))
        .await
        .unwrap();
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors[0].head, Some(4), "skips types it does not take");
    // A clear parks log cursors at the marker; the marker is never taken.
    store
        .clear(ClearRequest {
            session_id: "s".into(),
            ..ClearRequest::default()
        })
        .await
        .unwrap();
    let cursors = store.cursors("s").await.unwrap();
    assert!(cursors.iter().all(|c| c.position == 5 && c.head.is_none()));
    let woken = store
        .wake_log("s", &ConsumerDeclaration::log("back", "log", None, true))
        .await
        .unwrap();
    assert_eq!((woken.cursor.head, woken.head), (None, 5));
    store
        .append("s", vec![msg(6)], declare(true))
        .await
        .unwrap();
    let cursors = store.cursors("s").await.unwrap();
    assert!(cursors.iter().all(|c| c.head == Some(6)));
}

#[tokio::test]
async fn wake_log_on_an_empty_session_returns_an_idle_cursor() {
    let (store, _) = store();
    let consumer = ConsumerDeclaration::log("c", "log", None, true);
    let idle = store.wake_log("s", &consumer).await.unwrap();
    assert_eq!(
        (idle.cursor.position, idle.cursor.head, idle.head),
        (0, None, 0)
    );
    assert!(store.cursors("s").await.unwrap().is_empty());
    append(&store, "s", vec![msg(1), msg(2)]).await;
    let woken = store.wake_log("s", &consumer).await.unwrap();
    assert_eq!((woken.cursor.position, woken.cursor.head), (0, Some(1)));
    let fresh = ConsumerDeclaration::log("d", "log", None, false);
    let woken = store.wake_log("s", &fresh).await.unwrap();
    assert_eq!((woken.cursor.position, woken.cursor.head), (2, None));
}

#[tokio::test]
async fn clear_reclaims_in_batches_and_ids_become_reusable() {
    let (store, _) = store();
    let events: Vec<NewEvent> = (0..600).map(|n| msg(n).with_id(format!("e{n}"))).collect();
    store
        .append("s", events, AppendOptions::default())
        .await
        .unwrap();
    assert_eq!(store.reclaim("s").await.unwrap().reclaimed, 0);
    store
        .clear(ClearRequest {
            session_id: "s".into(),
            ..ClearRequest::default()
        })
        .await
        .unwrap();
    let reused = store
        .append("s", vec![msg(0).with_id("e0")], AppendOptions::default())
        .await
        .unwrap();
    assert_eq!(reused.events[0].index, 602);
    let mut results = Vec::new();
    for _ in 0..4 {
        let r = store.reclaim("s").await.unwrap();
        results.push((r.reclaimed, r.done));
    }
    assert_eq!(results, [(256, false), (256, false), (88, true), (0, true)]);
    let rows = store.read("s", ReadOptions::default()).await.unwrap();
    let indexes: Vec<u64> = rows.iter().map(|r| r.index).collect();
    assert_eq!(indexes, [601, 602]);
    let sessions = store.sessions(ListSessions::default()).await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(
        (
            sessions[0].head,
            sessions[0].clear_index,
            sessions[0].reclaimed_through
        ),
        (602, 601, 600)
    );
}

#[tokio::test]
async fn snapshots_keep_pinned_checkpoints_until_the_pin_moves() {
    let (store, _) = store();
    append(
        &store,
        "s",
        vec![msg(1).with_target(Target::lane("c", "L"))],
    )
    .await;
    append(
        &store,
        "s",
        vec![msg(2).with_target(Target::lane("c", "L"))],
    )
    .await;
    let pin = CursorRef::new("c", Some("L"), 1);
    let write = |index, state: Value, pins: Vec<CursorRef>| StateWrite { index, state, pins };
    store
        .write_state("s", "r", vec![write(1, json!("one"), vec![pin])])
        .await
        .unwrap();
    store
        .write_state("s", "r", vec![write(2, json!("two"), vec![])])
        .await
        .unwrap();
    let at = |at| ReadStateOptions { at: Some(at) };
    let read = store.read_state("s", "r", at(1)).await.unwrap();
    assert_eq!(read.snapshot.map(|s| s.state), Some(json!("one")));
    let latest = store
        .read_state("s", "r", ReadStateOptions::default())
        .await
        .unwrap();
    assert_eq!(latest.snapshot.map(|s| s.index), Some(2));
    let head = claim(&store, claim_req("s")).await.remove(0);
    store
        .complete_attempt(complete_req(&head, vec![]))
        .await
        .unwrap();
    let read = store.read_state("s", "r", at(1)).await.unwrap();
    assert_eq!(read.snapshot, None, "the pin moved: the checkpoint is gone");
    store
        .clear(ClearRequest {
            session_id: "s".into(),
            ..ClearRequest::default()
        })
        .await
        .unwrap();
    let cleared = store
        .read_state("s", "r", ReadStateOptions::default())
        .await
        .unwrap();
    assert_eq!((cleared.snapshot, cleared.clear_index), (None, 3));
}

#[tokio::test]
async fn presence_is_last_writer_wins_with_tombstones() {
    let (store, clock) = store();
    let meta = |at, ttl_ms| PresenceMeta {
        at,
        seen: Some(7),
        ttl_ms,
    };
    let fields = |pairs: &[(&str, Value)]| -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let set = store
        .set_presence(
            "s",
            "p",
            fields(&[("a", json!(1)), ("b", json!(2))]),
            meta(10, 100),
        )
        .await
        .unwrap();
    assert_eq!(set.applied_count, 2);
    let older = store
        .set_presence("s", "p", fields(&[("a", json!(0))]), meta(9, 100))
        .await
        .unwrap();
    assert_eq!(older.applied_count, 0);
    store
        .set_presence("s", "p", fields(&[("b", Value::Null)]), meta(11, 100))
        .await
        .unwrap();
    let resurrect = store
        .set_presence("s", "p", fields(&[("b", json!(3))]), meta(10, 100))
        .await
        .unwrap();
    assert_eq!(
        resurrect.applied_count, 0,
        "the tombstone blocks older writes"
    );
    let rows = store.read_presence("s").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].field.as_str(),
            &rows[0].value,
            rows[0].seen,
            rows[0].expires_at
        ),
        ("a", &json!(1), Some(7), T + 100)
    );
    clock.advance(100);
    assert!(store.read_presence("s").await.unwrap().is_empty());
    let after_expiry = store
        .set_presence("s", "p", fields(&[("a", json!(5))]), meta(1, 100))
        .await
        .unwrap();
    assert_eq!(after_expiry.applied_count, 1, "expired entries never block");
}

#[tokio::test]
async fn subscribe_streams_backlog_then_live_without_gap_or_duplicate() {
    let (store, _) = store();
    append(&store, "s", vec![msg(1), msg(2), msg(3)]).await;
    let mut stream = store.subscribe("s", 1).await.unwrap();
    let writer = store.clone();
    let task = tokio::spawn(async move {
        for n in 4..=50 {
            append(&writer, "s", vec![msg(n)]).await;
        }
        writer
            .clear(ClearRequest {
                session_id: "s".into(),
                ..ClearRequest::default()
            })
            .await
            .unwrap();
    });
    let mut seen = Vec::new();
    while seen.len() < 50 {
        let event = stream.next().await.unwrap().unwrap();
        seen.push(event.index);
    }
    task.await.unwrap();
    assert_eq!(seen, (2..=51).collect::<Vec<u64>>());
    drop(store);
    assert!(
        stream.next().await.is_none(),
        "the stream ends with the store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_never_share_a_head() {
    let (store, _) = store();
    let events: Vec<NewEvent> = (0..400)
        .map(|n| msg(n).with_target(Target::event("c")))
        .collect();
    store
        .append("s", events, AppendOptions::default())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let request = ClaimRequest {
                    holder: format!("w{worker}"),
                    limit: Some(3),
                    ..claim_req("s")
                };
                match store.claim_available(request).await.unwrap() {
                    ClaimResult::Claimed { heads, .. } => {
                        for head in heads {
                            store
                                .complete_attempt(complete_req(&head, vec![]))
                                .await
                                .unwrap();
                            mine.push(head.event.index);
                        }
                    }
                    _ => return mine,
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (1..=400).collect::<Vec<u64>>());
}

#[tokio::test]
async fn sessions_are_listed_by_id_with_paging() {
    let (store, _) = store();
    for id in ["b", "a", "c"] {
        append(&store, id, vec![msg(1)]).await;
    }
    store.read_presence("empty").await.unwrap();
    let page = store
        .sessions(ListSessions {
            after: Some("a".into()),
            limit: Some(1),
        })
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["b"]);
    let all = store.sessions(ListSessions::default()).await.unwrap();
    assert_eq!(all.len(), 3);
}

#[tokio::test]
async fn dead_lettering_a_pinned_head_releases_its_checkpoint() {
    let (store, clock) = store();
    append(&store, "s", vec![msg(1).with_target(Target::event("c"))]).await;
    append(&store, "s", vec![msg(2)]).await;
    let pin = CursorRef::new("c", None, 1);
    let write = StateWrite {
        index: 1,
        state: json!("one"),
        pins: vec![pin],
    };
    store.write_state("s", "r", vec![write]).await.unwrap();
    let newer = StateWrite {
        index: 2,
        state: json!("two"),
        pins: vec![],
    };
    store.write_state("s", "r", vec![newer]).await.unwrap();
    let at_one = ReadStateOptions { at: Some(1) };
    let read = store.read_state("s", "r", at_one).await.unwrap();
    assert_eq!(read.snapshot.map(|s| s.index), Some(1));
    claim(&store, claim_req("s")).await;
    clock.advance(100);
    let expired = ClaimRequest {
        max_failures: Some(1),
        ..claim_req("s")
    };
    let ClaimResult::Claimed {
        heads,
        dead_lettered,
        ..
    } = store.claim_available(expired).await.unwrap()
    else {
        panic!("expected the expired claim to be dead-lettered");
    };
    assert!(heads.is_empty());
    assert_eq!(dead_lettered.len(), 1);
    assert_eq!(
        (
            dead_lettered[0].dispatch.attempt_count,
            dead_lettered[0].dispatch.failure_count,
            dead_lettered[0].dispatch.failed_at,
            dead_lettered[0].dispatch.last_failed_at,
        ),
        (2, 1, Some(T + 100), None)
    );
    let read = store.read_state("s", "r", at_one).await.unwrap();
    assert_eq!(read.snapshot, None);
}
