//! Every validation error of the CONTRACT: `InvalidInput` (or
//! `PartialDuplicateBatch` for a repeated id) before anything else, and
//! nothing changed afterwards.

use a2_store_api::{
    AppendOptions, ClaimRequest, ClearRequest, CompleteRequest, ConsumerDeclaration, ErrorCode,
    FailRequest, HeldClaim, ListSessions, NewEvent, PresenceMeta, ReadOptions, ReadStateOptions,
    RedriveAction, RedriveRequest, RenewRequest, StateWrite, Target,
};
use serde_json::json;

use crate::support::*;

const INVALID: ErrorCode = ErrorCode::InvalidInput;

/// A session with a claimed lane head, a log cursor and a dead letter, so
/// "nothing changed" compares real state.
async fn busy_session(cx: &Cx) -> std::result::Result<String, Failure> {
    let s = cx.session_id("s");
    cx.append_for(
        &s,
        vec![to_lane("a", "agent", "L1"), to_event("b", "agent")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let dead = heads
        .iter()
        .find(|head| head.lane.is_none())
        .cloned()
        .ok_or_else(|| {
            Failure::Fail(format!(
                "no event cursor head in {:?}",
                head_summaries(&heads)
            ))
        })?;
    cx.fail(s.as_str(), &dead, Some(1)).await?;
    Ok(s)
}

fn complete(s: &str, consumer: &str, events: Vec<NewEvent>) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: s.to_owned(),
        consumer: consumer.to_owned(),
        lane: Some("L1".into()),
        index: 1,
        attempt: 1,
        events,
        consumers: None,
    }
}

fn fail(s: &str, consumer: &str) -> FailRequest {
    FailRequest {
        incarnation: None,
        session_id: s.to_owned(),
        consumer: consumer.to_owned(),
        lane: Some("L1".into()),
        index: 1,
        attempt: 1,
        error: "e".into(),
        max_failures: None,
        retry_after_ms: None,
    }
}

fn redrive(s: &str, consumer: &str) -> RedriveRequest {
    RedriveRequest {
        incarnation: None,
        lane: None,
        session_id: s.to_owned(),
        consumer: consumer.to_owned(),
        index: 2,
        action: RedriveAction::Retry,
        consumers: None,
    }
}

fn renew(s: &str, holder: &str) -> RenewRequest {
    RenewRequest {
        incarnation: None,
        session_id: s.to_owned(),
        holder: holder.to_owned(),
        claims: vec![HeldClaim {
            cursor: at("agent", Some("L1"), 1),
            attempt: 1,
        }],
        ttl_ms: Some(TTL),
        expires_at_ms: None,
    }
}

/// Every call rejects an empty session id, reads included.
pub(crate) async fn empty_session_id_is_invalid_for_every_call(cx: Cx) -> CaseResult {
    let store = &cx.store;
    let audit = log_consumer("audit", "log", None, true);
    ensure_code!(
        store
            .append("", vec![msg("a")], AppendOptions::default())
            .await,
        INVALID
    );
    ensure_code!(store.claim_available(cx.req("", "w1")).await, INVALID);
    ensure_code!(store.renew_claims(renew("", "w1")).await, INVALID);
    ensure_code!(
        store.complete_attempt(complete("", "agent", vec![])).await,
        INVALID
    );
    ensure_code!(store.fail_attempt(fail("", "agent")).await, INVALID);
    ensure_code!(store.dead_letters("").await, INVALID);
    ensure_code!(store.redrive(redrive("", "agent")).await, INVALID);
    ensure_code!(store.clear(ClearRequest::default()).await, INVALID);
    ensure_code!(store.reclaim("").await, INVALID);
    ensure_code!(store.read("", ReadOptions::default()).await, INVALID);
    ensure_code!(store.wake_log("", &audit).await, INVALID);
    ensure_code!(store.cursors("").await, INVALID);
    ensure_code!(store.subscribe("", 0).await.map(|_| ()), INVALID);
    ensure_code!(store.write_state("", "r", vec![]).await, INVALID);
    ensure_code!(
        store.read_state("", "r", ReadStateOptions::default()).await,
        INVALID
    );
    ensure_code!(
        store
            .set_presence(
                "",
                "ann",
                [("x".to_owned(), json!(1))].into(),
                PresenceMeta {
                    at: 1,
                    seen: None,
                    ttl_ms: TTL
                }
            )
            .await,
        INVALID
    );
    ensure_code!(store.read_presence("").await, INVALID);
    let sessions = store.sessions(ListSessions::default()).await?;
    ensure!(
        sessions.iter().all(|row| !row.session_id.is_empty()),
        "a session with an empty id was created"
    );
    Ok(())
}

/// An empty holder is rejected by claims and renewals.
pub(crate) async fn empty_holder_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(cx.store.claim_available(cx.req(&s, "")).await, INVALID);
        ensure_code!(cx.store.renew_claims(renew(&s, "")).await, INVALID);
    });
    Ok(())
}

/// An empty consumer name is rejected wherever a consumer is named.
pub(crate) async fn empty_consumer_name_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.store.complete_attempt(complete(&s, "", vec![])).await,
            INVALID
        );
        ensure_code!(cx.store.fail_attempt(fail(&s, "")).await, INVALID);
        ensure_code!(cx.store.redrive(redrive(&s, "")).await, INVALID);
        ensure_code!(
            cx.append(&s, vec![msg("x").with_target(Target::event(""))])
                .await,
            INVALID
        );
        ensure_code!(
            cx.append_for(&s, vec![msg("x")], vec![ConsumerDeclaration::targeted("")])
                .await,
            INVALID
        );
        ensure_code!(
            cx.store
                .wake_log(&s, &log_consumer("", "log", None, true))
                .await,
            INVALID
        );
    });
    Ok(())
}

/// An empty reducer name is rejected by `write_state` and `read_state`.
pub(crate) async fn empty_reducer_name_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    let write = StateWrite {
        index: 1,
        state: json!(1),
        pins: vec![],
    };
    ensure_code!(cx.store.write_state(&s, "", vec![write]).await, INVALID);
    ensure_code!(
        cx.store
            .read_state(&s, "", ReadStateOptions::default())
            .await,
        INVALID
    );
    Ok(())
}

/// An event with an empty type is rejected, in appends and in returned events.
pub(crate) async fn empty_event_type_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("ok"), NewEvent::new("", json!(1))])
                .await,
            INVALID
        );
        ensure_code!(
            cx.store
                .complete_attempt(complete(&s, "agent", vec![NewEvent::new("", json!(1))]))
                .await,
            INVALID
        );
    });
    Ok(())
}

/// A supplied empty id is rejected (omit the id to have one generated).
pub(crate) async fn empty_supplied_id_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![NewEvent::new("msg", json!(1)).with_id("")])
                .await,
            INVALID
        );
    });
    Ok(())
}

/// A target with an empty lane (`Some("")`) is rejected.
pub(crate) async fn target_with_empty_lane_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![to_lane("x", "agent", "")]).await,
            INVALID
        );
    });
    Ok(())
}

/// Only `clear` may append the reserved `a2.cleared` type.
pub(crate) async fn reserved_clear_type_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        let marker = NewEvent::new(a2_store_api::CLEAR_EVENT_TYPE, json!(null));
        ensure_code!(cx.append(&s, vec![marker.clone()]).await, INVALID);
        ensure_code!(
            cx.store
                .complete_attempt(complete(&s, "agent", vec![marker]))
                .await,
            INVALID
        );
    });
    Ok(())
}

/// A log declaration on an empty lane is rejected by every call taking declarations.
pub(crate) async fn log_declaration_with_empty_lane_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        let bad = log_consumer("audit", "", None, true);
        ensure_code!(
            cx.append_for(&s, vec![msg("x")], vec![bad.clone()]).await,
            INVALID
        );
        ensure_code!(cx.store.wake_log(&s, &bad).await, INVALID);
        let claim = ClaimRequest {
            consumers: Some(vec![bad.clone()]),
            ..cx.req(&s, "w1")
        };
        ensure_code!(cx.store.claim_available(claim).await, INVALID);
        let done = CompleteRequest {
            consumers: Some(vec![bad.clone()]),
            ..complete(&s, "agent", vec![])
        };
        ensure_code!(cx.store.complete_attempt(done).await, INVALID);
        let retry = RedriveRequest {
            consumers: Some(vec![bad]),
            ..redrive(&s, "agent")
        };
        ensure_code!(cx.store.redrive(retry).await, INVALID);
    });
    Ok(())
}

/// One consumer declared twice in one list with different declarations is
/// rejected by every call taking declarations; identical repeats are fine.
pub(crate) async fn consumer_declared_twice_differently_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        let twice = vec![
            log_consumer("audit", "log", None, false),
            log_consumer("audit", "log", Some(&["a"]), false),
        ];
        ensure_code!(
            cx.append_for(&s, vec![msg("x")], twice.clone()).await,
            INVALID
        );
        let claim = ClaimRequest {
            consumers: Some(twice.clone()),
            ..cx.req(&s, "w1")
        };
        ensure_code!(cx.store.claim_available(claim).await, INVALID);
        let done = CompleteRequest {
            consumers: Some(twice.clone()),
            ..complete(&s, "agent", vec![])
        };
        ensure_code!(cx.store.complete_attempt(done).await, INVALID);
        let retry = RedriveRequest {
            consumers: Some(twice),
            ..redrive(&s, "agent")
        };
        ensure_code!(cx.store.redrive(retry).await, INVALID);
    });
    let same = vec![
        log_consumer("audit", "log", None, false),
        log_consumer("audit", "log", None, false),
    ];
    cx.append_for(&s, vec![msg("y")], same).await?;
    Ok(())
}

/// `wake_log` with a consumer that has no log is rejected.
pub(crate) async fn wake_log_without_log_declaration_is_invalid(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.store
                .wake_log(&s, &ConsumerDeclaration::targeted("agent"))
                .await,
            INVALID
        );
    });
    Ok(())
}

/// A claim needs exactly one of a positive `ttl_ms` and `expires_at_ms`.
pub(crate) async fn claim_with_invalid_lease_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    ensure_unchanged!(cx, &s, {
        for (ttl_ms, expires_at_ms) in [
            (None, None),
            (Some(TTL), Some(T0 + TTL)),
            (Some(0), None),
            (Some(-1), None),
        ] {
            let request = ClaimRequest {
                ttl_ms,
                expires_at_ms,
                ..cx.req(&s, "w1")
            };
            ensure_code!(cx.store.claim_available(request).await, INVALID);
        }
    });
    Ok(())
}

/// Validation comes first: an invalid event fails even a batch that would
/// replay, and an invalid declaration fails even an empty batch.
pub(crate) async fn append_validates_before_replay_and_empty_batch(cx: Cx) -> CaseResult {
    let s = busy_session(&cx).await?;
    ensure_unchanged!(cx, &s, {
        ensure_code!(
            cx.append(&s, vec![msg("a"), NewEvent::new("", json!(1)).with_id("b")])
                .await,
            INVALID
        );
        ensure_code!(
            cx.append_for(&s, vec![], vec![log_consumer("audit", "", None, false)])
                .await,
            INVALID
        );
        ensure_code!(
            cx.append(&s, vec![msg("a"), msg("a")]).await,
            ErrorCode::PartialDuplicateBatch
        );
    });
    Ok(())
}

/// A claim with `limit: Some(0)` is `InvalidInput` (it could never claim;
/// every backend agrees, the CONTRACT does not list it yet).
pub(crate) async fn claim_with_zero_limit_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    ensure_unchanged!(cx, &s, {
        let request = ClaimRequest {
            limit: Some(0),
            ..cx.req(&s, "w1")
        };
        ensure_code!(cx.store.claim_available(request).await, INVALID);
    });
    Ok(())
}
