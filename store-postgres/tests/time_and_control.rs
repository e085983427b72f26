//! Scheduled heads, pauses, lane-exact and bulk redrive and forks on
//! PostgreSQL (when `A2_POSTGRES_URL` is set): the backend's own checks
//! beside the shared conformance cases, including what only SQL can get
//! wrong (a scheduled queued index, pauses read by the work queries, a
//! fork's rows seen by a subscriber).

mod support;

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, BulkRedrive, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult,
    CompleteRequest, ConsumerDeclaration, FailRequest, ForkRequest, Head, ListSessions,
    ManualClock, NewEvent, NotBefore, PauseRequest, RandomIds, RedriveAction, RedriveRequest,
    RescheduleRequest, RescheduleResult, ResumeRequest, ScheduleChange, Store, Target,
};
use a2_store_postgres::PostgresStore;
use futures::StreamExt;
use serde_json::json;
use support::PgFactory;

const T0: i64 = 1_000_000;

async fn store(factory: &PgFactory, clock: &ManualClock) -> PostgresStore {
    let schema = factory.schema();
    factory
        .store_on(&schema, Arc::new(clock.clone()), Arc::new(RandomIds))
        .await
        .expect("connect")
}

fn claim(session: &str) -> ClaimRequest {
    ClaimRequest::new(session, "w", Duration::from_secs(1))
}

fn event(target: Target) -> NewEvent {
    NewEvent::new("e", json!({})).with_target(target)
}

async fn complete(store: &PostgresStore, head: &Head) {
    store
        .complete_attempt(CompleteRequest::for_head(head, Vec::new()))
        .await
        .expect("complete");
}

/// A scheduled event head is busy until its time (pending, `Busy` with
/// the time), then claimable; a time already reached is no schedule.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_heads_wait_for_their_time() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    let appended = store
        .append(
            "s",
            vec![
                event(Target::event("a").not_before_ms(T0 + 500)),
                event(Target::event("b").not_before_ms(T0 - 1)),
            ],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    assert!(appended.has_pending);
    let first = store.claim_available(claim("s")).await.expect("claim");
    let heads: Vec<&str> = first.heads().iter().map(|h| h.consumer.as_str()).collect();
    assert_eq!(heads, vec!["b"], "the past time runs at once: {first:?}");
    assert_eq!(
        store.claim_available(claim("s")).await.expect("claim"),
        ClaimResult::Busy { retry_at: T0 + 500 }
    );
    clock.advance(500);
    let later = store.claim_available(claim("s")).await.expect("claim");
    assert_eq!(later.heads().len(), 1, "{later:?}");
    assert_eq!(later.heads()[0].consumer, "a");
}

/// A scheduled index queued on a lane keeps its time until the lane
/// reaches it, and holds the lane: the index behind it waits.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_schedule_applies_when_the_lane_reaches_it() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    let lane = || Target::lane("a", "main");
    store
        .append(
            "s",
            vec![
                event(lane()),
                event(lane().not_before_ms(T0 + 1_000)),
                event(lane()),
            ],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let head = store
        .claim_available(claim("s"))
        .await
        .expect("claim")
        .into_heads()
        .remove(0);
    assert_eq!(head.event.index, 1);
    complete(&store, &head).await;
    assert_eq!(
        store.claim_available(claim("s")).await.expect("claim"),
        ClaimResult::Busy {
            retry_at: T0 + 1_000
        }
    );
    let cursors = store.cursors("s").await.expect("cursors");
    assert_eq!(cursors[0].head, Some(2));
    assert_eq!(cursors[0].dispatch.claim_expires_at, Some(T0 + 1_000));
    clock.advance(1_000);
    let head = store
        .claim_available(claim("s"))
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(head.len(), 1);
    assert_eq!(head[0].event.index, 2);
}

/// Reschedule moves a head and a queued index, cancels them (the lane
/// moves on to its next queued index with that index's time), and leaves
/// a started head alone.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reschedule_moves_and_cancels() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    let lane = || Target::lane("a", "main");
    store
        .append(
            "s",
            vec![
                event(lane().not_before_ms(T0 + 100)),
                event(lane()),
                event(lane()),
            ],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let request = |index, change| RescheduleRequest::new("s", "a", Some("main"), index, change);
    let later = ScheduleChange::To(NotBefore::AtMs(T0 + 900));
    assert_eq!(
        store.reschedule(request(1, later)).await.expect("move"),
        RescheduleResult::Rescheduled {
            not_before: Some(T0 + 900)
        }
    );
    assert_eq!(
        store
            .reschedule(request(2, later))
            .await
            .expect("move queued"),
        RescheduleResult::Rescheduled {
            not_before: Some(T0 + 900)
        }
    );
    assert_eq!(
        store
            .reschedule(request(3, ScheduleChange::Cancel))
            .await
            .expect("cancel queued"),
        RescheduleResult::Cancelled
    );
    assert_eq!(
        store.claim_available(claim("s")).await.expect("claim"),
        ClaimResult::Busy { retry_at: T0 + 900 }
    );
    assert_eq!(
        store
            .reschedule(request(1, ScheduleChange::Cancel))
            .await
            .expect("cancel head"),
        RescheduleResult::Cancelled
    );
    let cursors = store.cursors("s").await.expect("cursors");
    assert_eq!(cursors[0].head, Some(2), "the lane moved on");
    assert_eq!(cursors[0].dispatch.claim_expires_at, Some(T0 + 900));
    assert_eq!(
        store
            .reschedule(request(1, ScheduleChange::Cancel))
            .await
            .expect("gone"),
        RescheduleResult::Gone
    );
    clock.advance(900);
    let head = store
        .claim_available(claim("s"))
        .await
        .expect("claim")
        .into_heads()
        .remove(0);
    assert_eq!(head.event.index, 2);
    assert_eq!(
        store
            .reschedule(request(2, ScheduleChange::Cancel))
            .await
            .expect("started"),
        RescheduleResult::Started
    );
    complete(&store, &head).await;
    assert_eq!(
        store.claim_available(claim("s")).await.expect("claim"),
        ClaimResult::Settled,
        "index 3 was cancelled"
    );
}

/// A session pause hides the consumer's heads (not pending, `Settled`),
/// a timed store-wide pause keeps them busy until its end, `cursors()` and
/// `pauses()` report them, and resuming one scope leaves the other.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pauses_hold_heads_until_resumed_or_ended() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    assert!(store
        .pause(PauseRequest::in_session("a", "s"))
        .await
        .is_err());
    store
        .append(
            "s",
            vec![event(Target::event("a"))],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    store
        .pause(PauseRequest::in_session("a", "s"))
        .await
        .expect("pause");
    store
        .pause(PauseRequest::everywhere("a").with_until_ms(T0 + 300))
        .await
        .expect("pause everywhere");
    let pending = store
        .append("s", Vec::new(), AppendOptions::default())
        .await
        .expect("empty append");
    assert!(!pending.has_pending, "a held head is not pending");
    assert_eq!(
        store.claim_available(claim("s")).await.expect("claim"),
        ClaimResult::Settled
    );
    let cursors = store.cursors("s").await.expect("cursors");
    let pause = cursors[0].pause.as_ref().expect("a pause");
    assert_eq!(
        (pause.session_id.as_deref(), pause.until_ms),
        (Some("s"), None)
    );
    let pauses = store.pauses(Some("s")).await.expect("pauses");
    let scopes: Vec<Option<&str>> = pauses.iter().map(|p| p.session_id.as_deref()).collect();
    assert_eq!(scopes, vec![None, Some("s")]);
    let resumed = store
        .resume(ResumeRequest::in_session("a", "s"))
        .await
        .expect("resume");
    assert!(resumed.resumed);
    assert_eq!(
        store.claim_available(claim("s")).await.expect("claim"),
        ClaimResult::Busy { retry_at: T0 + 300 },
        "the store-wide pause still holds until its end"
    );
    let work = ClaimWorkRequest::for_consumers(
        "w",
        vec![ConsumerDeclaration::targeted("a")],
        Duration::from_secs(1),
    );
    assert_eq!(
        store.claim_work(work.clone()).await.expect("claim work"),
        ClaimWorkResult::Busy { retry_at: T0 + 300 }
    );
    clock.advance(300);
    assert!(store.pauses(None).await.expect("pauses").is_empty());
    let claimed = store.claim_work(work).await.expect("claim work");
    assert_eq!(claimed.into_heads().len(), 1, "the pause ended by itself");
}

/// A waiting cross-session claim wakes when a pause is lifted.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_wakes_a_waiting_work_claim() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    store
        .append(
            "s",
            vec![event(Target::event("a"))],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    store
        .pause(PauseRequest::everywhere("a"))
        .await
        .expect("pause");
    let work = ClaimWorkRequest::for_consumers(
        "w",
        vec![ConsumerDeclaration::targeted("a")],
        Duration::from_secs(1),
    )
    .with_wait(Duration::from_secs(20));
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.claim_work(work).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    store
        .resume(ResumeRequest::everywhere("a"))
        .await
        .expect("resume");
    let claimed = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken before the wait ends")
        .expect("joined")
        .expect("claim work");
    assert_eq!(claimed.into_heads().len(), 1);
}

/// A lane-exact redrive takes that lane's dead letter; `redrive_all` pages
/// by `(session, index, consumer, lane)` and says when more are left.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrives_name_lanes_and_page() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    for session in ["s1", "s2"] {
        let targets = [
            Target::event("a"),
            Target::lane("a", "x"),
            Target::lane("a", "y"),
        ];
        let mut e = NewEvent::new("e", json!({}));
        e.targets = targets.to_vec();
        store
            .append(session, vec![e], AppendOptions::default())
            .await
            .expect("append");
        for head in store
            .claim_available(claim(session))
            .await
            .expect("claim")
            .into_heads()
        {
            store
                .fail_attempt(FailRequest::for_head(&head, "down", 1))
                .await
                .expect("dead-letter");
        }
    }
    let exact = RedriveRequest::new("s1", "a", 1, RedriveAction::Retry).on_lane("y");
    assert!(store.redrive(exact).await.expect("redrive").redriven);
    let dead = store.dead_letters("s1").await.expect("dead letters");
    let lanes: Vec<Option<&str>> = dead.iter().map(|h| h.lane.as_deref()).collect();
    assert_eq!(lanes, vec![None, Some("x")], "exactly lane y was redriven");
    let mut bulk = BulkRedrive::new(RedriveAction::Skip);
    bulk.limit = Some(3);
    let page = store.redrive_all(bulk.clone()).await.expect("redrive all");
    let taken: Vec<(&str, Option<&str>)> = page
        .redriven
        .iter()
        .map(|h| (h.session_id.as_str(), h.cursor.lane.as_deref()))
        .collect();
    assert_eq!(taken, vec![("s1", None), ("s1", Some("x")), ("s2", None)]);
    assert!(page.more);
    assert!(page.redriven.iter().all(|h| h.failed_at == T0));
    let rest = store.redrive_all(bulk).await.expect("redrive all");
    assert_eq!(rest.redriven.len(), 2);
    assert!(!rest.more);
    assert!(store.dead_letters("s2").await.expect("dead").is_empty());
}

/// A fork copies the rows through an index, is listed with its origin,
/// is seen by a subscriber registered before it, and continues its log.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_copies_rows_and_continues() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    let turns = (1..=3).map(|n| NewEvent::new("turn", json!(n))).collect();
    let source = store
        .append("a", turns, AppendOptions::default())
        .await
        .expect("append");
    let mut stream = store.subscribe("b", 0).await.expect("subscribe");
    let fork = store
        .fork(ForkRequest::new("a", "b").through(2))
        .await
        .expect("fork");
    assert_eq!((fork.session.head, fork.copied), (2, 2));
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("delivered")
        .expect("open")
        .expect("row");
    assert_eq!((first.index, &first.id), (1, &source.events[0].id));
    let sessions = store
        .sessions(ListSessions::default())
        .await
        .expect("sessions");
    let listed = sessions.iter().find(|s| s.session_id == "b").expect("b");
    let origin = listed.forked_from.as_ref().expect("forked");
    assert_eq!((origin.session_id.as_str(), origin.index), ("a", 2));
    let next = store
        .append(
            "b",
            vec![NewEvent::new("turn", json!(9))],
            AppendOptions::default(),
        )
        .await
        .expect("append to the fork");
    assert_eq!(next.events[0].index, 3);
    assert!(store.fork(ForkRequest::new("a", "b")).await.is_err());
    assert!(store.cursors("b").await.expect("cursors").is_empty());
}

/// A cross-session claim over listed sessions passes a session where the
/// consumer is paused and answers `Busy` at a timed pause's end; an
/// open-ended pause leaves it `Settled`.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_work_claims_apply_session_pauses() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    for session in ["s1", "s2"] {
        store
            .append(
                session,
                vec![event(Target::event("a"))],
                AppendOptions::default(),
            )
            .await
            .expect("append");
    }
    store
        .pause(PauseRequest::in_session("a", "s1").with_until_ms(T0 + 700))
        .await
        .expect("pause s1");
    store
        .pause(PauseRequest::in_session("a", "s2"))
        .await
        .expect("pause s2");
    let work = |sessions: &[&str]| {
        let mut request = ClaimWorkRequest::for_consumers(
            "w",
            vec![ConsumerDeclaration::targeted("a")],
            Duration::from_secs(1),
        );
        request.sessions = Some(sessions.iter().map(|s| (*s).to_owned()).collect());
        request
    };
    assert_eq!(
        store.claim_work(work(&["s1", "s2"])).await.expect("claim"),
        ClaimWorkResult::Busy { retry_at: T0 + 700 }
    );
    assert_eq!(
        store.claim_work(work(&["s2"])).await.expect("claim"),
        ClaimWorkResult::Settled
    );
    clock.advance(700);
    let claimed = store.claim_work(work(&["s1", "s2"])).await.expect("claim");
    let sessions: Vec<String> = claimed
        .into_heads()
        .into_iter()
        .map(|h| h.event.session_id)
        .collect();
    assert_eq!(sessions, vec!["s1".to_owned()]);
}

/// Two bulk redrives racing over the same dead letters redrive each once:
/// the second finds them again under the sessions' locks, already gone.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_bulk_redrives_take_each_dead_letter_once() {
    let Some(factory) = PgFactory::from_env("time_and_control") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = store(&factory, &clock).await;
    for n in 0..6 {
        let session = format!("s{n}");
        store
            .append(
                &session,
                vec![event(Target::event("a"))],
                AppendOptions::default(),
            )
            .await
            .expect("append");
        support::dead_letter_one(&store, claim(&session)).await;
    }
    let bulk = BulkRedrive::new(RedriveAction::Retry);
    let other = store.clone();
    let (one, two) = tokio::join!(
        store.redrive_all(bulk.clone()),
        other.redrive_all(bulk.clone())
    );
    let total = one.expect("first").redriven.len() + two.expect("second").redriven.len();
    assert_eq!(total, 6, "each dead letter redriven exactly once");
}
