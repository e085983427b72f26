//! A refused call draws no ids from the store's id generator: the next
//! generated id is the next counter value, as if the call never happened.

use a2_store_api::{
    AppendOptions, Cause, ClearRequest, ClearResult, CompleteRequest, CompleteResult, ErrorCode,
    FailOutcome, NewEvent, Target,
};
use serde_json::json;

use crate::support::*;

/// An event of type `ty` without an id: the store generates one.
fn unnamed(ty: &str) -> NewEvent {
    NewEvent::new(ty, json!(0))
}

/// The `n`th id the suite's counter generator hands out.
fn nth_generated(n: u64) -> String {
    format!("{GENERATED}{n}")
}

/// Appends one unnamed event and insists its generated id is counter value `n`.
async fn next_id_is(cx: &Cx, s: &str, n: u64) -> CaseResult {
    let result = cx.append(s, vec![unnamed("msg")]).await?;
    ensure_eq!(ids(&result.events), vec![nth_generated(n)]);
    Ok(())
}

/// An append refused for a target on an existing log lane draws no ids,
/// though its other events have none.
pub(crate) async fn lane_conflict_append_draws_no_ids(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let first = cx
        .append_for(
            &s,
            vec![unnamed("msg")],
            vec![log_consumer("audit", "log", None, false)],
        )
        .await?;
    ensure_eq!(ids(&first.events), vec![nth_generated(1)]);
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(
                &s,
                vec![
                    unnamed("msg").with_target(Target::lane("audit", "log")),
                    unnamed("msg"),
                ],
            )
            .await,
            ErrorCode::InvalidInput
        );
    });
    next_id_is(&cx, &s, 2).await
}

/// An append refused as a partial duplicate draws no ids for its unnamed events.
pub(crate) async fn partial_duplicate_append_draws_no_ids(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("a"), unnamed("msg")]).await,
            ErrorCode::PartialDuplicateBatch
        );
    });
    next_id_is(&cx, &s, 1).await
}

/// An append refused for a superseded cause draws no ids.
pub(crate) async fn superseded_cause_append_draws_no_ids(cx: Cx) -> CaseResult {
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
            cx.append(&s, vec![unnamed("msg").with_cause(cause), unnamed("msg")])
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    next_id_is(&cx, &s, 1).await
}

/// An append refused because its origin is at or below the clear draws no ids.
pub(crate) async fn cleared_origin_append_draws_no_ids(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let clear = cx
        .store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    match clear {
        ClearResult::Cleared { marker } => ensure_eq!(marker.id, nth_generated(1)),
        other => return Err(Failure::Fail(format!("expected Cleared, got {other:?}"))),
    }
    ensure_unchanged!(cx, &s, {
        let options = AppendOptions {
            origin_index: Some(2),
            ..AppendOptions::default()
        };
        ensure_code!(
            cx.store.append(&s, vec![unnamed("msg")], options).await,
            ErrorCode::SessionCleared
        );
    });
    next_id_is(&cx, &s, 2).await
}

/// A superseded completion draws no ids for its unnamed returned events.
pub(crate) async fn superseded_completion_draws_no_ids(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(cx.fail(&s, &head, None).await?.outcome, FailOutcome::Failed);
    ensure_unchanged!(cx, &s, {
        let result = cx
            .complete(&s, &head, vec![unnamed("reply"), unnamed("reply")])
            .await?;
        ensure_eq!(result, CompleteResult::Superseded);
    });
    next_id_is(&cx, &s, 1).await
}

/// A completion refused for returning an event targeted at an existing log
/// lane draws no ids for its unnamed returned events.
pub(crate) async fn lane_conflict_completion_draws_no_ids(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![to_lane("a", "agent", "L1")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let head = heads
        .iter()
        .find(|head| head.consumer == "agent")
        .cloned()
        .ok_or_else(|| {
            Failure::Fail(format!(
                "agent/L1 was not claimed: {:?}",
                head_summaries(&heads)
            ))
        })?;
    ensure_unchanged!(cx, &s, {
        let request = CompleteRequest {
            incarnation: None,
            session_id: s.clone(),
            consumer: "agent".into(),
            lane: Some("L1".into()),
            index: 1,
            attempt: head.dispatch.attempt_count,
            events: vec![
                unnamed("reply"),
                unnamed("reply").with_target(Target::lane("audit", "log")),
            ],
            consumers: None,
        };
        ensure_code!(
            cx.store.complete_attempt(request).await,
            ErrorCode::InvalidInput
        );
    });
    next_id_is(&cx, &s, 1).await
}
