//! No input makes a backend panic: extreme numbers and odd strings get a
//! result or a typed error, and a failed call changes nothing.

use a2_store_api::{
    ClaimRequest, CompleteRequest, ErrorCode, FailRequest, HeldClaim, NewEvent, PresenceMeta,
    ReadOptions, ReadStateOptions, RedriveAction, RedriveRequest, RenewRequest, StateWrite, Target,
};
use serde_json::json;

use crate::support::*;

/// Passes when `result` is `Ok` or an error with one of `codes`.
fn tolerated<T>(what: &str, result: a2_store_api::Result<T>, codes: &[ErrorCode]) -> CaseResult {
    match result {
        Ok(_) => Ok(()),
        Err(error) if codes.contains(&error.code()) => Ok(()),
        Err(error) => Err(Failure::Fail(format!(
            "{what}: expected a result or one of {codes:?}, got {}: {error}",
            error.code()
        ))),
    }
}

/// Indexes at `u64::MAX`, limits at `usize::MAX` and leases at `i64::MAX`
/// never panic: each call answers or fails with a typed error, changing nothing.
pub(crate) async fn extreme_numbers_never_panic(cx: Cx) -> CaseResult {
    const ERR: &[ErrorCode] = &[ErrorCode::InvalidInput, ErrorCode::NoSuchEvent];
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    let store = &cx.store;
    let far = u64::MAX;
    ensure_unchanged!(cx, &s, {
        tolerated(
            "read",
            store
                .read(
                    &s,
                    ReadOptions {
                        after: Some(far - 1),
                        through: Some(far),
                        limit: Some(usize::MAX),
                    },
                )
                .await,
            ERR,
        )?;
        tolerated(
            "complete",
            store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: s.clone(),
                    consumer: "agent".into(),
                    lane: None,
                    index: far,
                    attempt: u32::MAX,
                    events: vec![],
                    consumers: None,
                })
                .await,
            ERR,
        )?;
        tolerated(
            "fail",
            store
                .fail_attempt(FailRequest {
                    incarnation: None,
                    session_id: s.clone(),
                    consumer: "agent".into(),
                    lane: Some("L1".into()),
                    index: far,
                    attempt: u32::MAX,
                    error: String::new(),
                    max_failures: Some(u32::MAX),
                    retry_after_ms: Some(i64::MAX),
                })
                .await,
            ERR,
        )?;
        tolerated(
            "renew",
            store
                .renew_claims(RenewRequest {
                    incarnation: None,
                    session_id: s.clone(),
                    holder: "w1".into(),
                    claims: vec![HeldClaim {
                        cursor: at("agent", Some("L1"), far),
                        attempt: u32::MAX,
                    }],
                    ttl_ms: Some(i64::MAX),
                    expires_at_ms: None,
                })
                .await,
            ERR,
        )?;
        tolerated(
            "redrive",
            store
                .redrive(RedriveRequest {
                    incarnation: None,
                    lane: None,
                    session_id: s.clone(),
                    consumer: "agent".into(),
                    index: far,
                    action: RedriveAction::Skip,
                    consumers: None,
                })
                .await,
            ERR,
        )?;
        tolerated(
            "read_state",
            store
                .read_state(&s, "r", ReadStateOptions { at: Some(far) })
                .await,
            ERR,
        )?;
        tolerated("subscribe", store.subscribe(&s, far).await, ERR)?;
    });
    tolerated(
        "claim",
        store
            .claim_available(ClaimRequest {
                ttl_ms: Some(i64::MAX),
                through: Some(far),
                limit: Some(usize::MAX),
                max_failures: Some(u32::MAX),
                ..cx.req(&s, "w1")
            })
            .await,
        ERR,
    )?;
    tolerated(
        "write_state",
        store
            .write_state(
                &s,
                "r",
                vec![StateWrite {
                    index: far,
                    state: json!(null),
                    pins: vec![at("agent", Some("L1"), far)],
                }],
            )
            .await,
        ERR,
    )?;
    tolerated(
        "set_presence",
        store
            .set_presence(
                &s,
                "ann",
                [("x".to_owned(), json!(1))].into(),
                PresenceMeta {
                    at: i64::MIN,
                    seen: Some(far),
                    ttl_ms: i64::MAX,
                },
            )
            .await,
        ERR,
    )?;
    tolerated("read_presence", store.read_presence(&s).await, ERR)?;
    Ok(())
}

/// Unusual strings (unicode, quotes, SQL and path syntax, a 1,000-character
/// id) are stored and read back exactly, as ids, types, names and session ids.
pub(crate) async fn odd_strings_round_trip(cx: Cx) -> CaseResult {
    let s = cx.session_id("sé ssion/with:odd'chars\"%_");
    let long = "x".repeat(1_000);
    let odd_ids = [
        "ünïcødé 🚀",
        "a'b\"c;-- DROP TABLE",
        "%_\\*?",
        long.as_str(),
    ];
    let events: Vec<_> = odd_ids
        .iter()
        .map(|id| {
            NewEvent::new(format!("type:{id}"), json!({ "id": id, "k'\"": [id] }))
                .with_id(*id)
                .with_target(Target::lane("cønsumer'", "lane 🚀"))
        })
        .collect();
    let stored = cx.append(&s, events).await?;
    let rows = cx.read_all(&s).await?;
    ensure_eq!(rows, stored.events);
    ensure_eq!(
        ids(&rows),
        odd_ids
            .iter()
            .map(|id| (*id).to_owned())
            .collect::<Vec<_>>()
    );
    let head = nth(&cx.claim_heads(&s, "wørker").await?, 0)?;
    ensure_eq!(head.consumer, "cønsumer'");
    ensure_eq!(head.lane.as_deref(), Some("lane 🚀"));
    ensure_eq!(head.dispatch.claim_holder.as_deref(), Some("wørker"));
    let replay = cx
        .append(
            &s,
            vec![NewEvent::new(
                format!("type:{}", odd_ids[0]),
                json!({ "id": odd_ids[0], "k'\"": [odd_ids[0]] }),
            )
            .with_id(odd_ids[0])],
        )
        .await?;
    ensure_eq!(idx(&replay.events), vec![1]);
    Ok(())
}

/// Strings a storage engine may not hold (NUL characters, a 100,000-character
/// id) are either stored and read back exactly or rejected as `InvalidInput`
/// with nothing changed — never a panic or a backend failure.
pub(crate) async fn nul_and_huge_strings_are_stored_or_rejected(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("first")]).await?;
    let huge = "y".repeat(100_000);
    let candidates = [
        NewEvent::new("msg", json!({ "text": "nul\u{0}inside" })).with_id("nul-payload"),
        msg("nul\u{0}id"),
        NewEvent::new("nul\u{0}type", json!(1)).with_id("nul-type"),
        msg(&huge),
        msg("nul-target").with_target(Target::event("agent\u{0}")),
    ];
    for event in candidates {
        let appended = ensure_unchanged!(cx, &s, when Option::is_none, {
            match cx.append(&s, vec![event.clone()]).await {
                Ok(result) => Some(result),
                Err(error) => {
                    ensure_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
                    None
                }
            }
        });
        if let Some(result) = appended {
            let row = nth_event(&result.events)?;
            ensure_eq!(Some(&row.id), event.id.as_ref());
            ensure_eq!(row.event_type, event.event_type);
            ensure_eq!(row.payload, event.payload);
            let read = cx.read(&s, row.index - 1, Some(row.index)).await?;
            ensure_eq!(read, vec![row]);
        }
    }
    Ok(())
}

fn nth_event(
    events: &[a2_store_api::StoredEvent],
) -> std::result::Result<a2_store_api::StoredEvent, Failure> {
    events
        .first()
        .cloned()
        .ok_or_else(|| Failure::Fail("an append of one event returned no row".to_owned()))
}

/// Requests with nothing in them are valid no-ops: renewing no claims,
/// writing no snapshots or presence fields, listing zero sessions.
pub(crate) async fn empty_requests_are_no_ops(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    cx.claim_heads(&s, "w1").await?;
    ensure_unchanged!(cx, &s, {
        let renewed = cx
            .store
            .renew_claims(RenewRequest {
                incarnation: None,
                session_id: s.clone(),
                holder: "w1".into(),
                claims: vec![],
                ttl_ms: Some(TTL),
                expires_at_ms: None,
            })
            .await?;
        ensure_eq!(renewed, a2_store_api::RenewResult::default());
        cx.store.write_state(&s, "r", vec![]).await?;
        ensure_eq!(
            cx.store
                .read_state(&s, "r", ReadStateOptions::default())
                .await?
                .snapshot,
            None
        );
        let presence = cx
            .store
            .set_presence(
                &s,
                "ann",
                Default::default(),
                PresenceMeta {
                    at: 1,
                    seen: None,
                    ttl_ms: TTL,
                },
            )
            .await?;
        ensure_eq!(presence, a2_store_api::PresenceResult::default());
        ensure_eq!(cx.store.read_presence(&s).await?, vec![]);
        let none = cx
            .store
            .sessions(a2_store_api::ListSessions {
                after: None,
                limit: Some(0),
            })
            .await?;
        ensure_eq!(none, vec![]);
    });
    Ok(())
}
