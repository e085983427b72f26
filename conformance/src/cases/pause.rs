//! `pause`, `resume` and `pauses`: a paused consumer's heads are held back
//! from claims and `has_pending`, leases already held run out, and a pause
//! ends when resumed or at its time.
//!
//! Pauses may cover every session of a shared store, so each case pauses
//! consumers of its own ([`Cx::consumer`]) and lists only those.

use std::time::Duration;

use a2_store_api::{
    AppendOptions, ClaimWorkResult, ConsumerDeclaration, ErrorCode, HeldClaim, Pause, PauseRequest,
    RenewRequest, ResumeRequest, Store,
};

use super::work::{spawn_wait, woken, work_busy, LONG_WAIT_MS};
use crate::support::*;

fn pause(consumer: &str, session: Option<&str>, until_ms: Option<i64>, paused_at: i64) -> Pause {
    Pause::new(
        consumer.to_owned(),
        session.map(str::to_owned),
        until_ms,
        paused_at,
    )
}

/// The pauses in force of the given consumers, as `pauses(session)` lists them.
async fn listed(
    store: &dyn Store,
    session: Option<&str>,
    consumers: &[&str],
) -> std::result::Result<Vec<Pause>, Failure> {
    Ok(store
        .pauses(session)
        .await?
        .into_iter()
        .filter(|pause| consumers.contains(&pause.consumer.as_str()))
        .collect())
}

/// An end at or before now, a consumer with no cursor in the session and
/// empty names are `InvalidInput` with nothing changed; a store-wide pause
/// takes any consumer; pausing a scope again replaces its pause.
pub(crate) async fn pause_rejects_past_ends_and_unknown_consumers(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    let later = cx.consumer("later");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    ensure_unchanged!(cx, &s, {
        for request in [
            PauseRequest::in_session(&agent, &s).with_until_ms(T0),
            PauseRequest::everywhere(&agent).with_until_ms(T0 - 1),
            PauseRequest::everywhere(&agent).with_until_ms(-5),
            PauseRequest::in_session(cx.consumer("nobody"), &s),
            PauseRequest::in_session("", &s),
            PauseRequest::in_session(&agent, ""),
        ] {
            ensure_code!(cx.store.pause(request).await, ErrorCode::InvalidInput);
        }
    });
    ensure_eq!(listed(cx.store.as_ref(), None, &[&agent]).await?, vec![]);
    // A finished event cursor still names the consumer in the session.
    let head = cx.claim_heads(&s, "w").await?.remove(0);
    cx.complete(&s, &head, vec![]).await?;
    cx.advance(10);
    ensure_eq!(
        cx.store.pause(PauseRequest::in_session(&agent, &s)).await?,
        pause(&agent, Some(&s), None, T0 + 10)
    );
    cx.advance(10);
    cx.store
        .pause(PauseRequest::in_session(&agent, &s).with_until_ms(T0 + 500))
        .await?;
    ensure_eq!(
        listed(cx.store.as_ref(), Some(&s), &[&agent]).await?,
        vec![pause(&agent, Some(&s), Some(T0 + 500), T0 + 20)],
        "the second pause replaced the first"
    );
    ensure_eq!(
        cx.store.pause(PauseRequest::everywhere(&later)).await?,
        pause(&later, None, None, T0 + 20)
    );
    cx.store.resume(ResumeRequest::everywhere(&later)).await?;
    Ok(())
}

/// A paused consumer's heads are not claimed, not busy and not pending;
/// other consumers are served as before; `cursors()` shows the pause; a
/// resume makes them claimable.
pub(crate) async fn paused_consumer_is_not_claimed_or_pending(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    let other = cx.consumer("other");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    cx.append(&s, vec![to_event("b", &other)]).await?;
    cx.store.pause(PauseRequest::in_session(&agent, &s)).await?;
    let heads = cx.claim_heads(&s, "w").await?;
    ensure_eq!(head_summaries(&heads), vec![format!("2 {other}/- #1")]);
    cx.complete(&s, &heads[0], vec![]).await?;
    settled(cx.claim(&s, "w").await?)?;
    let appended = cx.append(&s, vec![to_event("c", &agent)]).await?;
    ensure!(!appended.has_pending, "held heads are not pending");
    let declared = cx
        .store
        .append(
            &s,
            vec![],
            AppendOptions {
                consumers: Some(vec![ConsumerDeclaration::targeted(&agent)]),
                origin_index: None,
            },
        )
        .await?;
    ensure!(
        !declared.has_pending,
        "held heads are not pending for the consumer"
    );
    ensure_eq!(
        cx.store.claim_work(cx.work("w", &["agent"], 5)).await?,
        ClaimWorkResult::Settled
    );
    for cursor in cx.cursors(&s).await? {
        ensure_eq!(cursor.pause, Some(pause(&agent, Some(&s), None, T0)));
    }
    ensure!(
        cx.store
            .resume(ResumeRequest::in_session(&agent, &s))
            .await?
            .resumed,
        "the pause was in force"
    );
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w").await?),
        vec![format!("1 {agent}/- #1"), format!("3 {agent}/- #1")]
    );
    ensure!(
        cx.cursors(&s)
            .await?
            .iter()
            .all(|cursor| cursor.pause.is_none()),
        "resumed cursors show no pause"
    );
    Ok(())
}

/// A pause with an end holds its heads as busy until then (claims answer
/// `Busy` with it), ends by itself, and a waiting claim wakes at its end.
pub(crate) async fn timed_pause_ends_by_itself(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    cx.store
        .pause(PauseRequest::in_session(&agent, &s).with_until_ms(T0 + 400))
        .await?;
    ensure_eq!(busy(cx.claim(&s, "w").await?)?, T0 + 400);
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?,
        T0 + 400
    );
    ensure!(
        !cx.append(&s, vec![]).await?.has_pending,
        "held heads are not pending"
    );
    let waiter = spawn_wait(
        &cx.store,
        cx.work("w", &["agent"], 1).with_wait_ms(LONG_WAIT_MS),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    cx.advance(400);
    let result = woken(waiter).await?;
    ensure_eq!(result.heads().count(), 1);
    ensure_eq!(
        listed(cx.store.as_ref(), Some(&s), &[&agent]).await?,
        vec![]
    );
    ensure!(
        cx.cursors(&s)
            .await?
            .iter()
            .all(|cursor| cursor.pause.is_none()),
        "an ended pause is not shown"
    );
    Ok(())
}

/// Leases held when a pause starts run to their end: they renew, complete
/// and fail as before; the heads after them wait for the resume.
pub(crate) async fn pause_lets_held_leases_run_out(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_lane("a", &agent, "L")]).await?;
    cx.append(&s, vec![to_event("b", &agent)]).await?;
    cx.append(&s, vec![to_lane("c", &agent, "L")]).await?;
    let heads = cx.claim_heads(&s, "w").await?;
    ensure_eq!(
        head_summaries(&heads),
        vec![format!("1 {agent}/L #1"), format!("2 {agent}/- #1")]
    );
    cx.store.pause(PauseRequest::in_session(&agent, &s)).await?;
    let renewed = cx
        .store
        .renew_claims(RenewRequest {
            incarnation: None,
            session_id: s.clone(),
            holder: "w".into(),
            claims: heads
                .iter()
                .map(|head| HeldClaim {
                    cursor: head.cursor_ref(),
                    attempt: head.dispatch.attempt_count,
                })
                .collect(),
            ttl_ms: Some(TTL),
            expires_at_ms: None,
        })
        .await?;
    ensure_eq!(renewed.renewed.len(), 2);
    completed(cx.complete(&s, &heads[0], vec![]).await?)?;
    ensure_eq!(cx.fail(&s, &heads[1], None).await?.failure_count, 1);
    settled(cx.claim(&s, "w").await?)?;
    cx.store
        .resume(ResumeRequest::in_session(&agent, &s))
        .await?;
    ensure_eq!(
        head_summaries(&cx.claim_heads(&s, "w").await?),
        vec![format!("2 {agent}/- #2"), format!("3 {agent}/L #1")]
    );
    Ok(())
}

/// A store-wide pause holds the consumer in every session, new ones
/// included; a session's own pause and the store-wide one combine (the
/// longer holds); each ends on its own.
pub(crate) async fn store_wide_pause_holds_every_session(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    let (a, b, c) = (cx.session_id("a"), cx.session_id("b"), cx.session_id("c"));
    for session in [&a, &b] {
        cx.append(session, vec![to_event("x", &agent)]).await?;
    }
    cx.store
        .pause(PauseRequest::everywhere(&agent).with_until_ms(T0 + 1_000))
        .await?;
    cx.store.pause(PauseRequest::in_session(&agent, &a)).await?;
    cx.append(&c, vec![to_event("x", &agent)]).await?;
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w", &["agent"], 5)).await?)?,
        T0 + 1_000
    );
    settled(cx.claim(&a, "w").await?)?;
    ensure_eq!(busy(cx.claim(&b, "w").await?)?, T0 + 1_000);
    ensure_eq!(
        busy(cx.claim(&c, "w").await?)?,
        T0 + 1_000,
        "a new session too"
    );
    ensure_eq!(
        only(&cx.cursors(&a).await?)?.pause,
        Some(pause(&agent, Some(&a), None, T0))
    );
    ensure_eq!(
        only(&cx.cursors(&b).await?)?.pause,
        Some(pause(&agent, None, Some(T0 + 1_000), T0))
    );
    cx.advance(1_000);
    let mut served: Vec<String> = cx
        .store
        .claim_work(cx.work("w", &["agent"], 5))
        .await?
        .heads()
        .map(|(session, _)| session.to_owned())
        .collect();
    served.sort();
    ensure_eq!(served, vec![b.clone(), c.clone()]);
    ensure!(
        !cx.store
            .resume(ResumeRequest::everywhere(&agent))
            .await?
            .resumed,
        "the store-wide pause had already ended"
    );
    ensure!(
        cx.store
            .resume(ResumeRequest::in_session(&agent, &a))
            .await?
            .resumed,
        "a's own pause was in force"
    );
    ensure_eq!(cx.claim_heads(&a, "w").await?.len(), 1);
    Ok(())
}

/// A resume wakes a claim waiting for the paused consumer's work.
pub(crate) async fn resume_wakes_a_waiting_work_claim(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    cx.store.pause(PauseRequest::everywhere(&agent)).await?;
    let waiter = spawn_wait(
        &cx.store,
        cx.work("w", &["agent"], 1).with_wait_ms(LONG_WAIT_MS),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    ensure!(
        cx.store
            .resume(ResumeRequest::everywhere(&agent))
            .await?
            .resumed,
        "the pause was in force"
    );
    let result = woken(waiter).await?;
    ensure_eq!(result.heads().count(), 1);
    Ok(())
}

/// `resume` lifts one scope: the store-wide pause or one session's, never
/// both; `resumed` says whether a pause in force was lifted.
pub(crate) async fn resume_lifts_one_scope(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    cx.store.pause(PauseRequest::in_session(&agent, &s)).await?;
    cx.store.pause(PauseRequest::everywhere(&agent)).await?;
    ensure!(
        cx.store
            .resume(ResumeRequest::everywhere(&agent))
            .await?
            .resumed,
        "the store-wide pause was in force"
    );
    settled(cx.claim(&s, "w").await?)?;
    ensure!(
        !cx.store
            .resume(ResumeRequest::everywhere(&agent))
            .await?
            .resumed,
        "nothing left store-wide"
    );
    ensure!(
        !cx.store
            .resume(ResumeRequest::in_session(&agent, cx.session_id("t")))
            .await?
            .resumed,
        "no pause in another session"
    );
    ensure!(
        cx.store
            .resume(ResumeRequest::in_session(&agent, &s))
            .await?
            .resumed,
        "the session's pause was in force"
    );
    ensure_eq!(cx.claim_heads(&s, "w").await?.len(), 1);
    Ok(())
}

/// `pauses` lists the pauses in force by consumer, store-wide first, then
/// by session; with a session, only the store-wide ones and that session's.
pub(crate) async fn pauses_are_listed(cx: Cx) -> CaseResult {
    let (x, y) = (cx.consumer("x"), cx.consumer("y"));
    let (a, b) = (cx.session_id("a"), cx.session_id("b"));
    for session in [&a, &b] {
        cx.append(session, vec![to_event("e", &y)]).await?;
    }
    cx.store
        .pause(PauseRequest::everywhere(&y).with_until_ms(T0 + 100))
        .await?;
    cx.store.pause(PauseRequest::in_session(&y, &b)).await?;
    cx.store
        .pause(PauseRequest::in_session(&y, &a).with_until_ms(T0 + 50))
        .await?;
    cx.store.pause(PauseRequest::everywhere(&x)).await?;
    let store = cx.store.as_ref();
    ensure_eq!(
        listed(store, None, &[&x, &y]).await?,
        vec![
            pause(&x, None, None, T0),
            pause(&y, None, Some(T0 + 100), T0),
            pause(&y, Some(&a), Some(T0 + 50), T0),
            pause(&y, Some(&b), None, T0),
        ]
    );
    ensure_eq!(
        listed(store, Some(&a), &[&x, &y]).await?,
        vec![
            pause(&x, None, None, T0),
            pause(&y, None, Some(T0 + 100), T0),
            pause(&y, Some(&a), Some(T0 + 50), T0),
        ]
    );
    cx.advance(60);
    ensure_eq!(
        listed(store, Some(&a), &[&x, &y]).await?,
        vec![
            pause(&x, None, None, T0),
            pause(&y, None, Some(T0 + 100), T0)
        ]
    );
    cx.advance(50);
    ensure_eq!(
        listed(store, None, &[&x, &y]).await?,
        vec![pause(&x, None, None, T0), pause(&y, Some(&b), None, T0)]
    );
    cx.store.resume(ResumeRequest::everywhere(&x)).await?;
    Ok(())
}
