//! `claim_available`: order, bookkeeping, busy and settled, `through`,
//! `exclude`, `limit`, holders, expired claims and dead-lettering on expiry.

use a2_store_api::{
    ClaimRequest, ClearRequest, ConsumerDeclaration, Dispatch, ErrorCode, NewEvent, Target,
};
use serde_json::json;

use crate::support::*;

/// Claimed heads come sorted by `(index, consumer, lane)`, lane `None` first.
pub(crate) async fn claim_returns_heads_by_index_consumer_lane(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            NewEvent::new("msg", json!(1))
                .with_target(Target::event("b"))
                .with_target(Target::lane("a", "L"))
                .with_target(Target::event("a")),
            to_event("x", "a"),
        ],
    )
    .await?;
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["1 a/- #1", "1 a/L #1", "1 b/- #1", "2 a/- #1"])
    );
    Ok(())
}

/// A claim returns the stored event, the cursor and fresh bookkeeping, and the log head.
pub(crate) async fn claim_sets_bookkeeping_and_reports_log_head(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let stored = cx
        .append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    let (heads, dead, head) = claimed(cx.claim(&s, "w1").await?)?;
    ensure_eq!(head, 2);
    ensure_eq!(dead, vec![]);
    let claimed_head = nth(&heads, 0)?;
    ensure_eq!(claimed_head.event, stored.events[0]);
    ensure_eq!(claimed_head.consumer, "agent");
    ensure_eq!(claimed_head.lane.as_deref(), Some("L1"));
    ensure_eq!(claimed_head.clear_index, None);
    ensure_eq!(claimed_head.dispatch, claimed_once("w1"));
    Ok(())
}

/// `expires_at_ms` sets the lease end directly.
pub(crate) async fn claim_with_expires_at_sets_lease_end(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let request = ClaimRequest {
        ttl_ms: None,
        expires_at_ms: Some(T0 + 5_000),
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(nth(&heads, 0)?.dispatch.claim_expires_at, Some(T0 + 5_000));
    ensure_eq!(busy(cx.claim(&s, "w2").await?)?, T0 + 5_000);
    Ok(())
}

/// With only busy heads a claim is `Busy` with the earliest expiry.
pub(crate) async fn claim_on_busy_heads_is_busy_with_earliest_expiry(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    cx.claim_heads(&s, "w1").await?;
    cx.advance(100);
    cx.append(&s, vec![to_event("b", "agent")]).await?;
    let request = ClaimRequest {
        ttl_ms: Some(300),
        ..cx.req(&s, "w1")
    };
    claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(busy(cx.claim(&s, "w2").await?)?, T0 + 400);
    cx.advance(300);
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w2").await?),
        strs(&["2 agent/- #2"])
    );
    ensure_eq!(busy(cx.claim(&s, "w3").await?)?, T0 + TTL);
    Ok(())
}

/// A claim with no head anywhere is `Settled`, on a new session and once all work is done.
pub(crate) async fn claim_without_work_is_settled(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    settled(cx.claim(&s, "w1").await?)?;
    cx.append(&s, vec![msg("plain")]).await?;
    settled(cx.claim(&s, "w1").await?)?;
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    settled(cx.claim(&s, "w1").await?)
}

/// A refused call leaves nothing behind: a claim made the moment it fails
/// returns every head a claim before it would have (a backend answers a
/// call only once its transaction, and every lock it took, has ended).
pub(crate) async fn claim_right_after_a_refused_call_returns_every_head(cx: Cx) -> CaseResult {
    /// Rounds: a race with a lock released late shows in some, not all.
    const ROUNDS: usize = 40;
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let mut head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    for round in 0..ROUNDS {
        let reply = to_lane(&format!("r{round}"), "agent", "L1");
        let next = completed(cx.complete(&s, &head, vec![reply]).await?)?;
        let next_index = idx(&next)
            .first()
            .copied()
            .ok_or_else(|| Failure::Fail("the completion returned no event".into()))?;
        // Refused on the cursor just completed, alternately a replay with
        // another batch and an append caused by the finished attempt.
        if round % 2 == 0 {
            ensure_code!(
                cx.complete(&s, &head, vec![ev("reply", &format!("x{round}"))])
                    .await,
                ErrorCode::PartialDuplicateBatch
            );
        } else {
            ensure_code!(
                cx.append(&s, vec![msg(&format!("x{round}")).with_cause(head.cause())])
                    .await,
                ErrorCode::SupersededAttempt
            );
        }
        let heads = cx.claim_heads(&s, "w1").await?;
        ensure_eq!(
            head_summaries(&heads),
            vec![format!("{next_index} agent/L1 #1")]
        );
        head = nth(&heads, 0)?;
    }
    Ok(())
}

/// Heads above `through` are skipped (and not counted as busy).
pub(crate) async fn claim_skips_heads_above_through(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_event("a", "agent"),
            to_event("b", "agent"),
            to_event("c", "agent"),
        ],
    )
    .await?;
    let request = ClaimRequest {
        through: Some(2),
        ..cx.req(&s, "w1")
    };
    let (heads, _, head) = claimed(cx.store.claim_available(request.clone()).await?)?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["1 agent/- #1", "2 agent/- #1"])
    );
    ensure_eq!(head, 3);
    ensure_eq!(busy(cx.store.claim_available(request).await?)?, T0 + TTL);
    let none_below = ClaimRequest {
        through: Some(0),
        ..cx.req(&s, "w1")
    };
    settled(cx.store.claim_available(none_below).await?)?;
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["3 agent/- #1"])
    );
    Ok(())
}

/// An excluded event cursor is skipped by its index; other event cursors are not.
pub(crate) async fn claim_excludes_event_cursor_by_index(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), to_event("b", "agent")])
        .await?;
    let request = ClaimRequest {
        exclude: vec![at("agent", None, 1)],
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request.clone()).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["2 agent/- #1"]));
    ensure_eq!(busy(cx.store.claim_available(request).await?)?, T0 + TTL);
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["1 agent/- #1"])
    );
    Ok(())
}

/// An excluded lane cursor is skipped whatever index the exclude ref names.
pub(crate) async fn claim_excludes_lane_cursor_whatever_its_head(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L2")],
    )
    .await?;
    let request = ClaimRequest {
        exclude: vec![at("agent", Some("L1"), 99)],
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["2 agent/L2 #1"]));
    Ok(())
}

/// An excluded log cursor is skipped whatever index the exclude ref names.
pub(crate) async fn claim_excludes_log_cursor_whatever_its_head(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![to_event("a", "agent")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    let request = ClaimRequest {
        exclude: vec![at("audit", Some("log"), 7)],
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["1 agent/- #1"]));
    Ok(())
}

/// `limit` claims the lowest `(index, consumer)` heads; the rest stay claimable.
pub(crate) async fn claim_limit_takes_lowest_and_leaves_rest(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_event("a", "zed"),
            to_event("b", "agent"),
            msg("c")
                .with_target(Target::event("bob"))
                .with_target(Target::event("al")),
        ],
    )
    .await?;
    let request = ClaimRequest {
        limit: Some(2),
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request.clone()).await?)?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["1 zed/- #1", "2 agent/- #1"])
    );
    let untouched = cx.cursors(&s).await?;
    ensure_eq!(
        untouched
            .iter()
            .filter(|cursor| cursor.dispatch.attempt_count == 0)
            .count(),
        2
    );
    let (heads, _, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["3 al/- #1", "3 bob/- #1"]));
    Ok(())
}

/// A claim serving some consumers takes their heads in the same
/// `(index, consumer, lane)` order: at one index, the least consumer name
/// first, then lane `None`, then lanes by name, whatever order the event
/// named its targets in.
pub(crate) async fn served_claim_orders_ties_by_consumer_then_lane(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![msg("m")
            .with_target(Target::lane("zed", "L2"))
            .with_target(Target::lane("bob", "L9"))
            .with_target(Target::event("zed"))
            .with_target(Target::lane("zed", "L1"))
            .with_target(Target::event("bob"))
            .with_target(Target::event("amy"))],
    )
    .await?;
    let served = Some(vec![
        ConsumerDeclaration::targeted("zed"),
        ConsumerDeclaration::targeted("bob"),
    ]);
    let one = ClaimRequest {
        limit: Some(1),
        consumers: served.clone(),
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(one).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["1 bob/- #1"]));
    let rest = ClaimRequest {
        consumers: served,
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(rest).await?)?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["1 bob/L9 #1", "1 zed/- #1", "1 zed/L1 #1", "1 zed/L2 #1"])
    );
    Ok(())
}

/// A busy head is not handed to another holder, nor again to its own holder.
pub(crate) async fn claim_never_hands_busy_head_to_anyone(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    cx.claim_heads(&s, "w1").await?;
    ensure_eq!(busy(cx.claim(&s, "w2").await?)?, T0 + TTL);
    ensure_eq!(busy(cx.claim(&s, "w1").await?)?, T0 + TTL);
    cx.advance(TTL - 1);
    ensure_eq!(busy(cx.claim(&s, "w2").await?)?, T0 + TTL);
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.dispatch.attempt_count, 1);
    ensure_eq!(cursor.dispatch.claim_holder.as_deref(), Some("w1"));
    Ok(())
}

/// An expired claim is handed out again as the next attempt, counting one failure.
pub(crate) async fn expired_claim_counts_failure_and_is_reclaimed(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    cx.claim_heads(&s, "w1").await?;
    cx.advance(TTL);
    let head = nth(&cx.claim_heads(&s, "w2").await?, 0)?;
    ensure_eq!(head.dispatch, {
        let mut expected = Dispatch::default();
        expected.attempt_count = 2;
        expected.first_claimed_at = Some(T0);
        expected.last_claimed_at = Some(T0 + TTL);
        expected.claim_holder = Some("w2".into());
        expected.claim_expires_at = Some(T0 + 2 * TTL);
        expected.failure_count = 1;
        expected
    });
    Ok(())
}

/// An expired claim reaching `max_failures` is dead-lettered, reported apart
/// from the claimed heads, and no longer claimable or pending.
pub(crate) async fn expired_claim_at_max_failures_is_dead_lettered(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    cx.claim_heads(&s, "w1").await?;
    cx.advance(TTL);
    let request = ClaimRequest {
        max_failures: Some(1),
        ..cx.req(&s, "w2")
    };
    let (heads, dead, log_head) = claimed(cx.store.claim_available(request.clone()).await?)?;
    ensure_eq!(head_summaries(&heads), Vec::<String>::new());
    ensure_eq!(log_head, 1);
    let dead_head = nth(&dead, 0)?;
    ensure_eq!(head_summaries(&dead), strs(&["1 agent/L1 #2"]));
    ensure_eq!(dead_head.dispatch, {
        let mut expected = Dispatch::default();
        expected.attempt_count = 2;
        expected.first_claimed_at = Some(T0);
        expected.last_claimed_at = Some(T0);
        expected.claim_holder = None;
        expected.claim_expires_at = None;
        expected.failure_count = 1;
        expected.last_failed_at = None;
        expected.failed_at = Some(T0 + TTL);
        expected
    });
    ensure_eq!(cx.store.dead_letters(&s).await?, dead);
    settled(cx.store.claim_available(request).await?)?;
    let result = cx.append(&s, vec![]).await?;
    ensure!(!result.has_pending, "a dead-lettered head is not pending");
    Ok(())
}

/// Dead-lettering on expiry does not count against `limit`.
pub(crate) async fn dead_letter_on_expiry_not_counted_against_limit(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    cx.claim_heads(&s, "w1").await?;
    cx.advance(TTL);
    cx.append(&s, vec![to_event("b", "agent"), to_event("c", "agent")])
        .await?;
    let request = ClaimRequest {
        max_failures: Some(1),
        limit: Some(1),
        ..cx.req(&s, "w2")
    };
    let (heads, dead, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(head_summaries(&dead), strs(&["1 agent/- #2"]));
    ensure_eq!(head_summaries(&heads), strs(&["2 agent/- #1"]));
    Ok(())
}

/// Without `max_failures` expired claims are retried forever, counting failures.
pub(crate) async fn claim_without_max_failures_never_dead_letters(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    for attempt in 1..=4u32 {
        let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
        ensure_eq!(head.dispatch.attempt_count, attempt);
        ensure_eq!(head.dispatch.failure_count, attempt - 1);
        cx.advance(TTL);
    }
    ensure_eq!(cx.store.dead_letters(&s).await?, vec![]);
    Ok(())
}

/// After a clear, claimed heads carry the clear index; before, none.
pub(crate) async fn claimed_heads_carry_clear_index_after_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    ensure_eq!(nth(&cx.claim_heads(&s, "w1").await?, 0)?.clear_index, None);
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    cx.append(&s, vec![to_event("b", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(head.event.index, 3);
    ensure_eq!(head.clear_index, Some(2));
    Ok(())
}

/// A claim in one session never touches another session's cursors.
pub(crate) async fn claims_are_per_session(cx: Cx) -> CaseResult {
    let (s1, s2) = (cx.session_id("one"), cx.session_id("two"));
    cx.append(&s1, vec![to_event("a", "agent")]).await?;
    cx.append(&s2, vec![to_event("a", "agent")]).await?;
    cx.claim_heads(&s1, "w1").await?;
    let untouched = only(&cx.cursors(&s2).await?)?;
    ensure_eq!(untouched.dispatch.attempt_count, 0);
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s2, "w2").await?),
        strs(&["1 agent/- #1"])
    );
    Ok(())
}

/// `retry_at` considers only candidates: busy heads that are excluded, above
/// `through` or unserved do not count.
pub(crate) async fn busy_retry_at_ignores_skipped_heads(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), to_event("b", "other")])
        .await?;
    let short = ClaimRequest {
        ttl_ms: Some(100),
        limit: Some(1),
        ..cx.req(&s, "w1")
    };
    ensure_eq!(
        head_summaries(&claimed(cx.store.claim_available(short).await?)?.0),
        strs(&["1 agent/- #1"])
    );
    cx.claim_heads(&s, "w1").await?;
    let skip_first = ClaimRequest {
        exclude: vec![at("agent", None, 1)],
        ..cx.req(&s, "w2")
    };
    ensure_eq!(busy(cx.store.claim_available(skip_first).await?)?, T0 + TTL);
    let only_first = ClaimRequest {
        through: Some(1),
        ..cx.req(&s, "w2")
    };
    ensure_eq!(busy(cx.store.claim_available(only_first).await?)?, T0 + 100);
    let only_other = ClaimRequest {
        consumers: Some(vec![a2_store_api::ConsumerDeclaration::targeted("other")]),
        ..cx.req(&s, "w2")
    };
    ensure_eq!(busy(cx.store.claim_available(only_other).await?)?, T0 + TTL);
    ensure_eq!(busy(cx.claim(&s, "w2").await?)?, T0 + 100);
    Ok(())
}

/// With `max_failures: 2` the first expired claim is retried and the second dead-letters.
pub(crate) async fn expired_claims_dead_letter_when_count_reaches_max(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let request = ClaimRequest {
        max_failures: Some(2),
        ..cx.req(&s, "w1")
    };
    for attempt in 1..=2u32 {
        let (heads, dead, _) = claimed(cx.store.claim_available(request.clone()).await?)?;
        ensure_eq!(dead, vec![]);
        ensure_eq!(nth(&heads, 0)?.dispatch.attempt_count, attempt);
        cx.advance(TTL);
    }
    let (heads, dead, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(heads, vec![]);
    ensure_eq!(head_summaries(&dead), strs(&["1 agent/- #3"]));
    ensure_eq!(nth(&dead, 0)?.dispatch.failure_count, 2);
    Ok(())
}
