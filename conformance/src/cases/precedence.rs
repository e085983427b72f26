//! Which check wins when a call breaks several rules at once (CONTRACT:
//! validation first, then the order each operation lists).

use a2_store_api::{AppendOptions, ClearRequest, CompleteResult, ErrorCode, FailRequest, NewEvent};
use serde_json::json;

use crate::support::*;

/// Append: a stale cause is reported before a lane conflict.
pub(crate) async fn append_checks_cause_before_lane_conflicts(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![to_lane("a", "agent", "L1")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let agent = nth(&heads, 0)?;
    completed(cx.complete(&s, &agent, vec![]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(
                &s,
                vec![to_lane("b", "audit", "log").with_cause(agent.cause())]
            )
            .await,
            ErrorCode::SupersededAttempt
        );
    });
    Ok(())
}

/// Append: a cleared origin is reported before a lane conflict.
pub(crate) async fn append_checks_origin_before_lane_conflicts(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![msg("a")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    let options = AppendOptions {
        origin_index: Some(1),
        ..AppendOptions::default()
    };
    ensure_code!(
        cx.store
            .append(&s, vec![to_lane("b", "audit", "log")], options)
            .await,
        ErrorCode::SessionCleared
    );
    Ok(())
}

/// Complete: a superseded attempt is `Superseded` even when its returned ids are already stored.
pub(crate) async fn complete_supersession_precedes_duplicate_check(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("taken")])
        .await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL);
    cx.claim_heads(&s, "w2").await?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.complete(&s, &first, vec![msg("taken")]).await?,
            CompleteResult::Superseded
        );
    });
    Ok(())
}

/// Complete: invalid returned events are rejected before the clear check.
pub(crate) async fn complete_validates_before_clear_check(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    ensure_code!(
        cx.complete(&s, &head, vec![NewEvent::new("", json!(1))])
            .await,
        ErrorCode::InvalidInput
    );
    Ok(())
}

/// Fail: a negative retry delay is rejected before the index is looked up.
pub(crate) async fn fail_validates_before_lookup(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let request = FailRequest {
        incarnation: None,
        session_id: s.clone(),
        consumer: "agent".into(),
        lane: None,
        index: 42,
        attempt: 1,
        error: "e".into(),
        max_failures: None,
        retry_after_ms: Some(-5),
    };
    ensure_code!(
        cx.store.fail_attempt(request).await,
        ErrorCode::InvalidInput
    );
    Ok(())
}

/// Clear: `if_last_index` is checked only after the cause fence passes;
/// with a current cause a mismatched head is `NotCleared`.
pub(crate) async fn clear_checks_last_index_after_fence(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_unchanged!(cx, &s, {
        let result = cx
            .store
            .clear(ClearRequest {
                incarnation: None,
                session_id: s.clone(),
                if_last_index: Some(5),
                cause: Some(head.cause()),
            })
            .await?;
        ensure_eq!(result, a2_store_api::ClearResult::NotCleared { head: 1 });
    });
    Ok(())
}
