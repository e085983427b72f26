//! `complete_attempt`: fresh completions, replays, supersession, unknown
//! indexes, returned events (fan-out chains) and completion records.

use a2_store_api::{
    Cause, ClearRequest, CompleteResult, ErrorCode, FailOutcome, NewEvent, RedriveAction,
    RedriveRequest, Target,
};
use serde_json::json;

use crate::support::*;

fn cause(consumer: &str, lane: Option<&str>, index: u64, attempt: u32) -> Cause {
    Cause {
        consumer: consumer.into(),
        lane: lane.map(str::to_owned),
        index,
        attempt,
    }
}

fn superseded(result: CompleteResult) -> CaseResult {
    match result {
        CompleteResult::Superseded => Ok(()),
        other => Err(Failure::Fail(format!("expected Superseded, got {other:?}"))),
    }
}

/// Completing a lane head advances the lane to its next queued head.
pub(crate) async fn complete_advances_lane_to_next_head(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(completed(cx.complete(&s, &head, vec![]).await?)?, vec![]);
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(
        cursor_summaries(std::slice::from_ref(&cursor)),
        strs(&["agent/L1 lane pos=1 head=2"])
    );
    ensure_eq!(cursor.dispatch, a2_store_api::Dispatch::default());
    Ok(())
}

/// Returned events are appended after the head with the completing attempt as cause.
pub(crate) async fn complete_appends_returned_events_with_cause(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(40);
    let events = completed(
        cx.complete(
            &s,
            &head,
            vec![ev("reply", "r1"), NewEvent::new("reply", json!(2))],
        )
        .await?,
    )?;
    ensure_eq!(idx(&events), vec![3, 4]);
    ensure_eq!(events[0].id, "r1");
    ensure!(
        events[1].id.starts_with(GENERATED),
        "a returned event without id gets a generated one, got {}",
        events[1].id
    );
    for event in &events {
        ensure_eq!(event.cause, Some(cause("agent", Some("L1"), 1, 1)));
        ensure_eq!(event.created_at, T0 + 40);
        ensure_eq!(event.session_id, s);
    }
    ensure_eq!(cx.read(&s, 2, None).await?, events);
    Ok(())
}

/// Returned events that target other consumers start their work: a fan-out chain.
pub(crate) async fn complete_returned_events_fan_out_to_other_consumers(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let step = ev("step", "s1")
        .with_target(Target::event("notifier"))
        .with_target(Target::lane("indexer", "main"));
    completed(cx.complete(&s, &head, vec![step]).await?)?;
    let heads = cx.claim_heads(&s, "w1").await?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["2 indexer/main #1", "2 notifier/- #1"])
    );
    let next = ev("step", "s2").with_target(Target::event("archiver"));
    let events = completed(cx.complete(&s, &nth(&heads, 1)?, vec![next]).await?)?;
    ensure_eq!(events[0].cause, Some(cause("notifier", None, 2, 1)));
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["3 archiver/- #1"])
    );
    Ok(())
}

/// Repeating a completion with the same ids replays it: the stored rows, nothing written.
pub(crate) async fn complete_replay_returns_stored_rows(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let first = completed(
        cx.complete(&s, &head, vec![ev("reply", "r1"), ev("reply", "r2")])
            .await?,
    )?;
    cx.advance(10);
    ensure_unchanged!(cx, &s, {
        let replay = completed(
            cx.complete(&s, &head, vec![ev("reply", "r1"), ev("reply", "r2")])
                .await?,
        )?;
        ensure_eq!(replay, first);
    });
    Ok(())
}

/// A completion that returned nothing replays as `Completed` with no events.
pub(crate) async fn complete_replay_without_returned_events(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(completed(cx.complete(&s, &head, vec![]).await?)?, vec![]);
    });
    Ok(())
}

/// A replay whose returned ids differ from the recorded ones is `PartialDuplicateBatch`.
pub(crate) async fn complete_replay_with_different_ids_is_partial_duplicate(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![ev("reply", "r1")]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.complete(&s, &head, vec![ev("reply", "other")]).await,
            ErrorCode::PartialDuplicateBatch
        );
        ensure_code!(
            cx.complete(&s, &head, vec![]).await,
            ErrorCode::PartialDuplicateBatch
        );
        ensure_code!(
            cx.complete(&s, &head, vec![ev("reply", "r1"), ev("reply", "r2")])
                .await,
            ErrorCode::PartialDuplicateBatch
        );
    });
    Ok(())
}

/// A replayed completion whose ids match the recorded one but whose
/// returned type or payload differs is `IdempotencyConflict`, as an append
/// replay is, and nothing changes.
pub(crate) async fn complete_replay_with_different_content_is_conflict(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let reply = |payload: i64| NewEvent::new("reply", json!(payload)).with_id("r1");
    completed(cx.complete(&s, &head, vec![reply(1)]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.complete(&s, &head, vec![reply(2)]).await,
            ErrorCode::IdempotencyConflict
        );
        ensure_code!(
            cx.complete(
                &s,
                &head,
                vec![NewEvent::new("other", json!(1)).with_id("r1")]
            )
            .await,
            ErrorCode::IdempotencyConflict
        );
    });
    completed(cx.complete(&s, &head, vec![reply(1)]).await?)?;
    Ok(())
}

/// A completion whose returned events had generated ids cannot be replayed.
pub(crate) async fn complete_replay_with_generated_ids_is_partial_duplicate(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let reply = NewEvent::new("reply", json!(1));
    completed(cx.complete(&s, &head, vec![reply.clone()]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.complete(&s, &head, vec![reply]).await,
            ErrorCode::PartialDuplicateBatch
        );
    });
    Ok(())
}

/// Replaying a completed head with a different attempt is `Superseded`.
pub(crate) async fn complete_replay_by_other_attempt_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![ev("reply", "r1")]).await?)?;
    ensure_unchanged!(cx, &s, {
        superseded(
            cx.complete_at(&s, &head.cursor_ref(), 2, vec![ev("reply", "r1")])
                .await?,
        )?;
    });
    Ok(())
}

/// An older attempt cannot complete once the head was claimed again; the newer one can.
pub(crate) async fn complete_by_older_attempt_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL);
    let second = nth(&cx.claim_heads(&s, "w2").await?, 0)?;
    ensure_unchanged!(cx, &s, {
        superseded(cx.complete(&s, &first, vec![ev("reply", "old")]).await?)?;
    });
    let events = completed(cx.complete(&s, &second, vec![ev("reply", "new")]).await?)?;
    ensure_eq!(events[0].cause, Some(cause("agent", Some("L1"), 1, 2)));
    Ok(())
}

/// A failed attempt (holder released) cannot complete.
pub(crate) async fn complete_after_fail_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(cx.fail(&s, &head, None).await?.outcome, FailOutcome::Failed);
    ensure_unchanged!(cx, &s, {
        superseded(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    });
    Ok(())
}

/// A dead-lettered head cannot complete.
pub(crate) async fn complete_of_dead_lettered_head_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    ensure_unchanged!(cx, &s, {
        superseded(cx.complete(&s, &head, vec![]).await?)?;
    });
    Ok(())
}

/// A completion at or below the clear is `Superseded`.
pub(crate) async fn complete_after_clear_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    ensure_unchanged!(cx, &s, {
        superseded(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    });
    Ok(())
}

/// A completion naming no cursor and no stored event is `NoSuchEvent`.
pub(crate) async fn complete_unknown_index_is_no_such_event(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.complete_at(&s, &at("agent", None, 9), 1, vec![]).await,
            ErrorCode::NoSuchEvent
        );
        ensure_code!(
            cx.complete_at(
                &cx.session_id("never"),
                &at("agent", Some("L1"), 1),
                1,
                vec![]
            )
            .await,
            ErrorCode::NoSuchEvent
        );
    });
    Ok(())
}

/// A completion naming no cursor at an existing event is `Superseded`.
pub(crate) async fn complete_without_cursor_on_existing_event_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &s, {
        superseded(cx.complete_at(&s, &at("agent", None, 1), 1, vec![]).await?)?;
        superseded(
            cx.complete_at(&s, &at("agent", Some("L1"), 1), 1, vec![])
                .await?,
        )?;
    });
    Ok(())
}

/// A returned id already stored in the session is `PartialDuplicateBatch`; the head stays claimed.
pub(crate) async fn complete_with_stored_returned_id_is_partial_duplicate(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("taken")])
        .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_unchanged!(
        cx,
        &s,
        {
            ensure_code!(
                cx.complete(&s, &head, vec![ev("reply", "new"), msg("taken")])
                    .await,
                ErrorCode::PartialDuplicateBatch
            );
        },
        {
            ensure_code!(
                cx.complete(&s, &head, vec![msg("twice"), msg("twice")])
                    .await,
                ErrorCode::PartialDuplicateBatch
            );
        },
    );
    Ok(())
}

/// A claim that expired but was not claimed again can still complete.
pub(crate) async fn complete_after_unreclaimed_expiry_succeeds(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(10 * TTL);
    let events = completed(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    ensure_eq!(idx(&events), vec![2]);
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=-"])
    );
    Ok(())
}

/// Lane cursors keep every completion record until a clear: older completions replay.
pub(crate) async fn lane_cursor_keeps_completion_records(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let reply = completed(cx.complete(&s, &first, vec![ev("reply", "r1")]).await?)?;
    let second = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &second, vec![ev("reply", "r2")]).await?)?;
    ensure_eq!(
        completed(cx.complete(&s, &first, vec![ev("reply", "r1")]).await?)?,
        reply
    );
    Ok(())
}

/// A log cursor keeps only its latest completion: the older one is `Superseded`.
pub(crate) async fn log_cursor_keeps_only_latest_completion(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", Some(&["msg"]), false);
    cx.append_for(&s, vec![msg("a"), msg("b")], vec![audit])
        .await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &first, vec![ev("reply", "r1")]).await?)?;
    let second = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(second.event.index, 2);
    let latest = completed(cx.complete(&s, &second, vec![ev("reply", "r2")]).await?)?;
    ensure_unchanged!(cx, &s, {
        superseded(cx.complete(&s, &first, vec![ev("reply", "r1")]).await?)?;
        ensure_eq!(
            completed(cx.complete(&s, &second, vec![ev("reply", "r2")]).await?)?,
            latest
        );
    });
    Ok(())
}

/// A log cursor advances to the next event whose type it takes.
pub(crate) async fn complete_advances_log_cursor_to_next_taken_event(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", Some(&["x"]), false);
    cx.append_for(
        &s,
        vec![ev("x", "1"), ev("y", "2"), ev("y", "3"), ev("x", "4")],
        vec![audit],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=1 head=4"])
    );
    Ok(())
}

/// A log consumer taking the type of events its own completion returns visits them next.
pub(crate) async fn log_cursor_takes_events_returned_by_its_completion(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", None, false);
    cx.append_for(&s, vec![msg("a")], vec![audit]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    let next = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(next.event.index, 2);
    ensure_eq!(next.event.cause, Some(cause("audit", Some("log"), 1, 1)));
    Ok(())
}

/// After a skip (redrive) no completion is recorded: completing the skipped head is `Superseded`.
pub(crate) async fn complete_of_skipped_head_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let redriven = cx
        .store
        .redrive(RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: s.clone(),
            consumer: "agent".into(),
            index: 1,
            action: RedriveAction::Skip,
            consumers: None,
        })
        .await?;
    ensure!(redriven.redriven, "the dead-lettered head is skipped");
    superseded(cx.complete(&s, &head, vec![]).await?)?;
    Ok(())
}

/// A finished event cursor keeps its completion record: the completion replays.
pub(crate) async fn event_cursor_completion_replays(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let first = completed(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            completed(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?,
            first
        );
    });
    Ok(())
}

/// A clear drops completion records: replaying a completion from before it is `Superseded`.
pub(crate) async fn completion_records_end_at_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    superseded(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    Ok(())
}

/// Returned events always carry the completing attempt as cause, whatever cause they name.
pub(crate) async fn complete_overrides_returned_event_cause(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let foreign = cause("someone", None, 77, 9);
    let events = completed(
        cx.complete(&s, &head, vec![ev("reply", "r").with_cause(foreign)])
            .await?,
    )?;
    ensure_eq!(events[0].cause, Some(cause("agent", Some("L1"), 1, 1)));
    ensure_eq!(
        cx.read_all(&s).await?[1].cause,
        Some(cause("agent", Some("L1"), 1, 1))
    );
    Ok(())
}

/// A completion may queue work on its own lane: it runs after the lane's
/// earlier heads, in log order.
pub(crate) async fn completion_can_queue_on_its_own_lane(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let follow_up = ev("follow", "f").with_target(Target::lane("agent", "L1"));
    ensure_eq!(
        idx(&completed(cx.complete(&s, &head, vec![follow_up]).await?)?),
        vec![3]
    );
    for expected in ["2 agent/L1 #1", "3 agent/L1 #1"] {
        let heads = cx.claim_heads(&s, "w1").await?;
        ensure_eq!(head_summaries(&heads), strs(&[expected]));
        completed(cx.complete(&s, &heads[0], vec![]).await?)?;
    }
    settled(cx.claim(&s, "w1").await?)
}
