//! `append`: ids, indexes, timestamps, atomicity, duplicates, idempotent
//! replay, the clear and attempt fences, and `has_pending`.

use a2_store_api::{
    AppendOptions, Cause, ClearRequest, ConsumerDeclaration, ErrorCode, FailOutcome, NewEvent,
};
use serde_json::json;

use crate::support::*;

/// Rows get contiguous 1-based indexes across batches, with session, type and payload kept.
pub(crate) async fn append_assigns_contiguous_indexes_from_one(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let first = cx.append(&s, vec![msg("a"), msg("b"), msg("c")]).await?;
    ensure_eq!(idx(&first.events), vec![1, 2, 3]);
    let second = cx.append(&s, vec![msg("d"), msg("e")]).await?;
    ensure_eq!(idx(&second.events), vec![4, 5]);
    let rows = cx.read_all(&s).await?;
    ensure_eq!(idx(&rows), vec![1, 2, 3, 4, 5]);
    ensure_eq!(ids(&rows), strs(&["a", "b", "c", "d", "e"]));
    for row in &rows {
        ensure_eq!(row.session_id, s);
        ensure_eq!(row.event_type, "msg");
        ensure_eq!(row.payload, serde_json::json!({ "id": row.id }));
        ensure_eq!(row.cause, None);
    }
    Ok(())
}

/// Events without an id get one from the store's id generator, in batch order.
pub(crate) async fn append_generates_ids_when_absent(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let batch = vec![
        NewEvent::new("msg", json!(1)),
        msg("given"),
        NewEvent::new("msg", json!(3)),
    ];
    let result = cx.append(&s, batch).await?;
    let got = ids(&result.events);
    ensure_eq!(got[1], "given");
    for generated in [&got[0], &got[2]] {
        ensure!(
            generated.starts_with(GENERATED),
            "id {generated} did not come from the suite's id generator"
        );
    }
    ensure!(got[0] != got[2], "generated ids repeat: {got:?}");
    ensure_eq!(ids(&cx.read_all(&s).await?), got);
    Ok(())
}

/// Supplied ids are stored as given and returned in the batch's order.
pub(crate) async fn append_keeps_supplied_ids(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let result = cx.append(&s, vec![msg("z"), msg("a"), msg("m")]).await?;
    ensure_eq!(ids(&result.events), strs(&["z", "a", "m"]));
    ensure_eq!(idx(&result.events), vec![1, 2, 3]);
    Ok(())
}

/// `created_at` comes from the store clock and is the same for every row of a batch.
pub(crate) async fn append_stamps_created_at_from_store_clock(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let first = cx.append(&s, vec![msg("a"), msg("b")]).await?;
    ensure_eq!(
        first
            .events
            .iter()
            .map(|e| e.created_at)
            .collect::<Vec<_>>(),
        vec![T0, T0]
    );
    cx.advance(250);
    let second = cx.append(&s, vec![msg("c")]).await?;
    ensure_eq!(second.events[0].created_at, T0 + 250);
    let rows = cx.read_all(&s).await?;
    ensure_eq!(
        rows.iter().map(|e| e.created_at).collect::<Vec<_>>(),
        vec![T0, T0, T0 + 250]
    );
    Ok(())
}

/// An empty batch writes nothing and reports the current `has_pending`.
pub(crate) async fn append_empty_batch_reports_has_pending(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let empty = cx.append(&s, vec![]).await?;
    ensure_eq!(empty.events, vec![]);
    ensure!(!empty.has_pending, "nothing is pending on a new session");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    ensure_unchanged!(cx, &s, {
        let empty = cx.append(&s, vec![]).await?;
        ensure_eq!(empty.events, vec![]);
        ensure!(empty.has_pending, "the targeted event is pending");
    });
    Ok(())
}

/// The same supplied id twice in one batch is `PartialDuplicateBatch`; nothing is written.
pub(crate) async fn append_rejects_duplicate_ids_within_batch(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("x")]).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("a"), msg("b"), msg("a")]).await,
            ErrorCode::PartialDuplicateBatch
        );
    });
    Ok(())
}

/// A batch whose every id is stored replays: nothing written, the stored rows
/// returned in the batch's order, no new cursors.
pub(crate) async fn append_replays_batch_whose_ids_are_all_stored(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let stored = cx
        .append(&s, vec![to_event("a", "agent"), to_event("b", "agent")])
        .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["1 agent/- #1", "2 agent/- #1"])
    );
    cx.advance(10);
    ensure_unchanged!(cx, &s, {
        let replay = cx
            .append(&s, vec![to_event("b", "agent"), to_event("a", "agent")])
            .await?;
        ensure_eq!(
            replay.events,
            vec![stored.events[1].clone(), stored.events[0].clone()]
        );
        ensure!(
            replay.has_pending,
            "the two claimed heads are still pending"
        );
    });
    Ok(())
}

/// A replay whose type or payload differs from the stored row is `IdempotencyConflict`.
pub(crate) async fn append_replay_with_different_content_is_conflict(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    ensure_unchanged!(cx, &s, {
        let other_payload = NewEvent::new("msg", json!({"id": "changed"})).with_id("b");
        ensure_code!(
            cx.append(&s, vec![msg("a"), other_payload]).await,
            ErrorCode::IdempotencyConflict
        );
        let other_type = NewEvent::new("other", json!({"id": "a"})).with_id("a");
        ensure_code!(
            cx.append(&s, vec![other_type]).await,
            ErrorCode::IdempotencyConflict
        );
    });
    Ok(())
}

/// A batch mixing stored and fresh ids is `PartialDuplicateBatch`; the fresh ones are not written.
pub(crate) async fn append_partial_duplicate_batch_writes_nothing(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("fresh"), msg("a")]).await,
            ErrorCode::PartialDuplicateBatch
        );
    });
    let next = cx.append(&s, vec![msg("fresh")]).await?;
    ensure_eq!(idx(&next.events), vec![2]);
    Ok(())
}

/// Ids are per session: the same id is a fresh row in another session.
pub(crate) async fn append_ids_are_per_session(cx: Cx) -> CaseResult {
    let (s1, s2) = (cx.session_id("one"), cx.session_id("two"));
    cx.append(&s1, vec![msg("a"), msg("b")]).await?;
    let other = cx.append(&s2, vec![msg("b")]).await?;
    ensure_eq!(idx(&other.events), vec![1]);
    ensure_eq!(idx(&cx.read_all(&s1).await?), vec![1, 2]);
    ensure_eq!(idx(&cx.read_all(&s2).await?), vec![1]);
    Ok(())
}

async fn cleared_session(cx: &Cx) -> std::result::Result<String, Failure> {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    Ok(s)
}

/// `origin_index` equal to the clear index is `SessionCleared`; nothing written.
pub(crate) async fn append_origin_index_at_clear_is_session_cleared(cx: Cx) -> CaseResult {
    let s = cleared_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        let options = AppendOptions {
            origin_index: Some(3),
            ..AppendOptions::default()
        };
        ensure_code!(
            cx.store.append(&s, vec![msg("c")], options).await,
            ErrorCode::SessionCleared
        );
    });
    Ok(())
}

/// `origin_index` below the clear index is `SessionCleared`; nothing written.
pub(crate) async fn append_origin_index_below_clear_is_session_cleared(cx: Cx) -> CaseResult {
    let s = cleared_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        let options = AppendOptions {
            origin_index: Some(1),
            ..AppendOptions::default()
        };
        ensure_code!(
            cx.store.append(&s, vec![msg("c")], options).await,
            ErrorCode::SessionCleared
        );
    });
    Ok(())
}

/// Index 0 is at or below every clear index, even a never-cleared session's
/// 0: `origin_index: Some(0)` is `SessionCleared`, and completing or failing
/// index 0 is `Superseded`, all changing nothing.
pub(crate) async fn index_zero_is_at_the_clear_of_an_uncleared_session(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    ensure_unchanged!(cx, &s, {
        let options = AppendOptions {
            origin_index: Some(0),
            ..AppendOptions::default()
        };
        ensure_code!(
            cx.store.append(&s, vec![msg("b")], options).await,
            ErrorCode::SessionCleared
        );
        let done = cx
            .store
            .complete_attempt(a2_store_api::CompleteRequest {
                incarnation: None,
                session_id: s.clone(),
                consumer: "agent".into(),
                lane: Some("L1".into()),
                index: 0,
                attempt: 0,
                events: vec![],
                consumers: None,
            })
            .await?;
        ensure_eq!(done, a2_store_api::CompleteResult::Superseded);
        let failed = cx
            .store
            .fail_attempt(a2_store_api::FailRequest {
                incarnation: None,
                session_id: s.clone(),
                consumer: "agent".into(),
                lane: Some("L1".into()),
                index: 0,
                attempt: 0,
                error: "e".into(),
                max_failures: None,
                retry_after_ms: None,
            })
            .await?;
        ensure_eq!(failed.outcome, FailOutcome::Superseded);
        ensure_eq!(failed.failure_count, 0);
    });
    Ok(())
}

/// `origin_index` above the clear index is accepted.
pub(crate) async fn append_origin_index_above_clear_is_accepted(cx: Cx) -> CaseResult {
    let s = cleared_session(&cx).await?;
    cx.append(&s, vec![msg("c")]).await?;
    let options = AppendOptions {
        origin_index: Some(4),
        ..AppendOptions::default()
    };
    let result = cx.store.append(&s, vec![msg("d")], options).await?;
    ensure_eq!(idx(&result.events), vec![5]);
    Ok(())
}

/// Whether `origin_index` is checked before causes: an append with both a
/// cleared origin and a stale cause reports `SessionCleared`.
pub(crate) async fn append_checks_origin_before_cause(cx: Cx) -> CaseResult {
    let s = cleared_session(&cx).await?;
    let stale = Cause {
        consumer: "agent".into(),
        lane: None,
        index: 1,
        attempt: 1,
    };
    let options = AppendOptions {
        origin_index: Some(2),
        ..AppendOptions::default()
    };
    ensure_code!(
        cx.store
            .append(&s, vec![msg("c").with_cause(stale)], options)
            .await,
        ErrorCode::SessionCleared
    );
    Ok(())
}

/// An event whose cause is the current attempt is appended with that cause.
pub(crate) async fn append_with_current_cause_is_accepted(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let result = cx
        .append(&s, vec![msg("out").with_cause(head.cause())])
        .await?;
    ensure_eq!(idx(&result.events), vec![2]);
    ensure_eq!(result.events[0].cause, Some(head.cause()));
    ensure_eq!(cx.read_all(&s).await?[1].cause, Some(head.cause()));
    Ok(())
}

/// A cause naming an older attempt than the cursor's is `SupersededAttempt`; nothing written.
pub(crate) async fn append_with_stale_attempt_cause_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL);
    let second = nth(&cx.claim_heads(&s, "w2").await?, 0)?;
    ensure_eq!(second.dispatch.attempt_count, 2);
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("out").with_cause(first.cause())])
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// A cause naming a dead-lettered head is `SupersededAttempt`.
pub(crate) async fn append_with_dead_lettered_cause_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let failed = cx.fail(&s, &head, Some(1)).await?;
    ensure_eq!(failed.outcome, FailOutcome::DeadLettered);
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("out").with_cause(head.cause())])
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// A cause naming a head its cursor has completed is `SupersededAttempt`.
pub(crate) async fn append_with_completed_cause_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("out").with_cause(head.cause())])
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// A cause at or below the clear is `SupersededAttempt`.
pub(crate) async fn append_with_cause_below_clear_is_superseded(cx: Cx) -> CaseResult {
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
        ensure_code!(
            cx.append(&s, vec![msg("out").with_cause(head.cause())])
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// A cause naming a cursor that does not exist is `SupersededAttempt`.
pub(crate) async fn append_with_unknown_cause_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &s, {
        let cause = Cause {
            consumer: "ghost".into(),
            lane: Some("L".into()),
            index: 1,
            attempt: 1,
        };
        ensure_code!(
            cx.append(&s, vec![msg("out").with_cause(cause)]).await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// A failed (released) attempt still fences as current until the head is claimed again.
pub(crate) async fn append_with_failed_attempt_cause_is_current_until_reclaimed(
    cx: Cx,
) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(cx.fail(&s, &head, None).await?.outcome, FailOutcome::Failed);
    let result = cx
        .append(&s, vec![msg("late").with_cause(head.cause())])
        .await?;
    ensure_eq!(idx(&result.events), vec![2]);
    let again = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(again.dispatch.attempt_count, 2);
    ensure_code!(
        cx.append(&s, vec![msg("later").with_cause(head.cause())])
            .await,
        ErrorCode::SupersededAttempt
    );
    Ok(())
}

/// One stale cause rejects the whole batch: nothing of it is written.
pub(crate) async fn append_fenced_batch_is_atomic(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), to_event("b", "agent")])
        .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let (live, done) = (nth(&heads, 0)?, nth(&heads, 1)?);
    completed(cx.complete(&s, &done, vec![]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(
                &s,
                vec![
                    msg("ok").with_cause(live.cause()),
                    msg("stale").with_cause(done.cause()),
                ],
            )
            .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// `has_pending` counts only the declared consumers' cursors when `consumers` is given.
pub(crate) async fn append_has_pending_respects_consumers(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let result = cx
        .append_for(
            &s,
            vec![to_event("a", "agent")],
            vec![ConsumerDeclaration::targeted("other")],
        )
        .await?;
    ensure!(
        !result.has_pending,
        "only 'other' is served and it has no work"
    );
    let result = cx
        .append_for(
            &s,
            vec![msg("b")],
            vec![ConsumerDeclaration::targeted("agent")],
        )
        .await?;
    ensure!(result.has_pending, "'agent' has a head");
    let all = cx.append(&s, vec![msg("c")]).await?;
    ensure!(all.has_pending, "without consumers every cursor is served");
    Ok(())
}

/// Dead-lettered heads do not count as pending.
pub(crate) async fn append_has_pending_ignores_dead_letters(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        cx.fail(&s, &head, Some(1)).await?.outcome,
        FailOutcome::DeadLettered
    );
    let result = cx.append(&s, vec![msg("b")]).await?;
    ensure!(!result.has_pending, "the only head is dead-lettered");
    Ok(())
}

/// Busy (claimed) heads still count as pending.
pub(crate) async fn append_has_pending_counts_busy_heads(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    cx.claim_heads(&s, "w1").await?;
    let result = cx.append(&s, vec![msg("b")]).await?;
    ensure!(result.has_pending, "a claimed head is still pending");
    Ok(())
}

/// Precedence: an empty batch returns before the clear check.
pub(crate) async fn append_empty_batch_precedes_origin_check(cx: Cx) -> CaseResult {
    let s = cleared_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        let options = AppendOptions {
            origin_index: Some(1),
            ..AppendOptions::default()
        };
        let result = cx.store.append(&s, vec![], options).await?;
        ensure_eq!(result.events, vec![]);
        ensure!(!result.has_pending, "nothing is pending after the clear");
    });
    Ok(())
}

/// Precedence: a full replay returns the stored rows even with an origin at or below the clear.
pub(crate) async fn append_replay_precedes_origin_check(cx: Cx) -> CaseResult {
    let s = cleared_session(&cx).await?;
    let stored = cx.append(&s, vec![msg("x")]).await?;
    let options = AppendOptions {
        origin_index: Some(2),
        ..AppendOptions::default()
    };
    let replay = cx.store.append(&s, vec![msg("x")], options).await?;
    ensure_eq!(replay.events, stored.events);
    Ok(())
}

/// Precedence: a full replay of a fenced append succeeds after its attempt
/// completed, so a worker retrying a lost response is not rejected.
pub(crate) async fn append_replay_precedes_cause_fence(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let out = msg("out").with_cause(head.cause());
    let stored = cx.append(&s, vec![out.clone()]).await?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_unchanged!(cx, &s, {
        let replay = cx.append(&s, vec![out]).await?;
        ensure_eq!(replay.events, stored.events);
    });
    Ok(())
}
