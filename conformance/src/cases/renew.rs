//! `renew_claims`: renewed, superseded, and neither.

use a2_store_api::{ClearRequest, ErrorCode, HeldClaim, RenewRequest, RenewResult};

use crate::support::*;

fn held(head: &a2_store_api::Head) -> HeldClaim {
    HeldClaim {
        cursor: head.cursor_ref(),
        attempt: head.dispatch.attempt_count,
    }
}

fn renew(s: &str, holder: &str, claims: Vec<HeldClaim>) -> RenewRequest {
    RenewRequest {
        incarnation: None,
        session_id: s.to_owned(),
        holder: holder.to_owned(),
        claims,
        ttl_ms: Some(TTL),
        expires_at_ms: None,
    }
}

fn neither() -> RenewResult {
    RenewResult::default()
}

/// A held, unexpired claim is renewed: its expiry moves to now + ttl.
pub(crate) async fn renew_extends_held_claim(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(500);
    let result = cx
        .store
        .renew_claims(renew(&s, "w1", vec![held(&head)]))
        .await?;
    ensure_eq!(ref_summaries(&result.renewed), strs(&["1 agent/L1"]));
    ensure_eq!(result.superseded, vec![]);
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.dispatch.claim_expires_at, Some(T0 + 500 + TTL));
    cx.advance(TTL - 1);
    ensure_eq!(busy(cx.claim(&s, "w2").await?)?, T0 + 500 + TTL);
    Ok(())
}

/// `expires_at_ms` sets the renewed lease end directly.
pub(crate) async fn renew_with_expires_at_sets_lease_end(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let request = RenewRequest {
        ttl_ms: None,
        expires_at_ms: Some(T0 + 9_000),
        ..renew(&s, "w1", vec![held(&head)])
    };
    let result = cx.store.renew_claims(request).await?;
    ensure_eq!(ref_summaries(&result.renewed), strs(&["1 agent/-"]));
    ensure_eq!(
        only(&cx.cursors(&s).await?)?.dispatch.claim_expires_at,
        Some(T0 + 9_000)
    );
    Ok(())
}

/// Another holder cannot renew a claim: neither renewed nor superseded, expiry kept.
pub(crate) async fn renew_by_other_holder_is_neither(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_unchanged!(cx, &s, {
        let result = cx
            .store
            .renew_claims(renew(&s, "w2", vec![held(&head)]))
            .await?;
        ensure_eq!(result, neither());
    });
    Ok(())
}

/// An expired claim cannot be renewed (neither), even by its holder.
pub(crate) async fn renew_of_expired_claim_is_neither(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL);
    ensure_unchanged!(cx, &s, {
        let result = cx
            .store
            .renew_claims(renew(&s, "w1", vec![held(&head)]))
            .await?;
        ensure_eq!(result, neither());
    });
    Ok(())
}

/// After its completion a lane head's claim is superseded.
pub(crate) async fn renew_after_completion_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    let result = cx
        .store
        .renew_claims(renew(&s, "w1", vec![held(&head)]))
        .await?;
    ensure_eq!(ref_summaries(&result.superseded), strs(&["1 agent/L1"]));
    ensure_eq!(result.renewed, vec![]);
    Ok(())
}

/// A finished event cursor's claim is superseded.
pub(crate) async fn renew_of_finished_event_cursor_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    let result = cx
        .store
        .renew_claims(renew(&s, "w1", vec![held(&head)]))
        .await?;
    ensure_eq!(ref_summaries(&result.superseded), strs(&["1 agent/-"]));
    ensure_eq!(result.renewed, vec![]);
    Ok(())
}

/// A claim at or below the clear is superseded.
pub(crate) async fn renew_after_clear_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    let result = cx
        .store
        .renew_claims(renew(&s, "w1", vec![held(&head)]))
        .await?;
    ensure_eq!(ref_summaries(&result.superseded), strs(&["1 agent/-"]));
    ensure_eq!(result.renewed, vec![]);
    Ok(())
}

/// A claim whose head has a newer attempt is superseded.
pub(crate) async fn renew_of_older_attempt_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL);
    let second = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(second.dispatch.attempt_count, 2);
    ensure_unchanged!(cx, &s, {
        let result = cx
            .store
            .renew_claims(renew(&s, "w1", vec![held(&first)]))
            .await?;
        ensure_eq!(ref_summaries(&result.superseded), strs(&["1 agent/L1"]));
        ensure_eq!(result.renewed, vec![]);
    });
    Ok(())
}

/// A ref the lane has not reached yet is neither renewed nor superseded.
pub(crate) async fn renew_of_index_not_reached_is_neither(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    cx.claim_heads(&s, "w1").await?;
    let claim = HeldClaim {
        cursor: at("agent", Some("L1"), 2),
        attempt: 1,
    };
    let result = cx.store.renew_claims(renew(&s, "w1", vec![claim])).await?;
    ensure_eq!(result, neither());
    Ok(())
}

/// A ref naming no cursor is neither renewed nor superseded.
pub(crate) async fn renew_of_unknown_cursor_is_neither(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let claims = vec![
        HeldClaim {
            cursor: at("ghost", Some("L"), 1),
            attempt: 1,
        },
        HeldClaim {
            cursor: at("ghost", None, 1),
            attempt: 1,
        },
    ];
    let result = cx.store.renew_claims(renew(&s, "w1", claims)).await?;
    ensure_eq!(result, neither());
    Ok(())
}

/// A dead-lettered head's claim is neither renewed nor superseded.
pub(crate) async fn renew_of_dead_lettered_head_is_neither(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let result = cx
        .store
        .renew_claims(renew(&s, "w1", vec![held(&head)]))
        .await?;
    ensure_eq!(result, neither());
    Ok(())
}

/// Renewed and superseded refs are reported in `(index, consumer, lane)` order.
pub(crate) async fn renew_reports_refs_in_index_order(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_event("a", "b"),
            to_event("b", "a"),
            to_event("c", "a"),
            to_event("d", "a"),
        ],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    completed(cx.complete(&s, &nth(&heads, 2)?, vec![]).await?)?;
    completed(cx.complete(&s, &nth(&heads, 0)?, vec![]).await?)?;
    let claims: Vec<HeldClaim> = heads.iter().rev().map(held).collect();
    let result = cx.store.renew_claims(renew(&s, "w1", claims)).await?;
    ensure_eq!(ref_summaries(&result.renewed), strs(&["2 a/-", "4 a/-"]));
    ensure_eq!(ref_summaries(&result.superseded), strs(&["1 b/-", "3 a/-"]));
    Ok(())
}

/// Renewing with an invalid lease (both, neither, non-positive ttl) is `InvalidInput`.
pub(crate) async fn renew_with_invalid_lease_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_unchanged!(cx, &s, {
        for (ttl_ms, expires_at_ms) in [
            (None, None),
            (Some(TTL), Some(T0 + TTL)),
            (Some(0), None),
            (Some(-5), None),
        ] {
            let request = RenewRequest {
                ttl_ms,
                expires_at_ms,
                ..renew(&s, "w1", vec![held(&head)])
            };
            ensure_code!(
                cx.store.renew_claims(request).await,
                ErrorCode::InvalidInput
            );
        }
    });
    Ok(())
}

/// A failed (released) claim cannot be renewed: neither.
pub(crate) async fn renew_after_fail_is_neither(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, None).await?;
    ensure_unchanged!(cx, &s, {
        let result = cx
            .store
            .renew_claims(renew(&s, "w1", vec![held(&head)]))
            .await?;
        ensure_eq!(result, neither());
    });
    Ok(())
}

/// A lease handed over after expiry supersedes the old holder everywhere
/// (renew, complete, fail, fenced append) while the new holder proceeds.
pub(crate) async fn lease_handover_supersedes_the_old_holder(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let old = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL / 2);
    let result = cx
        .store
        .renew_claims(renew(&s, "w1", vec![held(&old)]))
        .await?;
    ensure_eq!(ref_summaries(&result.renewed), strs(&["1 agent/L1"]));
    cx.advance(TTL);
    let new = nth(&cx.claim_heads(&s, "w2").await?, 0)?;
    ensure_eq!(new.dispatch.attempt_count, 2);
    ensure_unchanged!(cx, &s, {
        let result = cx
            .store
            .renew_claims(renew(&s, "w1", vec![held(&old)]))
            .await?;
        ensure_eq!(ref_summaries(&result.superseded), strs(&["1 agent/L1"]));
        ensure_eq!(
            cx.complete(&s, &old, vec![]).await?,
            a2_store_api::CompleteResult::Superseded
        );
        ensure_eq!(
            cx.fail(&s, &old, None).await?.outcome,
            a2_store_api::FailOutcome::Superseded
        );
        ensure_code!(
            cx.append(&s, vec![msg("late").with_cause(old.cause())])
                .await,
            ErrorCode::SupersededAttempt
        );
    });
    let result = cx
        .store
        .renew_claims(renew(&s, "w2", vec![held(&new)]))
        .await?;
    ensure_eq!(ref_summaries(&result.renewed), strs(&["1 agent/L1"]));
    completed(cx.complete(&s, &new, vec![]).await?)?;
    Ok(())
}
