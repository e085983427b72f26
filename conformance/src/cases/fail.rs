//! `fail_attempt`, `dead_letters` and `redrive`.

use a2_store_api::{
    BulkRedrive, ClearRequest, ConsumerDeclaration, CursorRef, Dispatch, ErrorCode, FailOutcome,
    FailResult, RedriveAction, RedriveRequest, RedriveResult, RedrivenHead, Target,
};

use crate::support::*;

fn failed(outcome: FailOutcome, failure_count: u32) -> FailResult {
    FailResult::new(outcome, failure_count)
}

fn redrive(s: &str, consumer: &str, index: u64, action: RedriveAction) -> RedriveRequest {
    RedriveRequest {
        incarnation: None,
        lane: None,
        session_id: s.to_owned(),
        consumer: consumer.to_owned(),
        index,
        action,
        consumers: None,
    }
}

/// A failure counts, records error, time and attempt, and releases the holder.
pub(crate) async fn fail_counts_failure_and_releases_holder(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(30);
    ensure_eq!(
        cx.fail(&s, &head, Some(3)).await?,
        failed(FailOutcome::Failed, 1)
    );
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.dispatch, {
        let mut expected = Dispatch::default();
        expected.attempt_count = 1;
        expected.first_claimed_at = Some(T0);
        expected.last_claimed_at = Some(T0);
        expected.claim_holder = None;
        expected.claim_expires_at = None;
        expected.failure_count = 1;
        expected.last_failed_at = Some(T0 + 30);
        expected.last_failed_attempt = Some(1);
        expected.last_error = Some("boom".into());
        expected.failed_at = None;
        expected
    });
    let again = nth(&cx.claim_heads(&s, "w2").await?, 0)?;
    ensure_eq!(again.dispatch.attempt_count, 2);
    ensure_eq!(again.dispatch.failure_count, 1);
    ensure_eq!(again.dispatch.last_error.as_deref(), Some("boom"));
    Ok(())
}

/// With `retry_after_ms` the head is busy until the delay passes; claiming
/// it afterwards counts no extra failure.
pub(crate) async fn fail_with_retry_delay_keeps_head_busy(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(100);
    let mut request = cx.fail_req(&s, &head, "later");
    request.retry_after_ms = Some(500);
    ensure_eq!(
        cx.store.fail_attempt(request).await?,
        failed(FailOutcome::Failed, 1)
    );
    ensure_eq!(
        only(&cx.cursors(&s).await?)?.dispatch.claim_expires_at,
        Some(T0 + 600)
    );
    ensure_eq!(busy(cx.claim(&s, "w1").await?)?, T0 + 600);
    let pending = cx.append(&s, vec![]).await?;
    ensure!(
        pending.has_pending,
        "a head waiting out its retry delay is pending"
    );
    cx.advance(499);
    ensure_eq!(busy(cx.claim(&s, "w1").await?)?, T0 + 600);
    cx.advance(1);
    let again = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(again.dispatch.attempt_count, 2);
    ensure_eq!(again.dispatch.failure_count, 1);
    Ok(())
}

/// Reaching `max_failures` dead-letters the head (no retry delay), listed in `dead_letters`.
pub(crate) async fn fail_at_max_failures_dead_letters(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        cx.fail(&s, &head, Some(2)).await?,
        failed(FailOutcome::Failed, 1)
    );
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(7);
    let mut request = cx.fail_req(&s, &head, "again");
    request.max_failures = Some(2);
    request.retry_after_ms = Some(500);
    ensure_eq!(
        cx.store.fail_attempt(request).await?,
        failed(FailOutcome::DeadLettered, 2)
    );
    let dead = cx.store.dead_letters(&s).await?;
    ensure_eq!(head_summaries(&dead), strs(&["1 agent/L1 #2"]));
    let dispatch = &nth(&dead, 0)?.dispatch;
    ensure_eq!(dispatch.failed_at, Some(T0 + 7));
    ensure_eq!(dispatch.claim_expires_at, None);
    ensure_eq!(dispatch.claim_holder, None);
    ensure_eq!(dispatch.last_error.as_deref(), Some("again"));
    settled(cx.claim(&s, "w1").await?)?;
    ensure!(
        !cx.append(&s, vec![]).await?.has_pending,
        "a dead-lettered head is not pending"
    );
    Ok(())
}

/// Without `max_failures` explicit failures never dead-letter.
pub(crate) async fn fail_without_max_failures_never_dead_letters(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    for count in 1..=5u32 {
        let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
        ensure_eq!(
            cx.fail(&s, &head, None).await?,
            failed(FailOutcome::Failed, count)
        );
    }
    ensure_eq!(cx.store.dead_letters(&s).await?, vec![]);
    Ok(())
}

/// Repeating the same failure is idempotent: same outcome, same count, nothing changed.
pub(crate) async fn fail_repeat_is_idempotent(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), to_event("b", "agent")])
        .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let (one, two) = (nth(&heads, 0)?, nth(&heads, 1)?);
    ensure_eq!(
        cx.fail(&s, &one, Some(3)).await?,
        failed(FailOutcome::Failed, 1)
    );
    ensure_unchanged!(cx, &s, {
        cx.advance(5);
        ensure_eq!(
            cx.fail(&s, &one, Some(3)).await?,
            failed(FailOutcome::Failed, 1)
        );
    });
    ensure_eq!(
        cx.fail(&s, &two, Some(1)).await?,
        failed(FailOutcome::DeadLettered, 1)
    );
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.fail(&s, &two, Some(1)).await?,
            failed(FailOutcome::DeadLettered, 1)
        );
    });
    Ok(())
}

/// Failing an older attempt is `Superseded`, reporting the head's current failure count.
pub(crate) async fn fail_of_older_attempt_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let first = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(TTL);
    nth(&cx.claim_heads(&s, "w2").await?, 0)?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.fail(&s, &first, Some(5)).await?,
            failed(FailOutcome::Superseded, 1)
        );
    });
    Ok(())
}

/// Failing a completed head is `Superseded` with count 0.
pub(crate) async fn fail_after_completion_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.fail(&s, &head, None).await?,
            failed(FailOutcome::Superseded, 0)
        );
    });
    Ok(())
}

/// Failing at or below the clear is `Superseded` with count 0.
pub(crate) async fn fail_after_clear_is_superseded(cx: Cx) -> CaseResult {
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
        ensure_eq!(
            cx.fail(&s, &head, None).await?,
            failed(FailOutcome::Superseded, 0)
        );
    });
    Ok(())
}

/// Failing an index with no cursor and no event is `NoSuchEvent`; with an
/// event but no cursor, `Superseded`.
pub(crate) async fn fail_unknown_index_is_no_such_event(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &s, {
        let mut request = a2_store_api::FailRequest {
            incarnation: None,
            session_id: s.clone(),
            consumer: "agent".into(),
            lane: None,
            index: 5,
            attempt: 1,
            error: "boom".into(),
            max_failures: None,
            retry_after_ms: None,
        };
        ensure_code!(
            cx.store.fail_attempt(request.clone()).await,
            ErrorCode::NoSuchEvent
        );
        request.index = 1;
        ensure_eq!(
            cx.store.fail_attempt(request).await?,
            failed(FailOutcome::Superseded, 0)
        );
    });
    Ok(())
}

/// An attempt dead-lettered on expiry cannot be failed again: `Superseded`.
pub(crate) async fn fail_of_attempt_dead_lettered_on_expiry_is_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    cx.claim_heads(&s, "w1").await?;
    cx.advance(TTL);
    let request = a2_store_api::ClaimRequest {
        max_failures: Some(1),
        ..cx.req(&s, "w1")
    };
    let (_, dead, _) = claimed(cx.store.claim_available(request).await?)?;
    let dead = nth(&dead, 0)?;
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            cx.fail(&s, &dead, Some(1)).await?,
            failed(FailOutcome::Superseded, 1)
        );
    });
    Ok(())
}

/// Failing with a negative retry delay is `InvalidInput`.
pub(crate) async fn fail_with_negative_retry_delay_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_unchanged!(cx, &s, {
        let mut request = cx.fail_req(&s, &head, "x");
        request.retry_after_ms = Some(-1);
        ensure_code!(
            cx.store.fail_attempt(request).await,
            ErrorCode::InvalidInput
        );
    });
    Ok(())
}

/// `dead_letters` lists dead heads by `(index, consumer, lane)` with their bookkeeping.
pub(crate) async fn dead_letters_sorted_by_index_consumer_lane(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_event("a", "zed"),
            to_lane("b", "bob", "L2"),
            to_event("c", "bob").with_target(a2_store_api::Target::lane("bob", "L1")),
        ],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    for head in heads.iter().rev() {
        cx.fail(&s, head, Some(1)).await?;
    }
    ensure_eq!(
        head_summaries(&cx.store.dead_letters(&s).await?),
        strs(&["1 zed/- #1", "2 bob/L2 #1", "3 bob/- #1", "3 bob/L1 #1"])
    );
    Ok(())
}

/// `dead_letters` lists nothing at or below the clear.
pub(crate) async fn dead_letters_empty_after_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    ensure_eq!(cx.store.dead_letters(&s).await?.len(), 1);
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    ensure_eq!(cx.store.dead_letters(&s).await?, vec![]);
    Ok(())
}

/// Redrive `Retry` makes the head claimable again: failures reset, attempts kept.
pub(crate) async fn redrive_retry_keeps_attempt_count(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, None).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        cx.fail(&s, &head, Some(2)).await?,
        failed(FailOutcome::DeadLettered, 2)
    );
    let result = cx
        .store
        .redrive(redrive(&s, "agent", 1, RedriveAction::Retry))
        .await?;
    ensure_eq!(result, RedriveResult::new(true, true));
    let cursor = only(&cx.cursors(&s).await?)?;
    ensure_eq!(cursor.dispatch.failed_at, None);
    ensure_eq!(cursor.dispatch.failure_count, 0);
    ensure_eq!(cursor.dispatch.attempt_count, 2);
    ensure_eq!(cx.store.dead_letters(&s).await?, vec![]);
    let again = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(again.dispatch.attempt_count, 3);
    ensure_eq!(again.dispatch.failure_count, 0);
    Ok(())
}

/// Redrive `Skip` advances the cursor past the dead head as if processed.
pub(crate) async fn redrive_skip_advances_cursor(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let result = cx
        .store
        .redrive(redrive(&s, "agent", 1, RedriveAction::Skip))
        .await?;
    ensure_eq!(result, RedriveResult::new(true, true));
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=2"])
    );
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["2 agent/L1 #1"])
    );
    Ok(())
}

/// Skipping a dead event cursor finishes it; `has_pending` turns false.
pub(crate) async fn redrive_skip_finishes_event_cursor(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let result = cx
        .store
        .redrive(redrive(&s, "agent", 1, RedriveAction::Skip))
        .await?;
    ensure_eq!(result, RedriveResult::new(true, false));
    ensure_eq!(cx.cursors(&s).await?, vec![]);
    settled(cx.claim(&s, "w1").await?)
}

/// Redriving a head that is not dead-lettered, an unknown index, or another
/// consumer's head finds nothing: `redriven: false`, nothing changed.
pub(crate) async fn redrive_without_dead_head_is_not_redriven(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), to_event("b", "agent")])
        .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    cx.fail(&s, &nth(&heads, 0)?, Some(1)).await?;
    ensure_unchanged!(cx, &s, {
        for (consumer, index) in [("agent", 2), ("agent", 9), ("other", 1)] {
            for action in [RedriveAction::Retry, RedriveAction::Skip] {
                let result = cx
                    .store
                    .redrive(redrive(&s, consumer, index, action))
                    .await?;
                ensure_eq!(
                    result,
                    RedriveResult::new(false, true),
                    "redrive {consumer} {index} {action:?}"
                );
            }
        }
    });
    Ok(())
}

/// A consumer with several dead letters at one index (its event cursor and
/// two lanes) is redriven one at a time, the first in `(index, consumer,
/// lane)` order each time: the event cursor (`lane: None`) first, then the
/// lanes by name, whatever order the targets were given in.
pub(crate) async fn redrive_takes_the_first_dead_letter_at_an_index(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let event = msg("a")
        .with_target(a2_store_api::Target::lane("agent", "L2"))
        .with_target(a2_store_api::Target::event("agent"))
        .with_target(a2_store_api::Target::lane("agent", "L1"));
    cx.append(&s, vec![event]).await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let all = strs(&["1 agent/- #1", "1 agent/L1 #1", "1 agent/L2 #1"]);
    ensure_eq!(head_summaries(&heads), all);
    for head in &heads {
        ensure_eq!(
            cx.fail(&s, head, Some(1)).await?,
            failed(FailOutcome::DeadLettered, 1)
        );
    }
    ensure_eq!(head_summaries(&cx.store.dead_letters(&s).await?), all);

    // The event cursor first: skipping it finishes it.
    ensure_eq!(
        cx.store
            .redrive(redrive(&s, "agent", 1, RedriveAction::Skip))
            .await?,
        RedriveResult::new(true, false)
    );
    ensure_eq!(
        head_summaries(&cx.store.dead_letters(&s).await?),
        strs(&["1 agent/L1 #1", "1 agent/L2 #1"])
    );

    // Then lane L1: retried, it is claimable again.
    ensure_eq!(
        cx.store
            .redrive(redrive(&s, "agent", 1, RedriveAction::Retry))
            .await?,
        RedriveResult::new(true, true)
    );
    ensure_eq!(
        head_summaries(&cx.store.dead_letters(&s).await?),
        strs(&["1 agent/L2 #1"])
    );
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["1 agent/L1 #2"])
    );

    // Then lane L2, the last one.
    ensure_eq!(
        cx.store
            .redrive(redrive(&s, "agent", 1, RedriveAction::Skip))
            .await?,
        RedriveResult::new(true, true)
    );
    ensure_eq!(cx.store.dead_letters(&s).await?, vec![]);
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=0 head=1", "agent/L2 lane pos=1 head=-"])
    );
    ensure_eq!(
        cx.store
            .redrive(redrive(&s, "agent", 1, RedriveAction::Skip))
            .await?,
        RedriveResult::new(false, true)
    );
    Ok(())
}

/// A redrive's `has_pending` counts only the declared consumers.
pub(crate) async fn redrive_has_pending_respects_consumers(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), to_event("b", "other")])
        .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    cx.fail(&s, &nth(&heads, 0)?, Some(1)).await?;
    let request = RedriveRequest {
        consumers: Some(vec![ConsumerDeclaration::targeted("agent")]),
        ..redrive(&s, "agent", 1, RedriveAction::Skip)
    };
    ensure_eq!(
        cx.store.redrive(request).await?,
        RedriveResult::new(true, false)
    );
    Ok(())
}

/// A claim that expired without being claimed again can still be failed by its attempt.
pub(crate) async fn fail_after_unreclaimed_expiry_counts(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.advance(2 * TTL);
    ensure_eq!(
        cx.fail(&s, &head, Some(5)).await?,
        failed(FailOutcome::Failed, 1)
    );
    let again = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(again.dispatch.attempt_count, 2);
    ensure_eq!(again.dispatch.failure_count, 1);
    Ok(())
}

/// Dead letters carry the clear index once the session has been cleared.
pub(crate) async fn dead_letters_carry_clear_index_after_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    cx.append(&s, vec![to_event("b", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let dead = cx.store.dead_letters(&s).await?;
    ensure_eq!(head_summaries(&dead), strs(&["3 agent/- #1"]));
    ensure_eq!(nth(&dead, 0)?.clear_index, Some(2));
    Ok(())
}

/// A retried dead letter is claimed, completed and the lane moves on.
pub(crate) async fn redriven_head_completes_and_lane_advances(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    cx.store
        .redrive(redrive(&s, "agent", 1, RedriveAction::Retry))
        .await?;
    let again = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        head_summaries(std::slice::from_ref(&again)),
        strs(&["1 agent/L1 #2"])
    );
    let events = completed(cx.complete(&s, &again, vec![ev("reply", "r")]).await?)?;
    ensure_eq!(events[0].cause, Some(again.cause()));
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w1").await?),
        strs(&["2 agent/L1 #1"])
    );
    Ok(())
}

/// A redrive naming the lane takes exactly that cursor's dead letter at
/// the index; a lane with none there redrives nothing; `for_head` names the
/// head's lane.
pub(crate) async fn redrive_names_the_lane(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let event = msg("a")
        .with_target(Target::lane("agent", "L2"))
        .with_target(Target::event("agent"))
        .with_target(Target::lane("agent", "L1"));
    cx.append(&s, vec![event]).await?;
    for head in cx.claim_heads(&s, "w1").await? {
        cx.fail(&s, &head, Some(1)).await?;
    }
    let retry = redrive(&s, "agent", 1, RedriveAction::Retry).on_lane("L2");
    ensure_eq!(
        cx.store.redrive(retry).await?,
        RedriveResult::new(true, true)
    );
    ensure_eq!(
        head_summaries(&cx.store.dead_letters(&s).await?),
        strs(&["1 agent/- #1", "1 agent/L1 #1"])
    );
    ensure_unchanged!(cx, &s, {
        let nowhere = redrive(&s, "agent", 1, RedriveAction::Retry).on_lane("L9");
        ensure!(
            !cx.store.redrive(nowhere).await?.redriven,
            "no dead letter on L9"
        );
        ensure_code!(
            cx.store
                .redrive(redrive(&s, "agent", 1, RedriveAction::Retry).on_lane(""))
                .await,
            ErrorCode::InvalidInput
        );
    });
    let dead = cx.store.dead_letters(&s).await?;
    let lane = dead
        .iter()
        .find(|head| head.lane.is_some())
        .ok_or_else(|| Failure::Fail("no lane dead letter".to_owned()))?;
    ensure!(
        cx.store
            .redrive(RedriveRequest::for_head(lane, RedriveAction::Skip))
            .await?
            .redriven,
        "for_head takes its lane"
    );
    ensure_eq!(
        head_summaries(&cx.store.dead_letters(&s).await?),
        strs(&["1 agent/- #1"])
    );
    Ok(())
}

/// The dead letter `index consumer/lane` of `session`, dead-lettered at `failed_at`.
fn redriven(
    session: &str,
    consumer: &str,
    lane: Option<&str>,
    index: u64,
    failed_at: i64,
) -> RedrivenHead {
    RedrivenHead::new(
        session.to_owned(),
        CursorRef::new(consumer, lane, index),
        failed_at,
    )
}

/// `redrive_all` takes the dead letters matching every filter, by session,
/// index, consumer and lane, a page at a time (`more` while some are left),
/// and refuses an empty window, a limit of 0 or empty names.
pub(crate) async fn redrive_all_filters_and_pages(cx: Cx) -> CaseResult {
    let (a, b) = (cx.session_id("a"), cx.session_id("b"));
    let agent = cx.consumer("agent");
    let other = cx.consumer("other");
    cx.append(&a, vec![to_lane("x", &agent, "L"), to_event("y", &agent)])
        .await?;
    for head in cx.claim_heads(&a, "w").await? {
        cx.fail(&a, &head, Some(1)).await?;
    }
    cx.advance(100);
    cx.append(&b, vec![to_lane("x", &agent, "L"), to_event("y", &other)])
        .await?;
    for head in cx.claim_heads(&b, "w").await? {
        cx.fail(&b, &head, Some(1)).await?;
    }
    let bulk = |consumer: &str| BulkRedrive {
        consumer: Some(consumer.to_owned()),
        ..BulkRedrive::new(RedriveAction::Retry)
    };
    ensure_unchanged!(cx, &a, {
        for bad in [
            BulkRedrive {
                limit: Some(0),
                ..bulk(&agent)
            },
            BulkRedrive {
                dead_since_ms: Some(T0 + 5),
                dead_before_ms: Some(T0 + 5),
                ..bulk(&agent)
            },
            bulk(""),
            BulkRedrive {
                lane: Some(String::new()),
                ..bulk(&agent)
            },
            BulkRedrive {
                session_id: Some(String::new()),
                ..bulk(&agent)
            },
        ] {
            ensure_code!(cx.store.redrive_all(bad).await, ErrorCode::InvalidInput);
        }
    });
    let page = cx
        .store
        .redrive_all(BulkRedrive {
            limit: Some(2),
            ..bulk(&agent)
        })
        .await?;
    ensure_eq!(
        (page.redriven, page.more),
        (
            vec![
                redriven(&a, &agent, Some("L"), 1, T0),
                redriven(&a, &agent, None, 2, T0)
            ],
            true
        )
    );
    ensure_eq!(cx.store.dead_letters(&a).await?, vec![]);
    let since = cx
        .store
        .redrive_all(BulkRedrive {
            dead_since_ms: Some(T0 + 50),
            ..bulk(&agent)
        })
        .await?;
    ensure_eq!(
        (since.redriven, since.more),
        (vec![redriven(&b, &agent, Some("L"), 1, T0 + 100)], false)
    );
    let none = cx
        .store
        .redrive_all(BulkRedrive {
            session_id: Some(a.clone()),
            lane: Some("L".into()),
            ..bulk(&agent)
        })
        .await?;
    ensure_eq!((none.redriven, none.more), (vec![], false));
    let before = cx
        .store
        .redrive_all(BulkRedrive {
            dead_before_ms: Some(T0 + 100),
            ..bulk(&other)
        })
        .await?;
    ensure_eq!(before.redriven, vec![], "dead at T0 + 100, not before");
    let before = cx
        .store
        .redrive_all(BulkRedrive {
            dead_before_ms: Some(T0 + 101),
            ..bulk(&other)
        })
        .await?;
    ensure_eq!(
        before.redriven,
        vec![redriven(&b, &other, None, 2, T0 + 100)]
    );
    ensure_eq!(cx.store.dead_letters(&b).await?, vec![]);
    Ok(())
}

/// A bulk skip passes each dead letter over as `redrive` does: a lane moves
/// to its next index, which the work index finds.
pub(crate) async fn redrive_all_skips_and_lanes_move_on(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_lane("a", &agent, "L")]).await?;
    cx.append(&s, vec![to_lane("b", &agent, "L")]).await?;
    let head = cx.claim_heads(&s, "w").await?.remove(0);
    cx.fail(&s, &head, Some(1)).await?;
    let done = cx
        .store
        .redrive_all(BulkRedrive {
            consumer: Some(agent.clone()),
            session_id: Some(s.clone()),
            ..BulkRedrive::new(RedriveAction::Skip)
        })
        .await?;
    ensure_eq!((done.redriven.len(), done.more), (1, false));
    let claimed: Vec<_> = cx
        .store
        .claim_work(cx.work("w", &["agent"], 1))
        .await?
        .heads()
        .map(|(session, head)| (session.to_owned(), head.event.index))
        .collect();
    ensure_eq!(claimed, vec![(s.clone(), 2)]);
    Ok(())
}
