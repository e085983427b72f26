//! `clear` (marker, `if_last_index`, cause fence, cursor effects, id reuse,
//! attempts below the clear) and `reclaim`.

use a2_store_api::{
    ClearRequest, ClearResult, CompleteResult, ErrorCode, ReadOptions, StoredEvent,
    CLEAR_EVENT_TYPE, RECLAIM_BATCH,
};
use serde_json::json;

use crate::support::*;

fn request(s: &str) -> ClearRequest {
    ClearRequest {
        session_id: s.to_owned(),
        ..ClearRequest::default()
    }
}

fn marker(result: ClearResult) -> std::result::Result<StoredEvent, Failure> {
    match result {
        ClearResult::Cleared { marker } => Ok(marker),
        other => Err(Failure::Fail(format!("expected Cleared, got {other:?}"))),
    }
}

/// A clear appends the `a2.cleared` marker (payload null, no cause, generated
/// id, store time) after the head.
pub(crate) async fn clear_appends_marker_event(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    cx.advance(3);
    let mark = marker(cx.store.clear(request(&s)).await?)?;
    ensure_eq!(mark.index, 3);
    ensure_eq!(mark.event_type, CLEAR_EVENT_TYPE);
    ensure_eq!(mark.payload, json!(null));
    ensure_eq!(mark.cause, None);
    ensure_eq!(mark.created_at, T0 + 3);
    ensure_eq!(mark.session_id, s);
    ensure!(
        mark.id.starts_with(GENERATED),
        "the marker id {} did not come from the id generator",
        mark.id
    );
    let rows = cx.read_all(&s).await?;
    ensure_eq!(rows.last(), Some(&mark));
    Ok(())
}

/// Clearing a session never written makes the marker index 1.
pub(crate) async fn clear_of_new_session_marks_index_one(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let mark = marker(cx.store.clear(request(&s)).await?)?;
    ensure_eq!(mark.index, 1);
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![1]);
    Ok(())
}

/// `if_last_index` equal to the head clears.
pub(crate) async fn clear_with_matching_last_index_clears(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    let result = cx
        .store
        .clear(ClearRequest {
            if_last_index: Some(2),
            ..request(&s)
        })
        .await?;
    ensure_eq!(marker(result)?.index, 3);
    Ok(())
}

/// `if_last_index` different from the head is `NotCleared {head}`; nothing changes.
pub(crate) async fn clear_with_other_last_index_is_not_cleared(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    cx.claim_heads(&s, "w1").await?;
    ensure_unchanged!(cx, &s, {
        for stale in [1, 3] {
            let result = cx
                .store
                .clear(ClearRequest {
                    if_last_index: Some(stale),
                    ..request(&s)
                })
                .await?;
            ensure_eq!(result, ClearResult::NotCleared { head: 2 });
        }
    });
    Ok(())
}

/// A clear fenced by the current attempt clears.
pub(crate) async fn clear_fenced_by_current_cause_clears(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let result = cx
        .store
        .clear(ClearRequest {
            cause: Some(head.cause()),
            ..request(&s)
        })
        .await?;
    ensure_eq!(marker(result)?.index, 2);
    ensure_eq!(
        cx.complete(&s, &head, vec![]).await?,
        CompleteResult::Superseded
    );
    Ok(())
}

/// A clear fenced by a stale attempt is `SupersededAttempt`, checked before
/// `if_last_index`; nothing changes.
pub(crate) async fn clear_fenced_by_stale_cause_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL);
    cx.claim_heads(&s, "w2").await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.store
                .clear(ClearRequest {
                    cause: Some(first.cause()),
                    ..request(&s)
                })
                .await,
            ErrorCode::SupersededAttempt
        );
        ensure_code!(
            cx.store
                .clear(ClearRequest {
                    cause: Some(first.cause()),
                    if_last_index: Some(7),
                    ..request(&s)
                })
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// A clear drops event and lane cursors and parks log cursors at the marker
/// with no head and fresh bookkeeping.
pub(crate) async fn clear_drops_event_and_lane_cursors_parks_log_cursors(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![to_lane("a", "agent", "L1"), to_event("b", "notifier")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    cx.claim_heads(&s, "w1").await?;
    marker(cx.store.clear(request(&s)).await?)?;
    let cursors = cx.cursors(&s).await?;
    ensure_eq!(
        cursor_summaries(&cursors),
        strs(&["audit/log log pos=3 head=-"])
    );
    ensure_eq!(cursors[0].dispatch, a2_store_api::Dispatch::default());
    settled(cx.claim(&s, "w1").await?)?;
    ensure!(
        !cx.append(&s, vec![]).await?.has_pending,
        "nothing is pending after a clear"
    );
    Ok(())
}

/// A parked log cursor resumes with the next declaring append after the clear.
pub(crate) async fn log_cursor_resumes_after_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", None, false);
    cx.append_for(&s, vec![msg("a"), msg("b")], vec![audit.clone()])
        .await?;
    marker(cx.store.clear(request(&s)).await?)?;
    cx.append_for(&s, vec![msg("c")], vec![audit]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=3 head=4"])
    );
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(head.event.index, 4);
    ensure_eq!(head.clear_index, Some(3));
    ensure_eq!(head.dispatch.attempt_count, 1);
    Ok(())
}

/// Ids below the clear may be reused: the same id appends a new row, not a replay.
pub(crate) async fn ids_below_clear_are_reusable(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    marker(cx.store.clear(request(&s)).await?)?;
    let again = cx.append(&s, vec![ev("other", "a"), msg("b")]).await?;
    ensure_eq!(idx(&again.events), vec![4, 5]);
    ensure_eq!(again.events[0].event_type, "other");
    let replay = cx.append(&s, vec![ev("other", "a")]).await?;
    ensure_eq!(idx(&replay.events), vec![4]);
    Ok(())
}

/// Every attempt below the clear is superseded: complete, fail, append with cause, renew.
pub(crate) async fn attempts_below_clear_are_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let audit = log_consumer("audit", "log", None, false);
    cx.append_for(&s, vec![msg("a")], vec![audit.clone()])
        .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    marker(cx.store.clear(request(&s)).await?)?;
    cx.append_for(&s, vec![msg("b")], vec![audit]).await?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.complete(&s, &head, vec![]).await?,
            CompleteResult::Superseded
        );
        ensure_eq!(
            cx.fail(&s, &head, None).await?.outcome,
            a2_store_api::FailOutcome::Superseded
        );
        ensure_code!(
            cx.append(&s, vec![msg("late").with_cause(head.cause())])
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// Rows below the clear stay readable until reclaimed.
pub(crate) async fn rows_below_clear_stay_readable(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let stored = cx.append(&s, vec![msg("a"), msg("b")]).await?;
    let mark = marker(cx.store.clear(request(&s)).await?)?;
    let mut expected = stored.events;
    expected.push(mark);
    ensure_eq!(cx.read_all(&s).await?, expected);
    Ok(())
}

/// Reclaim on a session never cleared does nothing and is done.
pub(crate) async fn reclaim_without_clear_is_done(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let result = cx.store.reclaim(&s).await?;
    ensure_eq!((result.reclaimed, result.done), (0, true));
    cx.append(&s, vec![msg("a")]).await?;
    let result = cx.store.reclaim(&s).await?;
    ensure_eq!((result.reclaimed, result.done), (0, true));
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![1]);
    Ok(())
}

/// Reclaim deletes at most 256 rows per call below the marker, never the
/// marker, `done` once none remain; reads return only what remains.
pub(crate) async fn reclaim_deletes_in_batches_never_the_marker(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let rows: Vec<_> = (1..=600).map(|n| msg(&format!("e{n}"))).collect();
    cx.append(&s, rows).await?;
    let mark = marker(cx.store.clear(request(&s)).await?)?;
    ensure_eq!(mark.index, 601);
    ensure_eq!(RECLAIM_BATCH, 256);
    let mut calls = Vec::new();
    for _ in 0..4 {
        let result = cx.store.reclaim(&s).await?;
        calls.push((result.reclaimed, result.done));
        if calls.len() == 1 {
            let first = cx
                .store
                .read(
                    &s,
                    ReadOptions {
                        after: Some(0),
                        through: None,
                        limit: Some(3),
                    },
                )
                .await?;
            ensure_eq!(idx(&first), vec![257, 258, 259]);
            ensure_eq!(cx.read(&s, 100, Some(257)).await?.len(), 1);
        }
    }
    ensure_eq!(
        calls,
        vec![(256, false), (256, false), (88, true), (0, true)]
    );
    ensure_eq!(cx.read_all(&s).await?, vec![mark]);
    Ok(())
}

/// After reclaiming, appends continue after the marker and ids of reclaimed rows are free.
pub(crate) async fn appends_continue_after_reclaim(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    marker(cx.store.clear(request(&s)).await?)?;
    let result = cx.store.reclaim(&s).await?;
    ensure_eq!((result.reclaimed, result.done), (2, true));
    let next = cx.append(&s, vec![msg("a")]).await?;
    ensure_eq!(idx(&next.events), vec![4]);
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![3, 4]);
    Ok(())
}

/// Completing at an index whose row was reclaimed (no cursor) is `Superseded`
/// — it is at or below the clear.
pub(crate) async fn complete_of_reclaimed_index_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    marker(cx.store.clear(request(&s)).await?)?;
    cx.store.reclaim(&s).await?;
    ensure_eq!(
        cx.complete(&s, &head, vec![]).await?,
        CompleteResult::Superseded
    );
    Ok(())
}

/// The marker sits at the clear, not below it: its id is still taken, so an
/// event reusing it is a (conflicting) replay.
pub(crate) async fn marker_id_stays_taken_after_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let mark = marker(cx.store.clear(request(&s)).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg(&mark.id)]).await,
            ErrorCode::IdempotencyConflict
        );
    });
    Ok(())
}

/// A second clear moves the clear index to its own marker; the first marker
/// falls below it and its id becomes reusable.
pub(crate) async fn second_clear_moves_the_clear_index(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let first = marker(cx.store.clear(request(&s)).await?)?;
    cx.append(&s, vec![msg("b")]).await?;
    let second = marker(cx.store.clear(request(&s)).await?)?;
    ensure_eq!((first.index, second.index), (2, 4));
    let state = cx
        .store
        .read_state(&s, "r", a2_store_api::ReadStateOptions::default())
        .await?;
    ensure_eq!(state.clear_index, 4);
    let reused = cx
        .append(&s, vec![msg(&first.id), to_event("c", "agent")])
        .await?;
    ensure_eq!(idx(&reused.events), vec![5, 6]);
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(head.clear_index, Some(4));
    let result = cx.store.reclaim(&s).await?;
    ensure_eq!((result.reclaimed, result.done), (3, true));
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![4, 5, 6]);
    Ok(())
}
