//! Declarations refresh the `types` of existing log cursors on every call
//! that succeeds, whatever path it takes (empty batch, replay, superseded or
//! replayed completion, redrive that finds nothing, claim, `wake_log`); a
//! call that fails refreshes nothing, and neither does a completion naming
//! the incarnation from before a delete.

use a2_store_api::{
    ClaimRequest, CompleteRequest, CompleteResult, ConsumerDeclaration, DeleteSessionRequest,
    ErrorCode, FailOutcome, RedriveAction, RedriveRequest,
};

use crate::support::*;

/// The `audit` log consumer on lane `log`, taking `types`.
fn audit(types: &[&str]) -> ConsumerDeclaration {
    log_consumer("audit", "log", Some(types), false)
}

/// The batch every case starts with: types `a`, `b`, `a` at indexes 1..=3.
fn batch() -> Vec<a2_store_api::NewEvent> {
    vec![ev("a", "1"), ev("b", "2"), ev("a", "3")]
}

/// A session whose `(audit, log)` cursor takes `["a"]`, at head 1.
async fn session_taking_a(cx: &Cx) -> std::result::Result<String, Failure> {
    let s = cx.session_id("s");
    cx.append_for(&s, batch(), vec![audit(&["a"])]).await?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=0 head=1"])
    );
    Ok(s)
}

/// The `types` of the session's only cursor and its summary.
async fn only_types(
    cx: &Cx,
    s: &str,
) -> std::result::Result<(Option<Vec<String>>, Vec<String>), Failure> {
    let cursor = only(&cx.cursors(s).await?)?;
    Ok((cursor.types.clone(), cursor_summaries(&[cursor])))
}

/// A completion request on `(audit, log, index)` with `attempt`, no returned
/// events, declaring `consumers`.
fn complete_audit(
    s: &str,
    index: u64,
    attempt: u32,
    consumers: Vec<ConsumerDeclaration>,
) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: s.to_owned(),
        consumer: "audit".into(),
        lane: Some("log".into()),
        index,
        attempt,
        events: vec![],
        consumers: Some(consumers),
    }
}

/// An empty append's declarations refresh the log cursor's types; its head is kept.
pub(crate) async fn empty_append_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let result = cx.append_for(&s, vec![], vec![audit(&["b"])]).await?;
    ensure_eq!(result.events, vec![]);
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["b"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    Ok(())
}

/// An idempotent replay's declarations refresh the log cursor's types; no row is added.
pub(crate) async fn replay_append_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let result = cx.append_for(&s, batch(), vec![audit(&["b"])]).await?;
    ensure_eq!(idx(&result.events), vec![1, 2, 3]);
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![1, 2, 3]);
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["b"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    Ok(())
}

/// A superseded completion's declarations refresh the log cursor's types;
/// nothing else changes.
pub(crate) async fn superseded_completion_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(cx.fail(&s, &head, None).await?.outcome, FailOutcome::Failed);
    let result = cx
        .store
        .complete_attempt(complete_audit(
            &s,
            1,
            head.dispatch.attempt_count,
            vec![audit(&["b"])],
        ))
        .await?;
    ensure_eq!(result, CompleteResult::Superseded);
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["b"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    Ok(())
}

/// A completion naming the incarnation from before a delete is superseded
/// and changes nothing, its declarations included: the log cursor of the
/// session recreated under the same id keeps the types its own append
/// declared, whether the stale completion returns events or not (the
/// incarnation fence comes before the declarations' refresh).
pub(crate) async fn stale_incarnation_completion_declaration_refreshes_nothing(
    cx: Cx,
) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let old = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure_eq!(
        head_summaries(std::slice::from_ref(&old)),
        strs(&["1 audit/log #1"])
    );
    let mut request = DeleteSessionRequest::new(&s);
    request.force = true;
    cx.store.delete_session(request).await?;
    cx.append_for(&s, batch(), vec![audit(&["a"])]).await?;
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["a"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    ensure_unchanged!(
        cx,
        &s,
        {
            let quiet = CompleteRequest::for_head(&old, vec![]).with_consumers(vec![audit(&["b"])]);
            ensure_eq!(
                cx.store.complete_attempt(quiet).await?,
                CompleteResult::Superseded
            );
        },
        {
            let returning = CompleteRequest::for_head(&old, vec![ev("b", "late")])
                .with_consumers(vec![audit(&["b"])]);
            ensure_eq!(
                cx.store.complete_attempt(returning).await?,
                CompleteResult::Superseded
            );
        },
    );
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["a"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    // The new incarnation's own completion still refreshes them.
    let new = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    ensure!(new.incarnation != old.incarnation, "{new:?} / {old:?}");
    let current = CompleteRequest::for_head(&new, vec![]).with_consumers(vec![audit(&["b"])]);
    completed(cx.store.complete_attempt(current).await?)?;
    ensure_eq!(only_types(&cx, &s).await?.0, Some(strs(&["b"])));
    Ok(())
}

/// A replayed completion's declarations refresh the log cursor's types; its
/// current head is kept.
pub(crate) async fn replayed_completion_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["audit/log log pos=1 head=3"])
    );
    let replay = cx
        .store
        .complete_attempt(complete_audit(
            &s,
            1,
            head.dispatch.attempt_count,
            vec![audit(&["b"])],
        ))
        .await?;
    ensure_eq!(completed(replay)?, vec![]);
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["b"])));
    ensure_eq!(summary, strs(&["audit/log log pos=1 head=3"]));
    Ok(())
}

/// A redrive that finds no dead letter still refreshes the log cursor's types.
pub(crate) async fn unredriven_redrive_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let result = cx
        .store
        .redrive(RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: s.clone(),
            consumer: "audit".into(),
            index: 1,
            action: RedriveAction::Retry,
            consumers: Some(vec![audit(&["b"])]),
        })
        .await?;
    ensure!(!result.redriven, "no head is dead-lettered: {result:?}");
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["b"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    Ok(())
}

/// A claim's declarations refresh the log cursor's types, whether it claims
/// (`Claimed`) or finds the head busy (`Busy`).
pub(crate) async fn claim_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let request = ClaimRequest {
        consumers: Some(vec![audit(&["b"])]),
        ..cx.req(&s, "w1")
    };
    let (heads, _, _) = claimed(cx.store.claim_available(request).await?)?;
    ensure_eq!(head_summaries(&heads), strs(&["1 audit/log #1"]));
    ensure_eq!(only_types(&cx, &s).await?.0, Some(strs(&["b"])));
    let request = ClaimRequest {
        consumers: Some(vec![audit(&["x"])]),
        ..cx.req(&s, "w2")
    };
    ensure_eq!(
        busy(cx.store.claim_available(request).await?)?,
        cx.now() + TTL
    );
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["x"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    Ok(())
}

/// `wake_log` on a cursor that has a head refreshes its types and keeps the head.
pub(crate) async fn wake_log_declaration_refreshes_log_types(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    let woken = cx.store.wake_log(&s, &audit(&["b"])).await?;
    ensure_eq!(woken.head, 3);
    ensure_eq!(woken.cursor.types, Some(strs(&["b"])));
    let (types, summary) = only_types(&cx, &s).await?;
    ensure_eq!(types, Some(strs(&["b"])));
    ensure_eq!(summary, strs(&["audit/log log pos=0 head=1"]));
    Ok(())
}

/// A call that fails refreshes no types: an append refused for a lane
/// conflict, as a partial duplicate or as an idempotency conflict, and a
/// completion naming no cursor and no stored event.
pub(crate) async fn failed_call_declaration_refreshes_nothing(cx: Cx) -> CaseResult {
    let s = session_taking_a(&cx).await?;
    ensure_unchanged!(
        cx,
        &s,
        {
            ensure_code!(
                cx.append_for(&s, vec![to_lane("t", "audit", "log")], vec![audit(&["b"])])
                    .await,
                ErrorCode::InvalidInput
            );
        },
        {
            ensure_code!(
                cx.append_for(&s, vec![ev("a", "1"), ev("a", "new")], vec![audit(&["b"])])
                    .await,
                ErrorCode::PartialDuplicateBatch
            );
        },
        {
            ensure_code!(
                cx.append_for(&s, vec![ev("other", "1")], vec![audit(&["b"])])
                    .await,
                ErrorCode::IdempotencyConflict
            );
        },
        {
            let unknown = CompleteRequest {
                consumer: "ghost".into(),
                ..complete_audit(&s, 99, 1, vec![audit(&["b"])])
            };
            ensure_code!(
                cx.store.complete_attempt(unknown).await,
                ErrorCode::NoSuchEvent
            );
        },
    );
    Ok(())
}
