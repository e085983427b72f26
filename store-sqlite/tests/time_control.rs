//! Scheduled heads, rescheduling, pauses, lane-exact and bulk redrive and
//! forks on SQLite, on a manual clock: focused checks beside the
//! conformance suite, including what only this backend's index plumbing
//! can get wrong (work rows of scheduled lane heads, paused pairs in the
//! cross-session claim, dead letters across sessions).

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    BulkRedrive, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult, CompleteRequest,
    ConsumerDeclaration, ErrorCode, FailRequest, ForkRequest, ListSessions, ListWork, ManualClock,
    NewEvent, NotBefore, PauseRequest, ReadOptions, RedriveAction, RedriveRequest,
    RescheduleRequest, RescheduleResult, ResumeRequest, ScheduleChange, Store, Target,
};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use futures::StreamExt;
use serde_json::json;

const T0: i64 = 1_000_000;
const LEASE: Duration = Duration::from_secs(30);

fn store() -> (SqliteStore, ManualClock) {
    let clock = ManualClock::new(T0);
    let options = SqliteOptions {
        clock: Arc::new(clock.clone()),
        ..SqliteOptions::default()
    };
    (SqliteStore::open_in_memory(options).unwrap(), clock)
}

fn msg(target: Target) -> NewEvent {
    NewEvent::new("msg", json!("hi")).with_target(target)
}

fn claim(session: &str) -> ClaimRequest {
    ClaimRequest::new(session, "w", LEASE)
}

fn work() -> ClaimWorkRequest {
    ClaimWorkRequest::new("w", vec![ConsumerDeclaration::targeted("agent")], 30_000)
}

fn indexes(result: &ClaimResult) -> Vec<u64> {
    result.heads().iter().map(|head| head.event.index).collect()
}

#[tokio::test]
async fn a_scheduled_head_is_busy_until_its_time_in_both_claims() {
    let (store, clock) = store();
    let appended = store
        .append(
            "s",
            vec![msg(Target::event("agent").not_before_ms(T0 + 100))],
            Default::default(),
        )
        .await
        .unwrap();
    assert!(appended.has_pending, "a scheduled head is pending");
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors[0].dispatch.claim_expires_at, Some(T0 + 100));
    assert_eq!(
        store.claim_available(claim("s")).await.unwrap(),
        ClaimResult::Busy { retry_at: T0 + 100 }
    );
    assert_eq!(
        store.claim_work(work()).await.unwrap(),
        ClaimWorkResult::Busy { retry_at: T0 + 100 }
    );
    let listed = store
        .list_work(ListWork {
            consumers: vec!["agent".into()],
            ..ListWork::default()
        })
        .await
        .unwrap();
    assert_eq!((listed[0].busy, listed[0].claimable), (1, 0));
    clock.set(T0 + 100);
    let claimed = store.claim_work(work()).await.unwrap();
    assert_eq!(claimed.heads().count(), 1);
}

#[tokio::test]
async fn a_past_time_is_no_schedule_and_repeated_targets_take_the_latest() {
    let (store, _clock) = store();
    let event = NewEvent::new("msg", json!(1))
        .with_target(Target::event("agent").not_before_ms(T0 - 5))
        .with_target(Target::lane("agent", "L").not_before_ms(T0 + 50))
        .with_target(Target::lane("agent", "L").not_before_ms(T0 + 80))
        .with_target(Target::lane("agent", "L"));
    store
        .append("s", vec![event], Default::default())
        .await
        .unwrap();
    let cursors = store.cursors("s").await.unwrap();
    let lane = cursors.iter().find(|c| c.lane.is_some()).unwrap();
    let event = cursors.iter().find(|c| c.lane.is_none()).unwrap();
    assert_eq!(lane.dispatch.claim_expires_at, Some(T0 + 80));
    assert_eq!(event.dispatch.claim_expires_at, None);
    assert_eq!(
        indexes(&store.claim_available(claim("s")).await.unwrap()),
        [1]
    );
}

#[tokio::test]
async fn a_lane_keeps_its_order_and_applies_queued_times_when_it_reaches_them() {
    let (store, clock) = store();
    let events = vec![
        msg(Target::lane("agent", "L").not_before_ms(T0 + 100)),
        msg(Target::lane("agent", "L")),
        msg(Target::lane("agent", "L").not_before_ms(T0 + 300)),
    ];
    store.append("s", events, Default::default()).await.unwrap();
    assert_eq!(
        store.claim_available(claim("s")).await.unwrap(),
        ClaimResult::Busy { retry_at: T0 + 100 },
        "the scheduled head holds the lane"
    );
    clock.set(T0 + 100);
    for expected in [1, 2] {
        let head = store
            .claim_available(claim("s"))
            .await
            .unwrap()
            .into_heads()
            .remove(0);
        assert_eq!(head.event.index, expected);
        store
            .complete_attempt(CompleteRequest::for_head(&head, vec![]))
            .await
            .unwrap();
    }
    // The third waits for its own time, and the work index knows when.
    assert_eq!(
        store.claim_work(work()).await.unwrap(),
        ClaimWorkResult::Busy { retry_at: T0 + 300 }
    );
    clock.set(T0 + 300);
    assert_eq!(
        indexes(&store.claim_available(claim("s")).await.unwrap()),
        [3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_work_claim_wakes_at_the_scheduled_time() {
    let (store, clock) = store();
    store
        .append(
            "s",
            vec![msg(Target::event("agent").not_before_ms(T0 + 500))],
            Default::default(),
        )
        .await
        .unwrap();
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_work(work().with_wait_ms(60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished());
    clock.set(T0 + 500);
    let claimed = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(claimed.heads().count(), 1);
}

#[tokio::test]
async fn reschedule_moves_cancels_and_refuses_as_the_verdict_says() {
    let (store, clock) = store();
    let events = vec![
        msg(Target::lane("agent", "L").not_before_ms(T0 + 100)),
        msg(Target::lane("agent", "L").not_before_ms(T0 + 100)),
        msg(Target::lane("agent", "L")),
        msg(Target::event("agent").not_before_ms(T0 + 100)),
    ];
    store.append("s", events, Default::default()).await.unwrap();
    let at = |lane: Option<&str>, index, change| {
        RescheduleRequest::new("s", "agent", lane, index, change)
    };
    let soon = ScheduleChange::To(NotBefore::AtMs(T0 + 10));
    // A queued index moves, then its head is cancelled: the lane moves on.
    assert_eq!(
        store.reschedule(at(Some("L"), 2, soon)).await.unwrap(),
        RescheduleResult::Rescheduled {
            not_before: Some(T0 + 10)
        }
    );
    assert_eq!(
        store
            .reschedule(at(Some("L"), 1, ScheduleChange::Cancel))
            .await
            .unwrap(),
        RescheduleResult::Cancelled
    );
    let lane = store.cursors("s").await.unwrap().remove(0);
    assert_eq!(
        (lane.head, lane.dispatch.claim_expires_at),
        (Some(2), Some(T0 + 10))
    );
    assert_eq!(
        store
            .reschedule(at(Some("L"), 3, ScheduleChange::Cancel))
            .await
            .unwrap(),
        RescheduleResult::Cancelled,
        "a queued index leaves the queue"
    );
    assert_eq!(
        store
            .reschedule(at(Some("L"), 1, ScheduleChange::Cancel))
            .await
            .unwrap(),
        RescheduleResult::Gone
    );
    // The event head moves to now: claimable at once.
    let now = ScheduleChange::To(NotBefore::AtMs(0));
    assert_eq!(
        store.reschedule(at(None, 4, now)).await.unwrap(),
        RescheduleResult::Rescheduled { not_before: None }
    );
    assert_eq!(
        indexes(&store.claim_available(claim("s")).await.unwrap()),
        [4]
    );
    assert_eq!(
        store.reschedule(at(None, 4, now)).await.unwrap(),
        RescheduleResult::Started
    );
    clock.set(T0 + 10);
    let head = store
        .claim_available(claim("s"))
        .await
        .unwrap()
        .into_heads()
        .remove(0);
    assert_eq!(head.event.index, 2);
    store
        .complete_attempt(CompleteRequest::for_head(&head, vec![]))
        .await
        .unwrap();
    let lane = store.cursors("s").await.unwrap().remove(0);
    assert_eq!(lane.head, None, "3 was cancelled while queued");
    let missing = store.reschedule(at(None, 99, now)).await.unwrap_err();
    assert_eq!(missing.code(), ErrorCode::NoSuchEvent);
    assert_eq!(
        store.reschedule(at(None, 2, now)).await.unwrap(),
        RescheduleResult::Gone,
        "a row without that cursor"
    );
}

#[tokio::test]
async fn pauses_hold_heads_in_both_claims_and_resume_lifts_one_scope() {
    let (store, clock) = store();
    for session in ["a", "b"] {
        store
            .append(
                session,
                vec![msg(Target::event("agent"))],
                Default::default(),
            )
            .await
            .unwrap();
    }
    let unknown = store
        .pause(PauseRequest::in_session("nobody", "a"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::InvalidInput);
    let past = PauseRequest::everywhere("agent").with_until_ms(T0);
    assert_eq!(
        store.pause(past).await.unwrap_err().code(),
        ErrorCode::InvalidInput
    );
    store
        .pause(PauseRequest::in_session("agent", "a"))
        .await
        .unwrap();
    assert_eq!(
        store.claim_available(claim("a")).await.unwrap(),
        ClaimResult::Settled
    );
    let empty = store.append("a", vec![], Default::default()).await.unwrap();
    assert!(!empty.has_pending, "a held head is not pending");
    let served = store.claim_work(work().with_limit(5)).await.unwrap();
    let sessions: Vec<&str> = served.heads().map(|(session, _)| session).collect();
    assert_eq!(sessions, ["b"]);
    // A timed store-wide pause over the session's open-ended one.
    store
        .pause(PauseRequest::everywhere("agent").with_until_ms(T0 + 200))
        .await
        .unwrap();
    let cursors = store.cursors("a").await.unwrap();
    assert_eq!(cursors[0].pause.as_ref().map(|p| p.until_ms), Some(None));
    let listed = store.pauses(Some("a")).await.unwrap();
    let scopes: Vec<Option<&str>> = listed.iter().map(|p| p.session_id.as_deref()).collect();
    assert_eq!(scopes, [None, Some("a")]);
    assert!(
        store
            .resume(ResumeRequest::in_session("agent", "a"))
            .await
            .unwrap()
            .resumed
    );
    assert!(
        !store
            .resume(ResumeRequest::in_session("agent", "a"))
            .await
            .unwrap()
            .resumed
    );
    // Only the timed pause is left: heads are busy until it ends.
    let retry = ClaimResult::Busy { retry_at: T0 + 200 };
    assert_eq!(store.claim_available(claim("a")).await.unwrap(), retry);
    assert_eq!(
        store.claim_work(work()).await.unwrap(),
        ClaimWorkResult::Busy { retry_at: T0 + 200 }
    );
    clock.set(T0 + 200);
    assert!(store.pauses(None).await.unwrap().is_empty());
    assert_eq!(
        indexes(&store.claim_available(claim("a")).await.unwrap()),
        [1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_wakes_a_waiting_work_claim() {
    let (store, _clock) = store();
    store
        .append("s", vec![msg(Target::event("agent"))], Default::default())
        .await
        .unwrap();
    store
        .pause(PauseRequest::everywhere("agent"))
        .await
        .unwrap();
    assert_eq!(
        store.claim_work(work()).await.unwrap(),
        ClaimWorkResult::Settled
    );
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_work(work().with_wait_ms(60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished());
    store
        .resume(ResumeRequest::everywhere("agent"))
        .await
        .unwrap();
    let claimed = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(claimed.heads().count(), 1);
}

/// Appends one event for `agent` on its event cursor and lane `L` in
/// `session` and dead-letters both heads at `now`.
async fn two_dead_letters(store: &SqliteStore, session: &str) {
    let event = NewEvent::new("msg", json!(1))
        .with_target(Target::event("agent"))
        .with_target(Target::lane("agent", "L"));
    store
        .append(session, vec![event], Default::default())
        .await
        .unwrap();
    for head in store
        .claim_available(claim(session))
        .await
        .unwrap()
        .into_heads()
    {
        store
            .fail_attempt(FailRequest::for_head(&head, "boom", 1))
            .await
            .unwrap();
    }
    assert_eq!(store.dead_letters(session).await.unwrap().len(), 2);
}

#[tokio::test]
async fn redrive_takes_the_named_lane() {
    let (store, _clock) = store();
    two_dead_letters(&store, "s").await;
    let mut request = RedriveRequest::new("s", "agent", 1, RedriveAction::Skip);
    request.lane = Some("L".into());
    assert!(store.redrive(request).await.unwrap().redriven);
    let left = store.dead_letters("s").await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].lane, None, "the lane's head was taken");
}

#[tokio::test]
async fn redrive_all_filters_pages_and_redrives_atomically() {
    let (store, clock) = store();
    two_dead_letters(&store, "b").await;
    clock.set(T0 + 10);
    two_dead_letters(&store, "a").await;
    let mut bulk = BulkRedrive::new(RedriveAction::Retry);
    bulk.limit = Some(3);
    let done = store.redrive_all(bulk.clone()).await.unwrap();
    let taken: Vec<(&str, Option<&str>, i64)> = done
        .redriven
        .iter()
        .map(|h| (h.session_id.as_str(), h.cursor.lane.as_deref(), h.failed_at))
        .collect();
    assert_eq!(
        taken,
        [
            ("a", None, T0 + 10),
            ("a", Some("L"), T0 + 10),
            ("b", None, T0)
        ]
    );
    assert!(done.more);
    let done = store.redrive_all(bulk).await.unwrap();
    assert_eq!((done.redriven.len(), done.more), (1, false));
    assert!(store.dead_letters("a").await.unwrap().is_empty());
    // Filters: lane and time window.
    two_dead_letters(&store, "c").await;
    let mut lane = BulkRedrive::new(RedriveAction::Skip);
    lane.lane = Some("L".into());
    lane.dead_before_ms = Some(T0 + 10);
    assert!(store
        .redrive_all(lane.clone())
        .await
        .unwrap()
        .redriven
        .is_empty());
    lane.dead_before_ms = Some(T0 + 11);
    lane.dead_since_ms = Some(T0 + 10);
    let done = store.redrive_all(lane).await.unwrap();
    assert_eq!(done.redriven.len(), 1);
    assert_eq!(store.dead_letters("c").await.unwrap()[0].lane, None);
    let mut bad = BulkRedrive::new(RedriveAction::Skip);
    bad.limit = Some(0);
    assert_eq!(
        store.redrive_all(bad).await.unwrap_err().code(),
        ErrorCode::InvalidInput
    );
}

#[tokio::test]
async fn a_fork_copies_the_log_and_continues_on_its_own() {
    let (store, _clock) = store();
    let turns = (1..=4)
        .map(|n| NewEvent::new("turn", json!(n)).with_id(format!("id-{n}")))
        .collect();
    store
        .append("src", turns, Default::default())
        .await
        .unwrap();
    store
        .clear(a2_store_api::ClearRequest::new("src"))
        .await
        .unwrap();
    store
        .append(
            "src",
            vec![msg(Target::event("agent")).with_id("after")],
            Default::default(),
        )
        .await
        .unwrap();
    let mut live = store.subscribe("fork", 0).await.unwrap();
    let fork = store.fork(ForkRequest::new("src", "fork")).await.unwrap();
    assert_eq!(
        (fork.copied, fork.session.head, fork.session.clear_index),
        (2, 6, 5)
    );
    let first = tokio::time::timeout(Duration::from_secs(10), live.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.index, 5, "subscribers see the fork's rows");
    let source = store.read("src", ReadOptions::default()).await.unwrap();
    let copied = store.read("fork", ReadOptions::default()).await.unwrap();
    let key = |rows: &[a2_store_api::StoredEvent]| -> Vec<(u64, String, i64)> {
        rows.iter()
            .filter(|row| row.index >= 5)
            .map(|row| (row.index, row.id.clone(), row.created_at))
            .collect()
    };
    assert_eq!(key(&source), key(&copied));
    assert!(store.cursors("fork").await.unwrap().is_empty());
    let sessions = store.sessions(ListSessions::default()).await.unwrap();
    let listed = sessions.iter().find(|s| s.session_id == "fork").unwrap();
    assert_eq!(listed, &fork.session);
    // A replayed id is recognised; a new one continues at through + 1.
    let replay = store
        .append(
            "fork",
            vec![msg(Target::event("agent")).with_id("after")],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(replay.events[0].index, 6);
    let next = store
        .append(
            "fork",
            vec![msg(Target::event("agent"))],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(next.events[0].index, 7);
    let again = store
        .fork(ForkRequest::new("src", "fork"))
        .await
        .unwrap_err();
    assert_eq!(again.code(), ErrorCode::InvalidInput);
}
