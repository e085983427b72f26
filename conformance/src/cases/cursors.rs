//! The three cursor kinds (event, lane, log), lane conflicts, the
//! `consumers` filter, `cursors()` and `wake_log`.

use a2_store_api::{
    ClaimRequest, ClearRequest, CompleteRequest, ConsumerDeclaration, CursorKind, ErrorCode,
    NewEvent, Target,
};
use serde_json::json;

use crate::support::*;

async fn clear(cx: &Cx, s: &str) -> CaseResult {
    cx.store
        .clear(ClearRequest {
            session_id: s.to_owned(),
            ..ClearRequest::default()
        })
        .await?;
    Ok(())
}

/// Laneless targets make one event cursor per event; all their heads are claimed at once.
pub(crate) async fn event_cursors_run_concurrently(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_event("a", "notifier"),
            to_event("b", "notifier"),
            to_event("c", "notifier"),
        ],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["1 notifier/- #1", "2 notifier/- #1", "3 notifier/- #1"])
    );
    Ok(())
}

/// An event cursor sits at position `index - 1` with head `index`.
pub(crate) async fn event_cursor_position_is_index_minus_one(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), to_event("b", "notifier")])
        .await?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.kind, CursorKind::Event);
    ensure_eq!(
        cursor_summaries(&[cursor]),
        strs(&["notifier/- event pos=1 head=2"])
    );
    Ok(())
}

/// A finished event cursor is no longer listed by `cursors()`.
pub(crate) async fn event_cursor_finishes_after_completion(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_event("a", "notifier"), to_event("b", "notifier")],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    completed(cx.complete(&s, &nth(&heads, 0)?, vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["notifier/- event pos=1 head=2"])
    );
    Ok(())
}

/// A lane hands out its heads strictly one at a time, in log order.
pub(crate) async fn lane_cursor_hands_out_one_head_at_a_time(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_lane("a", "agent", "L1"),
            to_lane("b", "agent", "L1"),
            to_lane("c", "agent", "L1"),
        ],
    )
    .await?;
    for expected in ["1 agent/L1 #1", "2 agent/L1 #1", "3 agent/L1 #1"] {
        let heads = cx.claim_heads(&s, "w1").await?;
        ensure_eq!(head_summaries(&heads), strs(&[expected]));
        ensure_eq!(busy(cx.claim(&s, "w2").await?)?, cx.now() + TTL);
        completed(cx.complete(&s, &heads[0], vec![]).await?)?;
    }
    settled(cx.claim(&s, "w1").await?)
}

/// A lane's queue follows log order across batches, skipping untargeted rows.
pub(crate) async fn lane_cursor_queues_across_batches(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("x")])
        .await?;
    cx.append(&s, vec![msg("y"), to_lane("b", "agent", "L1")])
        .await?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.kind, CursorKind::Lane);
    ensure_eq!(
        cursor_summaries(&[cursor]),
        strs(&["agent/L1 lane pos=0 head=1"])
    );
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=4"])
    );
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["4 agent/L1 #1"])
    );
    Ok(())
}

/// Different lanes (and different consumers on one lane name) run concurrently.
pub(crate) async fn separate_lanes_run_concurrently(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_lane("a", "agent", "L1"),
            to_lane("b", "agent", "L2"),
            to_lane("c", "other", "L1"),
            to_lane("d", "agent", "L1"),
        ],
    )
    .await?;
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["1 agent/L1 #1", "2 agent/L2 #1", "3 other/L1 #1"])
    );
    Ok(())
}

/// A lane cursor whose queue is drained stays listed with no head.
pub(crate) async fn drained_lane_cursor_stays_listed_without_head(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=-"])
    );
    settled(cx.claim(&s, "w1").await?)?;
    cx.append(&s, vec![to_lane("b", "agent", "L1")]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=2"])
    );
    Ok(())
}

/// A target repeated for the same lane in one event (appended or returned
/// by a completion) is queued once: the lane hands the index out once and
/// moves on after one completion.
pub(crate) async fn lane_target_repeated_in_one_event_is_queued_once(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let twice = |id: &str| to_lane(id, "agent", "L1").with_target(Target::lane("agent", "L1"));
    cx.append(&s, vec![twice("a"), to_lane("b", "agent", "L1")])
        .await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=0 head=1"])
    );
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        head_summaries(std::slice::from_ref(&head)),
        strs(&["1 agent/L1 #1"])
    );
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=2"])
    );
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        head_summaries(std::slice::from_ref(&head)),
        strs(&["2 agent/L1 #1"])
    );
    completed(cx.complete(&s, &head, vec![twice("c")]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=2 head=3"])
    );
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        head_summaries(std::slice::from_ref(&head)),
        strs(&["3 agent/L1 #1"])
    );
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=3 head=-"])
    );
    settled(cx.claim(&s, "w1").await?)
}

/// A lane cursor created after a clear starts at the clear index.
pub(crate) async fn lane_cursor_created_after_clear_starts_at_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    clear(&cx, &s).await?;
    cx.append(&s, vec![msg("c"), to_lane("d", "agent", "L1")])
        .await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=3 head=5"])
    );
    Ok(())
}

/// A log consumer without `types` takes every event, one at a time, in order.
pub(crate) async fn log_cursor_takes_every_type_without_filter(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", None, false);
    cx.append_for(&s, vec![ev("a", "1"), ev("b", "2")], vec![audit.clone()])
        .await?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.kind, CursorKind::Log);
    ensure_eq!(cursor.types, None);
    ensure_eq!(
        cursor_summaries(&[cursor]),
        strs(&["audit/log log pos=0 head=1"])
    );
    for expected in ["1 audit/log #1", "2 audit/log #1"] {
        let heads = cx.claim_heads(&s, "w1").await?;
        ensure_eq!(head_summaries(&heads), strs(&[expected]));
        completed(cx.complete(&s, &heads[0], vec![]).await?)?;
    }
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=2 head=-"])
    );
    settled(cx.claim(&s, "w1").await?)?;
    cx.append_for(&s, vec![ev("c", "3")], vec![audit]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=2 head=3"])
    );
    Ok(())
}

/// A log consumer with `types` visits only those types, skipping the rest.
pub(crate) async fn log_cursor_skips_types_it_does_not_take(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", Some(&["x"]), false);
    cx.append_for(
        &s,
        vec![ev("y", "1"), ev("x", "2"), ev("y", "3"), ev("x", "4")],
        vec![audit],
    )
    .await?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.types, Some(strs(&["x"])));
    for expected in ["2 audit/log #1", "4 audit/log #1"] {
        let heads = cx.claim_heads(&s, "w1").await?;
        ensure_eq!(head_summaries(&heads), strs(&[expected]));
        completed(cx.complete(&s, &heads[0], vec![]).await?)?;
    }
    settled(cx.claim(&s, "w1").await?)
}

/// Without backfill a log cursor starts at the head before the declaring
/// batch, its head the first taken row of that batch.
pub(crate) async fn log_cursor_without_backfill_starts_at_declaring_batch(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![ev("x", "1"), ev("x", "2")]).await?;
    let audit = log_consumer("audit", "log", Some(&["x"]), false);
    cx.append_for(&s, vec![ev("y", "3"), ev("x", "4")], vec![audit])
        .await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=2 head=4"])
    );
    Ok(())
}

/// With backfill a log cursor starts from the beginning of a never-cleared log.
pub(crate) async fn log_cursor_with_backfill_starts_from_beginning(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![ev("y", "1"), ev("x", "2")]).await?;
    let audit = log_consumer("audit", "log", Some(&["x"]), true);
    cx.append_for(&s, vec![ev("x", "3")], vec![audit]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=0 head=2"])
    );
    Ok(())
}

/// With backfill a log cursor starts from the last clear, not before it.
pub(crate) async fn log_cursor_with_backfill_starts_after_last_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![ev("x", "1"), ev("x", "2")]).await?;
    clear(&cx, &s).await?;
    cx.append(&s, vec![ev("x", "4")]).await?;
    let audit = log_consumer("audit", "log", None, true);
    cx.append_for(&s, vec![ev("x", "5")], vec![audit]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=3 head=4"])
    );
    Ok(())
}

/// A declaring batch with no event of a taken type creates no log cursor.
pub(crate) async fn log_cursor_not_created_without_taken_type(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", Some(&["x"]), true);
    let result = cx
        .append_for(&s, vec![ev("y", "1")], vec![audit.clone()])
        .await?;
    ensure!(!result.has_pending, "no cursor, nothing pending");
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        Vec::<String>::new()
    );
    let result = cx.append_for(&s, vec![ev("x", "2")], vec![audit]).await?;
    ensure!(result.has_pending, "the cursor now has head 2");
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=0 head=2"])
    );
    Ok(())
}

/// A log cursor never takes the `a2.cleared` marker; after a clear it is parked
/// at the marker and resumes with the next taken append.
pub(crate) async fn log_cursor_never_takes_clear_marker(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", None, false);
    cx.append_for(&s, vec![ev("x", "1")], vec![audit.clone()])
        .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    clear(&cx, &s).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=2 head=-"])
    );
    settled(cx.claim(&s, "w1").await?)?;
    let woken = cx.store.wake_log(&s, &audit).await?;
    ensure_eq!(woken.cursor.head, None);
    ensure_eq!(woken.head, 2);
    cx.append_for(&s, vec![ev("x", "3")], vec![audit]).await?;
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["3 audit/log #1"])
    );
    Ok(())
}

/// Declarations refresh a log cursor's types; the current head is kept and
/// the new types apply from the next advance.
pub(crate) async fn log_declaration_refreshes_types_from_next_advance(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let only_a = log_consumer("audit", "log", Some(&["a"]), false);
    cx.append_for(
        &s,
        vec![ev("a", "1"), ev("b", "2"), ev("a", "3")],
        vec![only_a],
    )
    .await?;
    let only_b = log_consumer("audit", "log", Some(&["b"]), false);
    let request = ClaimRequest {
        consumers: Some(vec![only_b.clone()]),
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["1 audit/log #1"]));
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.types, Some(strs(&["b"])));
    completed(cx.complete(&s, &heads[0], vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=1 head=2"])
    );
    Ok(())
}

/// Several log consumers follow the same log independently.
pub(crate) async fn log_consumers_follow_the_log_independently(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", None, false);
    let index = log_consumer("index", "main", Some(&["x"]), false);
    cx.append_for(&s, vec![ev("y", "1"), ev("x", "2")], vec![audit, index])
        .await?;
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["1 audit/log #1", "2 index/main #1"])
    );
    Ok(())
}

/// A target on the lane the same call declares as a log lane is `InvalidInput`.
pub(crate) async fn target_on_log_lane_declared_in_same_call_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append_for(
                &s,
                vec![to_lane("b", "audit", "log")],
                vec![log_consumer("audit", "log", None, false)],
            )
            .await,
            ErrorCode::InvalidInput
        );
    });
    Ok(())
}

/// A target on an existing log cursor's lane is `InvalidInput`, even undeclared.
pub(crate) async fn target_on_existing_log_lane_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![msg("a")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![to_lane("b", "audit", "log")]).await,
            ErrorCode::InvalidInput
        );
    });
    Ok(())
}

/// A log declaration on a lane that already holds targeted work is `InvalidInput`.
pub(crate) async fn log_declaration_on_target_lane_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "audit", "log")]).await?;
    ensure_unchanged!(
        cx,
        &s,
        {
            ensure_code!(
                cx.append_for(
                    &s,
                    vec![msg("b")],
                    vec![log_consumer("audit", "log", None, false)],
                )
                .await,
                ErrorCode::InvalidInput
            );
        },
        {
            ensure_code!(
                cx.store
                    .wake_log(&s, &log_consumer("audit", "log", None, true))
                    .await,
                ErrorCode::InvalidInput
            );
        },
    );
    Ok(())
}

/// A completion returning an event targeted at an existing log lane is
/// `InvalidInput` and changes nothing (the head stays claimed).
pub(crate) async fn completion_targeting_log_lane_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![to_lane("a", "agent", "L1")],
        vec![log_consumer("audit", "log", Some(&["msg"]), false)],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let agent = heads
        .iter()
        .find(|head| head.consumer == "agent")
        .cloned()
        .ok_or_else(|| Failure::Fail(format!("no agent head in {:?}", head_summaries(&heads))))?;
    ensure_unchanged!(cx, &s, {
        let reply = NewEvent::new("reply", json!(null))
            .with_id("r")
            .with_target(Target::lane("audit", "log"));
        ensure_code!(
            cx.complete(&s, &agent, vec![reply]).await,
            ErrorCode::InvalidInput
        );
    });
    Ok(())
}

/// `consumers` on a claim serves only those consumers' cursors.
pub(crate) async fn claim_serves_only_declared_consumers(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![msg("a")
            .with_target(Target::event("agent"))
            .with_target(Target::event("notifier"))],
    )
    .await?;
    let request = ClaimRequest {
        consumers: Some(vec![ConsumerDeclaration::targeted("notifier")]),
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request.clone()).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["1 notifier/- #1"]));
    ensure_eq!(busy(cx.store.claim_available(request).await?)?, T0 + TTL);
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["1 agent/- #1"])
    );
    Ok(())
}

/// A claim serving only consumers with no cursor is `Settled`.
pub(crate) async fn claim_for_consumers_without_work_is_settled(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let request = ClaimRequest {
        consumers: Some(vec![ConsumerDeclaration::targeted("nobody")]),
        ..cx.req(&s, "w1")
    };
    settled(cx.store.claim_available(request).await?)?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.dispatch.attempt_count, 0);
    Ok(())
}

/// `cursors()` sorts by consumer, then lane cursors by lane name, then laneless
/// event cursors by head.
pub(crate) async fn cursors_sorted_by_consumer_lane_then_event_heads(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![
            to_event("a", "b"),
            to_lane("b", "b", "L2"),
            to_event("c", "b"),
            to_lane("d", "b", "L1"),
            to_event("e", "a"),
        ],
        vec![log_consumer("c", "log", None, false)],
    )
    .await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&[
            "a/- event pos=4 head=5",
            "b/L1 lane pos=0 head=4",
            "b/L2 lane pos=0 head=2",
            "b/- event pos=0 head=1",
            "b/- event pos=2 head=3",
            "c/log log pos=0 head=1",
        ])
    );
    Ok(())
}

/// `cursors()` reports each head's dispatch bookkeeping.
pub(crate) async fn cursors_report_dispatch_bookkeeping(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let fresh = only(&cx.cursors(&s).await?)?;
    ensure_eq!(fresh.dispatch, a2_store_api::Dispatch::default());
    cx.claim_heads(&s, "w1").await?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.dispatch, claimed_once("w1"));
    Ok(())
}

/// `wake_log` on a session never written returns an idle cursor and creates none.
pub(crate) async fn wake_log_on_empty_session_is_idle(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", Some(&["x"]), true);
    let woken = cx.store.wake_log(&s, &audit).await?;
    ensure_eq!(woken.head, 0);
    ensure_eq!(woken.cursor.kind, CursorKind::Log);
    ensure_eq!(woken.cursor.types, Some(strs(&["x"])));
    ensure_eq!(
        cursor_summaries(&[woken.cursor]),
        strs(&["audit/log log pos=0 head=-"])
    );
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        Vec::<String>::new()
    );
    Ok(())
}

/// `wake_log` right after a clear (nothing after the marker) is idle at the marker, creating nothing.
pub(crate) async fn wake_log_on_just_cleared_session_is_idle(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    clear(&cx, &s).await?;
    let woken = cx
        .store
        .wake_log(&s, &log_consumer("audit", "log", None, true))
        .await?;
    ensure_eq!(woken.head, 3);
    ensure_eq!(
        cursor_summaries(&[woken.cursor]),
        strs(&["audit/log log pos=3 head=-"])
    );
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        Vec::<String>::new()
    );
    Ok(())
}

/// `wake_log` with backfill creates the cursor at the first taken event after the clear.
pub(crate) async fn wake_log_with_backfill_creates_cursor(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![ev("x", "1"), ev("y", "2")]).await?;
    let woken = cx
        .store
        .wake_log(&s, &log_consumer("audit", "log", Some(&["y"]), true))
        .await?;
    ensure_eq!(woken.head, 2);
    ensure_eq!(
        cursor_summaries(&[woken.cursor]),
        strs(&["audit/log log pos=0 head=2"])
    );
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=0 head=2"])
    );
    Ok(())
}

/// `wake_log` without backfill creates the cursor at the head, with no head
/// until a declaring append brings a taken event.
pub(crate) async fn wake_log_without_backfill_creates_cursor_at_head(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![ev("x", "1"), ev("x", "2")]).await?;
    let audit = log_consumer("audit", "log", None, false);
    let woken = cx.store.wake_log(&s, &audit).await?;
    ensure_eq!(
        cursor_summaries(&[woken.cursor]),
        strs(&["audit/log log pos=2 head=-"])
    );
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=2 head=-"])
    );
    cx.append_for(&s, vec![ev("x", "3")], vec![audit]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=2 head=3"])
    );
    Ok(())
}

/// `wake_log` refreshes an existing cursor's types and wakes it onto the next taken event.
pub(crate) async fn wake_log_refreshes_types_and_wakes_idle_cursor(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let only_x = log_consumer("audit", "log", Some(&["x"]), false);
    cx.append_for(&s, vec![ev("x", "1")], vec![only_x]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    cx.append(&s, vec![ev("y", "2"), ev("z", "3")]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=1 head=-"])
    );
    let woken = cx
        .store
        .wake_log(&s, &log_consumer("audit", "log", Some(&["z"]), false))
        .await?;
    ensure_eq!(woken.head, 3);
    ensure_eq!(woken.cursor.types, Some(strs(&["z"])));
    ensure_eq!(
        cursor_summaries(&[woken.cursor]),
        strs(&["audit/log log pos=1 head=3"])
    );
    Ok(())
}

/// `wake_log` keeps the current head of a cursor that has one.
pub(crate) async fn wake_log_keeps_current_head(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", None, true);
    cx.append_for(&s, vec![ev("x", "1"), ev("x", "2")], vec![audit.clone()])
        .await?;
    cx.claim_heads(&s, "w1").await?;
    let before = cx.cursors(&s).await?;
    let woken = cx.store.wake_log(&s, &audit).await?;
    ensure_eq!(vec![woken.cursor], before);
    ensure_eq!(cx.cursors(&s).await?, before);
    Ok(())
}

/// A completion's returned events create a declared log cursor like an append does.
pub(crate) async fn completion_creates_declared_log_cursor(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let result = cx
        .store
        .complete_attempt(CompleteRequest {
            incarnation: None,
            session_id: s.clone(),
            consumer: "agent".into(),
            lane: Some("L1".into()),
            index: 1,
            attempt: head.dispatch.attempt_count,
            events: vec![ev("reply", "r")],
            consumers: Some(vec![log_consumer("audit", "log", Some(&["reply"]), false)]),
        })
        .await?;
    ensure_eq!(idx(&completed(result)?), vec![3]);
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=-", "audit/log log pos=2 head=3"])
    );
    Ok(())
}

/// A claim's declarations refresh existing log cursors but never create one.
pub(crate) async fn claim_declaration_never_creates_log_cursor(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    let request = ClaimRequest {
        consumers: Some(vec![log_consumer("audit", "log", None, true)]),
        ..cx.req(&s, "w1")
    };
    settled(cx.store.claim_available(request).await?)?;
    ensure_eq!(cx.cursors(&s).await?, vec![]);
    Ok(())
}

/// A completion's declarations refresh an existing log cursor's types.
pub(crate) async fn complete_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![ev("a", "1"), ev("b", "2"), ev("a", "3")],
        vec![log_consumer("audit", "log", Some(&["a"]), false)],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let result = cx
        .store
        .complete_attempt(CompleteRequest {
            incarnation: None,
            session_id: s.clone(),
            consumer: "audit".into(),
            lane: Some("log".into()),
            index: 1,
            attempt: head.dispatch.attempt_count,
            events: vec![],
            consumers: Some(vec![log_consumer("audit", "log", Some(&["b"]), false)]),
        })
        .await?;
    completed(result)?;
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.types, Some(strs(&["b"])));
    ensure_eq!(
        cursor_summaries(&[cursor]),
        strs(&["audit/log log pos=1 head=2"])
    );
    Ok(())
}

/// A redrive's declarations refresh an existing log cursor's types.
pub(crate) async fn redrive_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![ev("a", "1"), ev("b", "2"), ev("a", "3")],
        vec![log_consumer("audit", "log", Some(&["a"]), false)],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let result = cx
        .store
        .redrive(a2_store_api::RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: s.clone(),
            consumer: "audit".into(),
            index: 1,
            action: a2_store_api::RedriveAction::Skip,
            consumers: Some(vec![log_consumer("audit", "log", Some(&["b"]), false)]),
        })
        .await?;
    ensure!(result.redriven, "the dead head is skipped");
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.types, Some(strs(&["b"])));
    ensure_eq!(
        cursor_summaries(&[cursor]),
        strs(&["audit/log log pos=1 head=2"])
    );
    Ok(())
}

/// A consumer may have a log lane and target lanes of other names; another
/// consumer may target a lane with the log lane's name. No conflict.
pub(crate) async fn log_and_target_lanes_coexist_when_distinct(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![to_lane("a", "audit", "L1"), to_lane("b", "other", "log")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&[
            "audit/L1 lane pos=0 head=1",
            "audit/log log pos=0 head=1",
            "other/log lane pos=0 head=2",
        ])
    );
    Ok(())
}

/// A log cursor created by `wake_log` makes later targets on its lane `InvalidInput`.
pub(crate) async fn target_on_lane_created_by_wake_log_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    cx.store
        .wake_log(&s, &log_consumer("audit", "log", None, true))
        .await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![to_lane("b", "audit", "log")]).await,
            ErrorCode::InvalidInput
        );
    });
    Ok(())
}

/// A dead-lettered lane head blocks the lane: later heads wait behind it.
pub(crate) async fn dead_lettered_lane_head_blocks_the_lane(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    settled(cx.claim(&s, "w1").await?)?;
    ensure!(
        !cx.append(&s, vec![]).await?.has_pending,
        "the lane's head is dead-lettered"
    );
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=0 head=1"])
    );
    Ok(())
}

/// A lane head waiting out a retry delay keeps the lane busy.
pub(crate) async fn retrying_lane_head_keeps_the_lane_busy(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let mut request = cx.fail_req(&s, &head, "later");
    request.retry_after_ms = Some(50);
    cx.store.fail_attempt(request).await?;
    ensure_eq!(busy(cx.claim(&s, "w1").await?)?, T0 + 50);
    Ok(())
}

/// A log consumer declaring an empty type list takes nothing: no cursor is created.
pub(crate) async fn log_consumer_with_empty_types_takes_nothing(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let result = cx
        .append_for(
            &s,
            vec![ev("x", "1"), ev("y", "2")],
            vec![log_consumer("audit", "log", Some(&[]), true)],
        )
        .await?;
    ensure!(!result.has_pending, "nothing is taken, nothing pending");
    ensure_eq!(cx.cursors(&s).await?, vec![]);
    Ok(())
}

/// `wake_log` with backfill on a log holding nothing it takes creates the
/// cursor (listed, no head); a later taken append gives it a head.
pub(crate) async fn wake_log_with_nothing_taken_creates_headless_cursor(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![ev("y", "1")]).await?;
    let audit = log_consumer("audit", "log", Some(&["x"]), true);
    let woken = cx.store.wake_log(&s, &audit).await?;
    ensure_eq!(woken.head, 1);
    ensure_eq!(
        cursor_summaries(&[woken.cursor]),
        strs(&["audit/log log pos=0 head=-"])
    );
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=0 head=-"])
    );
    cx.append_for(&s, vec![ev("x", "2")], vec![audit]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=0 head=2"])
    );
    Ok(())
}
