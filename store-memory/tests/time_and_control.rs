//! Scheduled heads, reschedule, pauses, lane-exact and bulk redrive, and
//! forks (issue 19), against the memory store on a manual clock.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, BulkRedrive, Cause, ClaimRequest, ClaimResult, ClaimWorkRequest,
    ClaimWorkResult, ClearRequest, CompleteRequest, ConsumerDeclaration, CounterIds, ErrorCode,
    FailRequest, ForkRequest, Head, ListSessions, ListWork, ManualClock, NewEvent, NotBefore,
    PauseRequest, ReadOptions, RedriveAction, RedriveRequest, RescheduleRequest, RescheduleResult,
    ResumeRequest, ScheduleChange, Store, Target,
};
use a2_store_memory::{MemoryOptions, MemoryStore};
use futures::StreamExt;
use serde_json::json;

const T: i64 = 10_000;

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
    ClaimRequest::new(session, "w", Duration::from_millis(100))
}

async fn claim(store: &MemoryStore, session: &str) -> ClaimResult {
    store.claim_available(claim_req(session)).await.unwrap()
}

async fn heads(store: &MemoryStore, session: &str) -> Vec<Head> {
    match claim(store, session).await {
        ClaimResult::Claimed { heads, .. } => heads,
        other => panic!("expected Claimed, got {other:?}"),
    }
}

async fn append(store: &MemoryStore, session: &str, events: Vec<NewEvent>) -> bool {
    store
        .append(session, events, AppendOptions::default())
        .await
        .unwrap()
        .has_pending
}

fn complete(head: &Head) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: head.event.session_id.clone(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events: Vec::new(),
        consumers: None,
    }
}

async fn dead_letter(store: &MemoryStore, head: &Head) {
    let mut fail = FailRequest::for_head(head, "boom", 1);
    fail.max_failures = Some(1);
    store.fail_attempt(fail).await.unwrap();
}

fn work(consumer: &str) -> ClaimWorkRequest {
    ClaimWorkRequest::for_consumers(
        "w",
        vec![ConsumerDeclaration::targeted(consumer)],
        Duration::from_millis(100),
    )
}

#[tokio::test]
async fn a_scheduled_head_is_busy_until_its_time_then_claimed_without_a_failure() {
    let (store, clock) = store();
    let event = msg(1).with_target(Target::event("c").not_before_ms(T + 50));
    assert!(
        append(&store, "s", vec![event]).await,
        "a scheduled head is pending"
    );
    assert_eq!(
        claim(&store, "s").await,
        ClaimResult::Busy { retry_at: T + 50 }
    );
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors[0].dispatch.claim_expires_at, Some(T + 50));
    assert_eq!(cursors[0].dispatch.attempt_count, 0);
    let listed = store.list_work(ListWork::new(["c"])).await.unwrap();
    assert_eq!((listed[0].busy, listed[0].next_expiry), (1, Some(T + 50)));
    assert_eq!(
        store.claim_work(work("c")).await.unwrap(),
        ClaimWorkResult::Busy { retry_at: T + 50 }
    );
    clock.set(T + 50);
    let claimed = heads(&store, "s").await;
    assert_eq!(claimed[0].dispatch.attempt_count, 1);
    assert_eq!(claimed[0].dispatch.failure_count, 0);
}

#[tokio::test]
async fn a_time_already_reached_is_no_schedule() {
    let (store, _clock) = store();
    let event = msg(1).with_target(Target::lane("c", "L").not_before_ms(T));
    append(&store, "s", vec![event]).await;
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors[0].dispatch.claim_expires_at, None);
    let delayed = msg(2).with_target(Target::event("c").delayed(Duration::from_millis(30)));
    append(&store, "s", vec![delayed]).await;
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors[1].dispatch.claim_expires_at, Some(T + 30));
}

#[tokio::test]
async fn repeated_targets_take_the_latest_time_and_lanes_keep_fifo() {
    let (store, clock) = store();
    let first = msg(1)
        .with_target(Target::lane("c", "L").not_before_ms(T + 10))
        .with_target(Target::lane("c", "L").not_before_ms(T + 40))
        .with_target(Target::lane("c", "L"));
    let second = msg(2).with_target(Target::lane("c", "L"));
    let third = msg(3).with_target(Target::lane("c", "L").not_before_ms(T + 20));
    append(&store, "s", vec![first, second, third]).await;
    assert_eq!(
        claim(&store, "s").await,
        ClaimResult::Busy { retry_at: T + 40 }
    );
    clock.set(T + 40);
    let head = heads(&store, "s").await.remove(0);
    assert_eq!(head.event.index, 1);
    store.complete_attempt(complete(&head)).await.unwrap();
    let head = heads(&store, "s").await.remove(0);
    assert_eq!(head.event.index, 2, "the unscheduled event follows at once");
    store.complete_attempt(complete(&head)).await.unwrap();
    // Index 3's time passed while it waited: Dispatch::scheduled keeps it,
    // and it is claimable at once.
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors[0].head, Some(3));
    assert_eq!(cursors[0].dispatch.claim_expires_at, Some(T + 20));
    assert_eq!(heads(&store, "s").await[0].event.index, 3);
}

#[tokio::test]
async fn a_lane_reaching_a_scheduled_index_waits_for_it_and_the_work_row_follows() {
    let (store, clock) = store();
    let events = vec![
        msg(1).with_target(Target::lane("c", "L")),
        msg(2).with_target(Target::lane("c", "L").not_before_ms(T + 500)),
    ];
    append(&store, "s", events).await;
    let head = heads(&store, "s").await.remove(0);
    clock.set(T + 5);
    store.complete_attempt(complete(&head)).await.unwrap();
    assert_eq!(
        claim(&store, "s").await,
        ClaimResult::Busy { retry_at: T + 500 }
    );
    assert_eq!(
        store.claim_work(work("c")).await.unwrap(),
        ClaimWorkResult::Busy { retry_at: T + 500 }
    );
}

#[tokio::test]
async fn a_waiting_work_claim_wakes_at_the_scheduled_time() {
    let (store, clock) = store();
    let event = msg(1).with_target(Target::event("c").not_before_ms(T + 1_000));
    append(&store, "s", vec![event]).await;
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_work(work("c").with_wait_ms(60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    clock.set(T + 1_000);
    let result = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(result, ClaimWorkResult::Claimed { .. }),
        "{result:?}"
    );
}

fn reschedule(lane: Option<&str>, index: u64, change: ScheduleChange) -> RescheduleRequest {
    RescheduleRequest::new("s", "c", lane, index, change)
}

#[tokio::test]
async fn reschedule_moves_and_cancels_heads_and_queued_entries() {
    let (store, _clock) = store();
    let events = (1..=4)
        .map(|n| msg(n).with_target(Target::lane("c", "L").not_before_ms(T + 100 * n)))
        .collect();
    append(&store, "s", events).await;
    let to = |at| ScheduleChange::To(NotBefore::AtMs(at));
    // Queued: move index 3, cancel index 2.
    assert_eq!(
        store
            .reschedule(reschedule(Some("L"), 3, to(T + 5)))
            .await
            .unwrap(),
        RescheduleResult::Rescheduled {
            not_before: Some(T + 5)
        }
    );
    assert_eq!(
        store
            .reschedule(reschedule(Some("L"), 2, ScheduleChange::Cancel))
            .await
            .unwrap(),
        RescheduleResult::Cancelled
    );
    assert_eq!(
        store
            .reschedule(reschedule(Some("L"), 2, ScheduleChange::Cancel))
            .await
            .unwrap(),
        RescheduleResult::Gone
    );
    // The head: cancelled, the lane moves to 3 with its moved time.
    assert_eq!(
        store
            .reschedule(reschedule(Some("L"), 1, ScheduleChange::Cancel))
            .await
            .unwrap(),
        RescheduleResult::Cancelled
    );
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(
        (cursors[0].head, cursors[0].dispatch.claim_expires_at),
        (Some(3), Some(T + 5))
    );
    assert_eq!(
        claim(&store, "s").await,
        ClaimResult::Busy { retry_at: T + 5 }
    );
    // Brought forward to now: claimable.
    assert_eq!(
        store
            .reschedule(reschedule(Some("L"), 3, to(0)))
            .await
            .unwrap(),
        RescheduleResult::Rescheduled { not_before: None }
    );
    let head = heads(&store, "s").await.remove(0);
    assert_eq!(head.event.index, 3);
    assert_eq!(
        store
            .reschedule(reschedule(Some("L"), 3, to(0)))
            .await
            .unwrap(),
        RescheduleResult::Started
    );
    assert_eq!(
        store
            .reschedule(reschedule(None, 99, ScheduleChange::Cancel))
            .await
            .unwrap_err()
            .code(),
        ErrorCode::NoSuchEvent
    );
    assert_eq!(
        store
            .reschedule(reschedule(None, 4, ScheduleChange::Cancel))
            .await
            .unwrap(),
        RescheduleResult::Gone
    );
}

#[tokio::test]
async fn reschedule_is_fenced_and_refuses_log_cursors() {
    let (store, _clock) = store();
    let options = AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("c", "log", None, false)]),
        ..AppendOptions::default()
    };
    store
        .append("s", vec![msg(1).with_target(Target::event("c"))], options)
        .await
        .unwrap();
    let log = reschedule(Some("log"), 1, ScheduleChange::Cancel);
    assert_eq!(
        store.reschedule(log).await.unwrap_err().code(),
        ErrorCode::InvalidInput
    );
    let cause = Cause {
        consumer: "c".into(),
        lane: None,
        index: 1,
        attempt: 7,
    };
    let fenced = reschedule(None, 1, ScheduleChange::Cancel).with_cause(cause);
    assert_eq!(
        store.reschedule(fenced).await.unwrap_err().code(),
        ErrorCode::SupersededAttempt
    );
    assert_eq!(
        store.cursors("s").await.unwrap().len(),
        2,
        "nothing changed"
    );
}

#[tokio::test]
async fn pauses_hold_claims_and_pending_until_resumed_or_ended() {
    let (store, clock) = store();
    append(
        &store,
        "s",
        vec![msg(1).with_target(Target::lane("c", "L"))],
    )
    .await;
    append(
        &store,
        "t",
        vec![msg(1).with_target(Target::lane("c", "L"))],
    )
    .await;
    assert_eq!(
        store
            .pause(PauseRequest::in_session("x", "s"))
            .await
            .unwrap_err()
            .code(),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        store
            .pause(PauseRequest::everywhere("c").with_until_ms(T))
            .await
            .unwrap_err()
            .code(),
        ErrorCode::InvalidInput
    );
    let paused = store
        .pause(PauseRequest::in_session("c", "s"))
        .await
        .unwrap();
    assert_eq!((paused.paused_at, paused.until_ms), (T, None));
    assert_eq!(claim(&store, "s").await, ClaimResult::Settled);
    assert!(
        !append(&store, "s", Vec::new()).await,
        "a held head is not pending"
    );
    assert_eq!(store.cursors("s").await.unwrap()[0].pause, Some(paused));
    // claim_work skips the held pair and serves the other session.
    match store.claim_work(work("c")).await.unwrap() {
        ClaimWorkResult::Claimed { sessions } => assert_eq!(sessions[0].session_id, "t"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.claim_work(work("c")).await.unwrap(),
        ClaimWorkResult::Busy { retry_at: T + 100 }
    );
    // A timed store-wide pause keeps s busy until its end.
    store
        .pause(PauseRequest::everywhere("c").with_until_ms(T + 300))
        .await
        .unwrap();
    assert!(
        store
            .resume(ResumeRequest::in_session("c", "s"))
            .await
            .unwrap()
            .resumed
    );
    assert_eq!(
        claim(&store, "s").await,
        ClaimResult::Busy { retry_at: T + 300 }
    );
    assert_eq!(
        store.claim_work(work("c")).await.unwrap(),
        ClaimWorkResult::Busy { retry_at: T + 300 }
    );
    let listed = store.pauses(Some("s")).await.unwrap();
    assert_eq!(listed.len(), 1);
    clock.set(T + 300);
    assert!(
        store.pauses(None).await.unwrap().is_empty(),
        "ended pauses are not listed"
    );
    assert!(
        !store
            .resume(ResumeRequest::everywhere("c"))
            .await
            .unwrap()
            .resumed
    );
    assert_eq!(heads(&store, "s").await.len(), 1);
}

#[tokio::test]
async fn pauses_are_listed_by_consumer_store_wide_first() {
    let (store, _clock) = store();
    append(&store, "a", vec![msg(1).with_target(Target::event("c"))]).await;
    append(&store, "b", vec![msg(1).with_target(Target::event("c"))]).await;
    store
        .pause(PauseRequest::in_session("c", "b"))
        .await
        .unwrap();
    store
        .pause(PauseRequest::in_session("c", "a"))
        .await
        .unwrap();
    store.pause(PauseRequest::everywhere("c")).await.unwrap();
    store
        .pause(PauseRequest::everywhere("a-first"))
        .await
        .unwrap();
    let all: Vec<(String, Option<String>)> = store
        .pauses(None)
        .await
        .unwrap()
        .into_iter()
        .map(|pause| (pause.consumer, pause.session_id))
        .collect();
    let expected = [
        ("a-first", None),
        ("c", None),
        ("c", Some("a")),
        ("c", Some("b")),
    ];
    let expected: Vec<(String, Option<String>)> = expected
        .iter()
        .map(|(c, s)| (c.to_string(), s.map(str::to_owned)))
        .collect();
    assert_eq!(all, expected);
    assert_eq!(store.pauses(Some("a")).await.unwrap().len(), 3);
}

#[tokio::test]
async fn resume_wakes_a_waiting_work_claim() {
    let (store, _clock) = store();
    append(&store, "s", vec![msg(1).with_target(Target::event("c"))]).await;
    store.pause(PauseRequest::everywhere("c")).await.unwrap();
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_work(work("c").with_wait_ms(60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.resume(ResumeRequest::everywhere("c")).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(result, ClaimWorkResult::Claimed { .. }),
        "{result:?}"
    );
}

#[tokio::test]
async fn redrive_takes_exactly_the_named_lane_and_bulk_redrive_pages() {
    let (store, clock) = store();
    for session in ["s1", "s2", "s3"] {
        let event = msg(1)
            .with_target(Target::lane("c", "A"))
            .with_target(Target::lane("c", "B"));
        append(&store, session, vec![event]).await;
        for head in heads(&store, session).await {
            dead_letter(&store, &head).await;
        }
        clock.advance(10);
    }
    let lane_b = RedriveRequest::new("s1", "c", 1, RedriveAction::Retry).on_lane("B");
    assert!(store.redrive(lane_b).await.unwrap().redriven);
    let dead = store.dead_letters("s1").await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].lane.as_deref(), Some("A"));

    let mut bulk = BulkRedrive::new(RedriveAction::Skip);
    bulk.limit = Some(2);
    let page = store.redrive_all(bulk.clone()).await.unwrap();
    let taken: Vec<(&str, Option<&str>)> = page
        .redriven
        .iter()
        .map(|head| (head.session_id.as_str(), head.cursor.lane.as_deref()))
        .collect();
    assert_eq!(taken, [("s1", Some("A")), ("s2", Some("A"))]);
    assert!(page.more);
    assert_eq!(page.redriven[0].failed_at, T);
    bulk.dead_since_ms = Some(T + 20);
    bulk.limit = None;
    let page = store.redrive_all(bulk).await.unwrap();
    assert_eq!(page.redriven.len(), 2);
    assert!(!page.more);
    assert!(page.redriven.iter().all(|head| head.session_id == "s3"));
    let left = store
        .redrive_all(BulkRedrive::new(RedriveAction::Retry))
        .await
        .unwrap();
    assert_eq!(left.redriven.len(), 1, "s2's lane B");
    assert!(store.dead_letters("s2").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_fork_copies_the_log_and_continues_on_its_own() {
    let (store, _clock) = store();
    let mut live = store.subscribe("b", 0).await.unwrap();
    let events = (1..=3)
        .map(|n| msg(n).with_target(Target::event("c")))
        .collect();
    append(&store, "a", events).await;
    let fork = store
        .fork(ForkRequest::new("a", "b").through(2))
        .await
        .unwrap();
    assert_eq!((fork.copied, fork.session.head), (2, 2));
    let source = store.read("a", ReadOptions::default()).await.unwrap();
    let copied = store.read("b", ReadOptions::default()).await.unwrap();
    assert_eq!(copied.len(), 2);
    for (a, b) in source.iter().zip(&copied) {
        assert_eq!(
            (&a.id, &a.event_type, &a.payload, a.created_at, a.index),
            (&b.id, &b.event_type, &b.payload, b.created_at, b.index)
        );
    }
    assert_eq!(live.next().await.unwrap().unwrap().index, 1);
    assert!(store.cursors("b").await.unwrap().is_empty());
    let listed = store.sessions(ListSessions::default()).await.unwrap();
    assert_eq!(listed[1].forked_from, fork.session.forked_from);
    assert_eq!(listed[1], fork.session);
    let stored = store
        .append("b", vec![msg(9)], AppendOptions::default())
        .await
        .unwrap();
    assert_eq!(stored.events[0].index, 3);
    // Bad forks change nothing.
    for bad in [
        ForkRequest::new("a", "a"),
        ForkRequest::new("a", "b"),
        ForkRequest::new("nobody", "z"),
        ForkRequest::new("a", "z").through(4),
    ] {
        assert_eq!(
            store.fork(bad).await.unwrap_err().code(),
            ErrorCode::InvalidInput
        );
    }
    assert_eq!(
        store.sessions(ListSessions::default()).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn a_fork_of_a_cleared_session_starts_at_its_marker() {
    let (store, _clock) = store();
    append(&store, "a", vec![msg(1), msg(2)]).await;
    store.clear(ClearRequest::new("a")).await.unwrap();
    append(&store, "a", vec![msg(3)]).await;
    let fork = store.fork(ForkRequest::new("a", "b")).await.unwrap();
    assert_eq!(fork.copied, 2);
    assert_eq!(
        (fork.session.clear_index, fork.session.reclaimed_through),
        (3, 2)
    );
    let copied = store.read("b", ReadOptions::default()).await.unwrap();
    assert_eq!(copied.iter().map(|e| e.index).collect::<Vec<_>>(), [3, 4]);
    // Copied ids are taken in the fork too: appending one again replays it.
    let replay =
        NewEvent::new(copied[1].event_type.clone(), json!(3)).with_id(copied[1].id.clone());
    let replayed = store
        .append("b", vec![replay], AppendOptions::default())
        .await
        .unwrap();
    assert_eq!(replayed.events[0].index, 4);
}
