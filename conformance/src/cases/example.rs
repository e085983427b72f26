//! The guide's worked example (`a2_store_api::guide`), step by step.

use a2_store_api::{Cause, CompleteResult, ErrorCode, NewEvent, Target};
use serde_json::json;

use crate::support::*;

fn reply(id: &str) -> NewEvent {
    NewEvent::new("reply", json!({"text": "hi"}))
        .with_id(id)
        .with_target(Target::event("notifier"))
}

/// Steps 1–6: three lane events, one head at a time, a busy second worker,
/// a completion fanning out to a notifier, then replay, supersession and a
/// mismatched replay of the first completion.
pub(crate) async fn spec_worked_example(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    // 1. three `msg` events targeted at (agent, L1).
    let appended = cx
        .append(
            &s,
            vec![
                to_lane("m1", "agent", "L1"),
                to_lane("m2", "agent", "L1"),
                to_lane("m3", "agent", "L1"),
            ],
        )
        .await?;
    ensure_eq!(idx(&appended.events), vec![1, 2, 3]);
    ensure!(appended.has_pending, "step 1: has_pending");
    // 2. one head: index 1, attempt 1; log head 3.
    let (heads, dead, log_head) = claimed(cx.claim(&s, "w1").await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["1 agent/L1 #1"]));
    ensure_eq!(dead, vec![]);
    ensure_eq!(log_head, 3);
    let first = heads[0].clone();
    // 3. w2 is told to come back when the lease ends.
    ensure_eq!(busy(cx.claim(&s, "w2").await?)?, T0 + 1000);
    // 4. completing with reply-1 appends it at 4 with the attempt as cause.
    let events = completed(cx.complete(&s, &first, vec![reply("reply-1")]).await?)?;
    ensure_eq!(idx(&events), vec![4]);
    ensure_eq!(events[0].id, "reply-1");
    ensure_eq!(
        events[0].cause,
        Some(Cause {
            consumer: "agent".into(),
            lane: Some("L1".into()),
            index: 1,
            attempt: 1
        })
    );
    let stored_reply = events[0].clone();
    // 5. next claim: 2 on the lane and 4 for the notifier; then 3; then settled.
    let heads = cx.claim_heads(&s, "w1").await?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["2 agent/L1 #1", "4 notifier/- #1"])
    );
    for head in &heads {
        completed(cx.complete(&s, head, vec![]).await?)?;
    }
    let heads = cx.claim_heads(&s, "w1").await?;
    ensure_eq!(head_summaries(&heads), strs(&["3 agent/L1 #1"]));
    completed(cx.complete(&s, &heads[0], vec![]).await?)?;
    settled(cx.claim(&s, "w1").await?)?;
    // 6. replay, other attempt, other id.
    ensure_unchanged!(cx, &s, {
        ensure_eq!(
            completed(cx.complete(&s, &first, vec![reply("reply-1")]).await?)?,
            vec![stored_reply]
        );
        ensure_eq!(
            cx.complete_at(&s, &first.cursor_ref(), 2, vec![reply("reply-1")])
                .await?,
            CompleteResult::Superseded
        );
        ensure_code!(
            cx.complete(&s, &first, vec![reply("reply-other")]).await,
            ErrorCode::PartialDuplicateBatch
        );
    });
    Ok(())
}

/// Step 7: without the completion, a claim after the lease counts the expired
/// claim as a failure and hands index 1 out again as attempt 2.
pub(crate) async fn spec_worked_example_expired_claim_is_retried(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_lane("m1", "agent", "L1"),
            to_lane("m2", "agent", "L1"),
            to_lane("m3", "agent", "L1"),
        ],
    )
    .await?;
    cx.claim_heads(&s, "w1").await?;
    cx.advance(1000);
    let heads = cx.claim_heads(&s, "w2").await?;
    ensure_eq!(head_summaries(&heads), strs(&["1 agent/L1 #2"]));
    ensure_eq!(heads[0].dispatch.failure_count, 1);
    ensure_eq!(heads[0].dispatch.claim_holder.as_deref(), Some("w2"));
    Ok(())
}
