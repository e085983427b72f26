//! A lease that expires while a slow handler runs is fenced when the handler
//! finally reports: superseded when another holder claimed the head
//! meanwhile, completed when nobody did. Checked for event, lane and log
//! cursors on any backend.

use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, ConsumerDeclaration,
    CounterIds, ErrorCode, Head, HeldClaim, ManualClock, NewEvent, ReadOptions, RenewRequest,
    Store, Target,
};
use serde_json::json;

/// The cursor kinds the check runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Event,
    Lane,
    Log,
}

const TTL_MS: i64 = 1_000;

fn declarations(kind: Kind) -> Option<Vec<ConsumerDeclaration>> {
    match kind {
        Kind::Log => Some(vec![ConsumerDeclaration::log(
            "audit",
            "log",
            Some(vec!["msg".to_owned()]),
            true,
        )]),
        Kind::Event | Kind::Lane => None,
    }
}

fn work(kind: Kind) -> NewEvent {
    let event = NewEvent::new("msg", json!({"job": 1})).with_id("job-1");
    match kind {
        Kind::Event => event.with_target(Target::event("agent")),
        Kind::Lane => event.with_target(Target::lane("agent", "main")),
        Kind::Log => event,
    }
}

fn claim(session: &str, holder: &str, kind: Kind) -> ClaimRequest {
    ClaimRequest {
        session_id: session.to_owned(),
        holder: holder.to_owned(),
        ttl_ms: Some(TTL_MS),
        consumers: declarations(kind),
        ..ClaimRequest::default()
    }
}

fn complete(session: &str, head: &Head, reply: &str) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: session.to_owned(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events: vec![NewEvent::new("reply", json!({"by": reply})).with_id(reply)],
        consumers: None,
    }
}

fn one_head(result: ClaimResult, what: &str) -> Result<Head, String> {
    match result {
        ClaimResult::Claimed { mut heads, .. } if heads.len() == 1 => {
            heads.pop().ok_or_else(|| format!("{what}: no head"))
        }
        other => Err(format!("{what}: expected one claimed head, got {other:?}")),
    }
}

fn fail(kind: Kind, step: &str, detail: impl std::fmt::Debug) -> String {
    format!("{kind:?} cursor: {step}: {detail:?}")
}

/// Runs both scenarios for every cursor kind on fresh stores from `factory`.
/// Returns the first behaviour that differs from the contract, described.
pub async fn check_lease_fencing(factory: &dyn StoreFactory) -> Result<(), String> {
    for kind in [Kind::Event, Kind::Lane, Kind::Log] {
        expired_and_reclaimed_is_superseded(factory, kind).await?;
        expired_but_unclaimed_still_completes(factory, kind).await?;
    }
    Ok(())
}

async fn fresh(factory: &dyn StoreFactory) -> Result<(ManualClock, Arc<dyn Store>), String> {
    let clock = ManualClock::new(5_000_000);
    let store = factory
        .create(Arc::new(clock.clone()), Arc::new(CounterIds::new("id-")))
        .await
        .map_err(|e| format!("creating a store: {e}"))?;
    Ok((clock, store))
}

/// A fresh store whose `session` holds one piece of `kind` work, claimed by
/// holder `slow` (the claim the cases then let expire).
async fn slow_claim(
    factory: &dyn StoreFactory,
    kind: Kind,
    session: &str,
) -> Result<(ManualClock, Arc<dyn Store>, Head), String> {
    let (clock, store) = fresh(factory).await?;
    let options = AppendOptions {
        consumers: declarations(kind),
        origin_index: None,
    };
    store
        .append(session, vec![work(kind)], options)
        .await
        .map_err(|e| fail(kind, "append", e.to_string()))?;
    let slow = one_head(
        store
            .claim_available(claim(session, "slow", kind))
            .await
            .map_err(|e| fail(kind, "first claim", e.to_string()))?,
        "first claim",
    )
    .map_err(|e| fail(kind, "first claim", e))?;
    Ok((clock, store, slow))
}

/// Holder `slow` claims, its lease runs out while it works, `fast` claims
/// the head again: `slow`'s completion, fenced append and renewal are all
/// refused, `fast` completes, and only `fast`'s reply is in the log.
async fn expired_and_reclaimed_is_superseded(
    factory: &dyn StoreFactory,
    kind: Kind,
) -> Result<(), String> {
    let session = "fence-reclaimed";
    let (clock, store, slow) = slow_claim(factory, kind, session).await?;
    // The handler is slow: its lease expires while it runs.
    clock.advance(TTL_MS + 500);
    let fast = one_head(
        store
            .claim_available(claim(session, "fast", kind))
            .await
            .map_err(|e| fail(kind, "second claim", e.to_string()))?,
        "second claim",
    )
    .map_err(|e| fail(kind, "second claim", e))?;
    if fast.cursor_ref() != slow.cursor_ref()
        || fast.dispatch.attempt_count != slow.dispatch.attempt_count + 1
        || fast.dispatch.failure_count != 1
    {
        return Err(fail(
            kind,
            "the expired head must be claimed again as the next attempt, counting one failure",
            (&slow.dispatch, &fast.dispatch),
        ));
    }
    let renewed = store
        .renew_claims(RenewRequest {
            incarnation: None,
            session_id: session.to_owned(),
            holder: "slow".to_owned(),
            claims: vec![HeldClaim {
                cursor: slow.cursor_ref(),
                attempt: slow.dispatch.attempt_count,
            }],
            ttl_ms: Some(TTL_MS),
            expires_at_ms: None,
        })
        .await
        .map_err(|e| fail(kind, "renew by the slow holder", e.to_string()))?;
    if !renewed.renewed.is_empty() || renewed.superseded != vec![slow.cursor_ref()] {
        return Err(fail(
            kind,
            "the slow holder's renewal must be superseded",
            renewed,
        ));
    }
    let fenced = store
        .append(
            session,
            vec![NewEvent::new("progress", json!(null)).with_cause(slow.cause())],
            AppendOptions::default(),
        )
        .await;
    if fenced.as_ref().map_err(|e| e.code()).err() != Some(ErrorCode::SupersededAttempt) {
        return Err(fail(
            kind,
            "a fenced append by the slow attempt must fail with SupersededAttempt",
            fenced.map(|r| r.events),
        ));
    }
    let late = store
        .complete_attempt(complete(session, &slow, "slow-reply"))
        .await
        .map_err(|e| fail(kind, "late completion", e.to_string()))?;
    if late != CompleteResult::Superseded {
        return Err(fail(
            kind,
            "the slow holder's late completion must be Superseded",
            late,
        ));
    }
    let done = store
        .complete_attempt(complete(session, &fast, "fast-reply"))
        .await
        .map_err(|e| fail(kind, "current completion", e.to_string()))?;
    let CompleteResult::Completed { events } = done else {
        return Err(fail(
            kind,
            "the current holder's completion must be Completed",
            done,
        ));
    };
    if events.len() != 1 || events[0].cause.as_ref() != Some(&fast.cause()) {
        return Err(fail(
            kind,
            "the reply must carry the current attempt as cause",
            events,
        ));
    }
    let rows = store
        .read(session, ReadOptions::default())
        .await
        .map_err(|e| fail(kind, "read", e.to_string()))?;
    let ids: Vec<&str> = rows.iter().map(|row| row.id.as_str()).collect();
    if ids != ["job-1", "fast-reply"] {
        return Err(fail(
            kind,
            "the log must hold the job and only the current holder's reply",
            ids,
        ));
    }
    Ok(())
}

/// Holder `slow` claims and its lease runs out, but nobody claims the head
/// meanwhile: its late completion is accepted, once.
async fn expired_but_unclaimed_still_completes(
    factory: &dyn StoreFactory,
    kind: Kind,
) -> Result<(), String> {
    let session = "fence-unclaimed";
    let (clock, store, slow) = slow_claim(factory, kind, session).await?;
    clock.advance(TTL_MS * 3);
    let late = store
        .complete_attempt(complete(session, &slow, "slow-reply"))
        .await
        .map_err(|e| fail(kind, "late completion", e.to_string()))?;
    let CompleteResult::Completed { events } = late else {
        return Err(fail(
            kind,
            "a late completion nobody overtook must be Completed",
            late,
        ));
    };
    if events.len() != 1 || events[0].cause.as_ref() != Some(&slow.cause()) {
        return Err(fail(
            kind,
            "the reply must carry the slow attempt as cause",
            events,
        ));
    }
    let next = store
        .claim_available(claim(session, "other", kind))
        .await
        .map_err(|e| fail(kind, "claim after completion", e.to_string()))?;
    // The completed head is gone and nothing else is due (the reply has no
    // target and is not a type the log consumer takes).
    if next != ClaimResult::Settled {
        return Err(fail(
            kind,
            "after the late completion nothing is left to claim",
            next,
        ));
    }
    Ok(())
}
