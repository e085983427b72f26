//! Scheduled targets and `reschedule`: heads busy until their time, lanes
//! that wait behind them, and moving or cancelling a head before it runs.
//!
//! The cases serve consumers of their own ([`Cx::consumer`]) so the
//! cross-session claims they make never see another case's work.

use std::time::Duration;

use a2_store_api::{
    ClearRequest, Dispatch, ErrorCode, NewEvent, NotBefore, RescheduleRequest, RescheduleResult,
    ScheduleChange, Target,
};

use super::work::{spawn_wait, woken, work_busy, LONG_WAIT_MS};
use crate::support::*;

/// An event `id` targeted at `target`.
fn scheduled(id: &str, target: Target) -> NewEvent {
    msg(id).with_target(target)
}

/// `change` applied to `consumer`'s head or queued index at `index` on `lane`.
fn change(
    s: &str,
    consumer: &str,
    lane: Option<&str>,
    index: u64,
    change: ScheduleChange,
) -> RescheduleRequest {
    RescheduleRequest::new(s, consumer, lane, index, change)
}

fn to(at: NotBefore) -> ScheduleChange {
    ScheduleChange::To(at)
}

/// A scheduled head is busy until its time, exactly like a retry delay:
/// `claim_expires_at` is the time, no holder, attempt 0; claims answer
/// `Busy` with it (per session and across sessions), `has_pending` counts
/// it, and at the time it is claimed as a fresh head.
pub(crate) async fn scheduled_head_is_busy_until_its_time(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    let appended = cx
        .append(
            &s,
            vec![scheduled(
                "a",
                Target::event(&agent).delayed(Duration::from_millis(500)),
            )],
        )
        .await?;
    ensure!(appended.has_pending, "a scheduled head is pending");
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 500);
    ensure_eq!(
        only(&cx.cursors(&s).await?)?.dispatch,
        Dispatch::scheduled(Some(T0 + 500))
    );
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?,
        T0 + 500
    );
    let listed = cx.store.list_work(cx.list(&["agent"])).await?;
    ensure_eq!(
        listed
            .iter()
            .map(|work| (work.claimable, work.busy, work.next_expiry))
            .collect::<Vec<_>>(),
        vec![(0, 1, Some(T0 + 500))]
    );
    cx.append(
        &s,
        vec![scheduled(
            "b",
            Target::event(&agent).not_before_ms(T0 + 2_000),
        )],
    )
    .await?;
    cx.advance(499);
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 500);
    cx.advance(1);
    let heads = cx.claim_heads(&s, "w").await?;
    ensure_eq!(head_summaries(&heads), vec![format!("1 {agent}/- #1")]);
    ensure_eq!(
        heads[0].dispatch.failure_count,
        0,
        "a schedule is no failure"
    );
    ensure_eq!(
        busy(cx.claim(&s, "w").await?)?,
        T0 + 1_500,
        "the lease ends first"
    );
    cx.advance(TTL);
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w").await?),
        vec![format!("1 {agent}/- #2")]
    );
    ensure_eq!(
        busy(cx.claim(&s, "w").await?)?,
        T0 + 2_000,
        "the absolute time"
    );
    Ok(())
}

/// A waiting cross-session claim wakes when a scheduled head's time comes.
pub(crate) async fn scheduled_head_wakes_a_waiting_work_claim(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(
        &s,
        vec![scheduled(
            "a",
            Target::lane(&agent, "L").delayed(Duration::from_millis(300)),
        )],
    )
    .await?;
    let waiter = spawn_wait(
        &cx.store,
        cx.work("w", &["agent"], 1).with_wait_ms(LONG_WAIT_MS),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    cx.advance(300);
    let result = woken(waiter).await?;
    let heads: Vec<_> = result
        .heads()
        .map(|(session, head)| (session.to_owned(), head.event.index))
        .collect();
    ensure_eq!(heads, vec![(s.clone(), 1)]);
    Ok(())
}

/// A time already reached is no schedule: the head is claimable at once
/// and stored exactly as an unscheduled one.
pub(crate) async fn scheduled_time_in_the_past_runs_at_once(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(
        &s,
        vec![
            scheduled("a", Target::event(&agent).not_before_ms(T0 - 10)),
            scheduled("b", Target::lane(&agent, "L").not_before_ms(T0)),
            scheduled("c", Target::lane(&agent, "M").delayed(Duration::ZERO)),
        ],
    )
    .await?;
    for cursor in cx.cursors(&s).await? {
        ensure_eq!(cursor.dispatch, Dispatch::default());
    }
    ensure_eq!(cx.claim_heads(&s, "w").await?.len(), 3);
    Ok(())
}

/// Negative times are `InvalidInput`, and nothing changes.
pub(crate) async fn scheduled_target_times_must_not_be_negative(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    ensure_unchanged!(cx, &s, {
        for at in [NotBefore::AtMs(-1), NotBefore::AfterMs(-1)] {
            let mut target = Target::event(&agent);
            target.not_before = Some(at);
            ensure_code!(
                cx.append(&s, vec![scheduled("b", target)]).await,
                ErrorCode::InvalidInput
            );
            ensure_code!(
                cx.store
                    .reschedule(change(&s, &agent, None, 1, to(at)))
                    .await,
                ErrorCode::InvalidInput
            );
        }
        ensure_code!(
            cx.store
                .reschedule(change(&s, &agent, Some(""), 1, ScheduleChange::Cancel))
                .await,
            ErrorCode::InvalidInput
        );
    });
    Ok(())
}

/// Several targets of one event on one cursor queue the index once; its
/// head takes the latest of their times.
pub(crate) async fn repeated_scheduled_targets_take_the_latest_time(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    let event = msg("a")
        .with_target(Target::event(&agent).delayed(Duration::from_millis(100)))
        .with_target(Target::event(&agent).delayed(Duration::from_millis(300)))
        .with_target(Target::event(&agent))
        .with_target(Target::lane(&agent, "L").not_before_ms(T0 + 200))
        .with_target(Target::lane(&agent, "L"));
    cx.append(&s, vec![event]).await?;
    let expiries: Vec<_> = cx
        .cursors(&s)
        .await?
        .iter()
        .map(|cursor| (cursor.lane.clone(), cursor.dispatch.claim_expires_at))
        .collect();
    ensure_eq!(
        expiries,
        vec![
            (Some("L".to_owned()), Some(T0 + 200)),
            (None, Some(T0 + 300))
        ]
    );
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 200);
    Ok(())
}

/// A scheduled head holds its lane: later events wait behind it, and an
/// index's time applies when the lane reaches it (claimable at once when
/// the time passed while it waited).
pub(crate) async fn scheduled_head_holds_its_lane(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    let delayed = |id: &str, ms: u64| {
        scheduled(
            id,
            Target::lane(&agent, "L").delayed(Duration::from_millis(ms)),
        )
    };
    cx.append(&s, vec![delayed("a", 500)]).await?;
    cx.append(&s, vec![to_lane("b", &agent, "L")]).await?;
    ensure_eq!(
        busy(cx.claim(&s, "w").await?)?,
        T0 + 500,
        "b waits behind a"
    );
    cx.advance(500);
    let first = cx.claim_heads(&s, "w").await?;
    ensure_eq!(head_summaries(&first), vec![format!("1 {agent}/L #1")]);
    cx.append(&s, vec![delayed("c", 100)]).await?;
    cx.append(&s, vec![delayed("d", 50)]).await?;
    cx.complete(&s, &first[0], vec![]).await?;
    let second = cx.claim_heads(&s, "w").await?;
    ensure_eq!(head_summaries(&second), vec![format!("2 {agent}/L #1")]);
    cx.complete(&s, &second[0], vec![]).await?;
    ensure_eq!(
        only(&cx.cursors(&s).await?)?.dispatch,
        Dispatch::scheduled(Some(T0 + 600)),
        "the lane reached c before its time"
    );
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 600);
    cx.advance(200);
    let third = cx.claim_heads(&s, "w").await?;
    ensure_eq!(head_summaries(&third), vec![format!("3 {agent}/L #1")]);
    cx.complete(&s, &third[0], vec![]).await?;
    ensure_eq!(
        only(&cx.cursors(&s).await?)?.dispatch,
        Dispatch::scheduled(Some(T0 + 550)),
        "d keeps its time, already passed"
    );
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w").await?),
        vec![format!("4 {agent}/L #1")]
    );
    Ok(())
}

/// Log cursors are never scheduled: a scheduled target on a log lane is the
/// lane conflict, and rescheduling a log head is `InvalidInput`.
pub(crate) async fn log_heads_are_never_scheduled(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append_for(
        &s,
        vec![msg("a")],
        vec![log_consumer(&agent, "log", None, false)],
    )
    .await?;
    ensure_eq!(only(&cx.cursors(&s).await?)?.head, Some(1));
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(
                &s,
                vec![scheduled(
                    "b",
                    Target::lane(&agent, "log").delayed(Duration::from_millis(100))
                )]
            )
            .await,
            ErrorCode::InvalidInput
        );
        for action in [ScheduleChange::Cancel, to(NotBefore::AfterMs(100))] {
            ensure_code!(
                cx.store
                    .reschedule(change(&s, &agent, Some("log"), 1, action))
                    .await,
                ErrorCode::InvalidInput
            );
        }
    });
    Ok(())
}

/// A head that never ran moves to a new time (later or sooner; a time
/// reached makes it claimable now), and a waiting claim wakes when it is
/// brought forward.
pub(crate) async fn reschedule_moves_a_head_that_has_not_run(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(
        &s,
        vec![scheduled(
            "a",
            Target::event(&agent).delayed(Duration::from_millis(1_000)),
        )],
    )
    .await?;
    cx.append(&s, vec![to_event("b", &agent)]).await?;
    ensure_eq!(
        cx.store
            .reschedule(change(&s, &agent, None, 2, to(NotBefore::AfterMs(3_000))))
            .await?,
        RescheduleResult::Rescheduled {
            not_before: Some(T0 + 3_000)
        },
        "an unscheduled head can be put off too"
    );
    ensure_eq!(
        cx.store
            .reschedule(change(&s, &agent, None, 1, to(NotBefore::AfterMs(200))))
            .await?,
        RescheduleResult::Rescheduled {
            not_before: Some(T0 + 200)
        }
    );
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 200);
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?,
        T0 + 200
    );
    ensure_eq!(
        cx.store
            .reschedule(change(&s, &agent, None, 1, to(NotBefore::AtMs(T0 + 5_000))))
            .await?,
        RescheduleResult::Rescheduled {
            not_before: Some(T0 + 5_000)
        }
    );
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 3_000);
    let waiter = spawn_wait(
        &cx.store,
        cx.work("w", &["agent"], 1).with_wait_ms(LONG_WAIT_MS),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    ensure_eq!(
        cx.store
            .reschedule(change(&s, &agent, None, 1, to(NotBefore::AtMs(0))))
            .await?,
        RescheduleResult::Rescheduled { not_before: None }
    );
    let result = woken(waiter).await?;
    let heads: Vec<_> = result.heads().map(|(_, head)| head.event.index).collect();
    ensure_eq!(heads, vec![1]);
    Ok(())
}

/// A cancelled head is passed over as a redrive skip passes it: the lane
/// moves to its next index, which keeps its own time; the row stays; a
/// second cancel finds nothing (`Gone`).
pub(crate) async fn reschedule_cancels_a_head_and_the_lane_moves_on(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    let delayed = |id: &str, target: Target, ms: u64| {
        scheduled(id, target.delayed(Duration::from_millis(ms)))
    };
    cx.append(&s, vec![delayed("a", Target::lane(&agent, "L"), 1_000)])
        .await?;
    cx.append(&s, vec![delayed("b", Target::lane(&agent, "L"), 300)])
        .await?;
    cx.append(&s, vec![delayed("c", Target::event(&agent), 100)])
        .await?;
    let cancel =
        |lane: Option<&str>, index| change(&s, &agent, lane, index, ScheduleChange::Cancel);
    ensure_eq!(
        cx.store.reschedule(cancel(Some("L"), 1)).await?,
        RescheduleResult::Cancelled
    );
    ensure_eq!(
        cx.store.reschedule(cancel(None, 3)).await?,
        RescheduleResult::Cancelled
    );
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(
        (cursor.position, cursor.head, cursor.dispatch),
        (1, Some(2), Dispatch::scheduled(Some(T0 + 300)))
    );
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 300);
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![1, 2, 3], "rows stay");
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.store.reschedule(cancel(Some("L"), 1)).await?,
            RescheduleResult::Gone
        );
        ensure_eq!(
            cx.store.reschedule(cancel(None, 3)).await?,
            RescheduleResult::Gone
        );
    });
    Ok(())
}

/// An index still queued behind the lane's head can be moved or cancelled;
/// the lane applies the new time when it gets there, and skips a cancelled
/// index.
pub(crate) async fn reschedule_moves_and_cancels_queued_lane_entries(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_lane("a", &agent, "L")]).await?;
    cx.append(
        &s,
        vec![scheduled(
            "b",
            Target::lane(&agent, "L").delayed(Duration::from_millis(500)),
        )],
    )
    .await?;
    cx.append(&s, vec![to_lane("c", &agent, "L")]).await?;
    ensure_eq!(
        cx.store
            .reschedule(change(
                &s,
                &agent,
                Some("L"),
                2,
                to(NotBefore::AfterMs(2_000))
            ))
            .await?,
        RescheduleResult::Rescheduled {
            not_before: Some(T0 + 2_000)
        }
    );
    ensure_eq!(
        cx.store
            .reschedule(change(&s, &agent, Some("L"), 3, ScheduleChange::Cancel))
            .await?,
        RescheduleResult::Cancelled
    );
    let first = cx.claim_heads(&s, "w").await?;
    ensure_eq!(head_summaries(&first), vec![format!("1 {agent}/L #1")]);
    cx.complete(&s, &first[0], vec![]).await?;
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 2_000);
    cx.advance(2_000);
    let second = cx.claim_heads(&s, "w").await?;
    ensure_eq!(head_summaries(&second), vec![format!("2 {agent}/L #1")]);
    cx.complete(&s, &second[0], vec![]).await?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!((cursor.position, cursor.head), (2, None), "c was cancelled");
    settled(cx.claim(&s, "w").await?)?;
    ensure_eq!(
        cx.store
            .reschedule(change(&s, &agent, Some("L"), 3, ScheduleChange::Cancel))
            .await?,
        RescheduleResult::Gone
    );
    Ok(())
}

/// A head that has been claimed (running, released or in a retry delay)
/// answers `Started`; an index no cursor of the consumer waits on answers
/// `Gone`, one with no row `NoSuchEvent`; cleared work is `Gone`. None of
/// them changes anything.
pub(crate) async fn reschedule_of_a_started_head_changes_nothing(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    let heads = cx.claim_heads(&s, "w").await?;
    let cancel = |consumer: &str, index| change(&s, consumer, None, index, ScheduleChange::Cancel);
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.store.reschedule(cancel(&agent, 1)).await?,
            RescheduleResult::Started
        );
        ensure_eq!(
            cx.store
                .reschedule(change(&s, &agent, None, 1, to(NotBefore::AtMs(0))))
                .await?,
            RescheduleResult::Started
        );
    });
    let mut failure = cx.fail_req(&s, &heads[0], "later");
    failure.retry_after_ms = Some(100);
    cx.store.fail_attempt(failure).await?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.store.reschedule(cancel(&agent, 1)).await?,
            RescheduleResult::Started,
            "a retry delay is not a schedule"
        );
        ensure_eq!(
            cx.store
                .reschedule(cancel(&cx.consumer("other"), 1))
                .await?,
            RescheduleResult::Gone
        );
        ensure_code!(
            cx.store.reschedule(cancel(&agent, 9)).await,
            ErrorCode::NoSuchEvent
        );
    });
    cx.store.clear(ClearRequest::new(&s)).await?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.store.reschedule(cancel(&agent, 1)).await?,
            RescheduleResult::Gone
        );
    });
    Ok(())
}

/// A reschedule with a cause is fenced like an append: the attempt that
/// scheduled a follow-up may cancel it while current; once it completed,
/// the cause is `SupersededAttempt` and nothing changes.
pub(crate) async fn reschedule_is_fenced_by_its_cause(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    let reminder = cx.consumer("reminder");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    let head = cx.claim_heads(&s, "w").await?.remove(0);
    let follow_up = |id: &str| {
        scheduled(
            id,
            Target::event(&reminder).delayed(Duration::from_millis(600)),
        )
        .with_cause(head.cause())
    };
    cx.append(&s, vec![follow_up("r1"), follow_up("r2")])
        .await?;
    ensure_eq!(
        cx.store
            .reschedule(
                change(&s, &reminder, None, 2, ScheduleChange::Cancel).with_cause(head.cause())
            )
            .await?,
        RescheduleResult::Cancelled
    );
    cx.complete(&s, &head, vec![]).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.store
                .reschedule(
                    change(&s, &reminder, None, 3, ScheduleChange::Cancel).with_cause(head.cause())
                )
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    ensure_eq!(
        busy(cx.claim(&s, "w").await?)?,
        T0 + 600,
        "r2 is still scheduled"
    );
    Ok(())
}
