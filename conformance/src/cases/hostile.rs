//! Hostile input through every operation: quotes, SQL metacharacters,
//! non-ASCII text and 10,000-character strings as names; a 16 MiB payload;
//! JSON nested 10,000 levels deep; numbers at their limits. Each is stored and
//! read back exactly or refused with a typed error — never a panic, a hang, a
//! `Backend` error or a change to the store.

use std::collections::BTreeMap;

use a2_store_api::validate::MAX_JSON_DEPTH;
use a2_store_api::{
    ClaimRequest, ClaimResult, ClearRequest, CompleteRequest, ErrorCode, FailRequest, HeldClaim,
    ListSessions, NewEvent, PresenceMeta, PresenceRow, ReadOptions, ReadStateOptions,
    RedriveAction, RedriveRequest, RenewRequest, StateRead, StateWrite, Target,
};
use serde_json::{json, Value};

use crate::support::*;

/// `Ok(Some(value))`, `Ok(None)` for an `InvalidInput` refusal, or a failure
/// naming `what` for any other error.
fn stored_or_refused<T>(
    what: &str,
    result: a2_store_api::Result<T>,
) -> std::result::Result<Option<T>, Failure> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if error.code() == ErrorCode::InvalidInput => Ok(None),
        Err(error) => Err(Failure::Fail(format!(
            "{what}: expected a result or InvalidInput, got {}: {error}",
            error.code()
        ))),
    }
}

/// Passes when `result` is `Ok` or an error with one of `codes`.
fn typed<T>(
    what: &str,
    result: a2_store_api::Result<T>,
    codes: &[ErrorCode],
) -> std::result::Result<Option<T>, Failure> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if codes.contains(&error.code()) => Ok(None),
        Err(error) => Err(Failure::Fail(format!(
            "{what}: expected a result or one of {codes:?}, got {}: {error}",
            error.code()
        ))),
    }
}

/// A deterministic 10,000-character string of mixed one- to four-byte
/// characters (quotes, backslashes, percent signs, RTL, emoji), so a backend
/// cannot shrink it by compression.
fn long_mixed() -> String {
    const ALPHABET: &[char] = &[
        'a', 'Z', '0', '\'', '"', '\\', '%', '_', ';', '-', ' ', 'é', 'ß', 'ש', 'ع', '\u{301}',
        '中', '🚀', '👩', '\u{200d}', '\u{202e}',
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    (0..10_000)
        .map(|_| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ALPHABET[((seed >> 33) as usize) % ALPHABET.len()]
        })
        .collect()
}

/// The hostile strings every name is tried with.
fn hostile_strings() -> Vec<String> {
    vec![
        "it's \"quoted\" `back`".to_owned(),
        "'; DROP TABLE events; --".to_owned(),
        "\"); DELETE FROM cursors; --".to_owned(),
        "%".to_owned(),
        "_".to_owned(),
        "\\".to_owned(),
        "100% _match\\_ LIKE '%'".to_owned(),
        "emoji 🚀👩‍👩‍👧 flags 🇫🇷".to_owned(),
        "שלום مرحبا \u{202e}rtl".to_owned(),
        "e\u{301}\u{302} a\u{20dd} combining".to_owned(),
        "x".repeat(10_000),
        long_mixed(),
    ]
}

/// Session ids, event ids and types, target consumers and lanes, claim
/// holders, failure error texts, presence participants and fields, reducer
/// names and the sessions listing all carry quotes, SQL metacharacters,
/// non-ASCII text and 10,000-character strings: each is stored and read back
/// exactly (or refused as `InvalidInput` with nothing changed).
pub(crate) async fn hostile_strings_round_trip_through_every_operation(cx: Cx) -> CaseResult {
    let strings = hostile_strings();
    let mut listed = Vec::new();
    for (n, h) in strings.iter().enumerate() {
        let s = cx.session_id(&format!("{n}:{h}"));
        let event = NewEvent::new(h.clone(), json!({ h.clone(): [h, n] }))
            .with_id(h.clone())
            .with_target(Target::lane(h.clone(), h.clone()));
        let Some(appended) = ensure_unchanged!(cx, &s, when Option::is_none, {
            stored_or_refused("append", cx.append(&s, vec![event.clone()]).await)?
        }) else {
            continue;
        };
        listed.push(s.clone());
        let rows = cx.read_all(&s).await?;
        ensure_eq!(rows, appended.events);
        let row = rows
            .first()
            .ok_or_else(|| Failure::Fail("append returned no row".to_owned()))?;
        ensure_eq!(Some(&row.id), event.id.as_ref());
        ensure_eq!(row.event_type, event.event_type);
        ensure_eq!(row.payload, event.payload);
        let cursor = only(&cx.cursors(&s).await?)?;
        ensure_eq!(cursor.consumer, *h);
        ensure_eq!(cursor.lane.as_deref(), Some(h.as_str()));

        // Claim with a hostile holder, fail with a hostile error text.
        let Some(claim) = ensure_unchanged!(cx, &s, when Option::is_none, {
            stored_or_refused("claim", cx.claim(&s, h).await)?
        }) else {
            continue;
        };
        let head = nth(&claimed(claim)?.0, 0)?;
        ensure_eq!(head.consumer, *h);
        ensure_eq!(head.lane.as_deref(), Some(h.as_str()));
        ensure_eq!(head.dispatch.claim_holder.as_deref(), Some(h.as_str()));
        let failed = ensure_unchanged!(cx, &s, when Option::is_none, {
            stored_or_refused(
                "fail",
                cx.store.fail_attempt(cx.fail_req(&s, &head, h)).await,
            )?
        });
        if failed.is_none() {
            continue;
        }
        let again = nth(&cx.claim_heads(&s, h).await?, 0)?;
        ensure_eq!(again.dispatch.last_error.as_deref(), Some(h.as_str()));
        ensure_eq!(again.dispatch.failure_count, 1);
        completed(cx.complete(&s, &again, vec![]).await?)?;

        // Presence with a hostile participant, field and value.
        let fields: BTreeMap<String, Value> = [(h.clone(), json!(h))].into();
        let meta = PresenceMeta {
            at: 1,
            seen: Some(1),
            ttl_ms: TTL,
        };
        match stored_or_refused(
            "set_presence",
            cx.store.set_presence(&s, h, fields.clone(), meta).await,
        )? {
            Some(result) => {
                ensure_eq!(result.applied, fields);
                ensure_eq!(
                    cx.store.read_presence(&s).await?,
                    vec![PresenceRow::new(
                        h.clone(),
                        h.clone(),
                        json!(h),
                        Some(1),
                        1,
                        cx.now() + TTL
                    )]
                );
            }
            None => ensure_eq!(cx.store.read_presence(&s).await?, vec![]),
        }

        // A snapshot under a hostile reducer name.
        let write = StateWrite {
            index: 1,
            state: json!({ h.clone(): h }),
            pins: vec![],
        };
        let read = match stored_or_refused(
            "write_state",
            cx.store.write_state(&s, h, vec![write.clone()]).await,
        )? {
            Some(()) => Some(a2_store_api::Snapshot::new(1, write.state)),
            None => None,
        };
        ensure_eq!(
            cx.store
                .read_state(&s, h, ReadStateOptions::default())
                .await?
                .snapshot,
            read
        );
    }
    // The sessions listing returns every stored hostile id exactly, in id order.
    let listing = cx
        .store
        .sessions(ListSessions {
            after: Some(cx.prefix.clone()),
            limit: Some(listed.len()),
        })
        .await?;
    let mut expected = listed;
    expected.sort();
    ensure_eq!(
        listing
            .into_iter()
            .map(|info| info.session_id)
            .collect::<Vec<_>>(),
        expected
    );
    Ok(())
}

/// Log consumers whose name, lane and taken type are hostile strings are
/// declared, listed, claimed and completed exactly (or the declaration is
/// refused as `InvalidInput` with nothing changed).
pub(crate) async fn hostile_log_declarations_round_trip(cx: Cx) -> CaseResult {
    for (n, h) in hostile_strings().iter().enumerate() {
        let s = cx.session_id(&format!("log{n}"));
        let declaration = log_consumer(h, h, Some(&[h.as_str()]), true);
        let declared = ensure_unchanged!(cx, &s, when Option::is_none, {
            stored_or_refused(
                "declare",
                cx.append_for(
                    &s,
                    vec![ev("other", "skipped"), ev(h, "taken")],
                    vec![declaration],
                )
                .await,
            )?
        });
        if declared.is_none() {
            continue;
        }
        let cursor = only(&cx.cursors(&s).await?)?;
        ensure_eq!(cursor.consumer, *h);
        ensure_eq!(cursor.lane.as_deref(), Some(h.as_str()));
        ensure_eq!(cursor.types, Some(vec![h.clone()]));
        let head = nth(&cx.claim_heads(&s, h).await?, 0)?;
        ensure_eq!(head.consumer, *h);
        ensure_eq!(head.lane.as_deref(), Some(h.as_str()));
        ensure_eq!(head.event.event_type, *h);
        ensure_eq!(head.event.id, "taken");
        completed(cx.complete(&s, &head, vec![]).await?)?;
        settled(cx.claim(&s, h).await?)?;
    }
    Ok(())
}

/// A 16 MiB JSON string payload is stored and read back exactly (or refused
/// as `InvalidInput` with nothing changed).
pub(crate) async fn sixteen_mib_payload_is_stored_or_refused(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("first")]).await?;
    let big = "é'\"\\%_🚀x".repeat((16 << 20) / 12 + 1);
    let event = NewEvent::new("big", Value::String(big)).with_id("big");
    let stored = ensure_unchanged!(cx, &s, when Option::is_none, {
        stored_or_refused("append", cx.append(&s, vec![event.clone()]).await)?
    });
    if let Some(result) = stored {
        let row = result
            .events
            .first()
            .cloned()
            .ok_or_else(|| Failure::Fail("append returned no row".to_owned()))?;
        ensure!(row.payload == event.payload, "the 16 MiB payload changed");
        let read = cx.read(&s, 1, Some(2)).await?;
        ensure!(
            read.len() == 1 && read[0] == row,
            "the 16 MiB row read back differs"
        );
    }
    Ok(())
}

/// `[[[...]]]` nested `levels` deep, built without recursion.
fn nested(levels: usize) -> Value {
    let mut value = json!([]);
    for _ in 1..levels {
        value = Value::Array(vec![value]);
    }
    value
}

/// An event payload nested 10,000 levels deep is refused as `InvalidInput`
/// with nothing changed (the contract's JSON depth limit), at append and as
/// an event a completion returns; one at the limit is stored exactly.
pub(crate) async fn deeply_nested_payload_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    for levels in [MAX_JSON_DEPTH + 1, 10_000] {
        ensure_unchanged!(
            cx,
            &s,
            {
                let deep = NewEvent::new("deep", nested(levels)).with_id("deep");
                ensure_code!(cx.append(&s, vec![deep]).await, ErrorCode::InvalidInput);
            },
            {
                let deep = NewEvent::new("deep", nested(levels)).with_id("deep");
                ensure_code!(
                    cx.complete(&s, &head, vec![deep]).await,
                    ErrorCode::InvalidInput
                );
            },
        );
    }
    let limit = NewEvent::new("deep", nested(MAX_JSON_DEPTH)).with_id("deep");
    let stored = cx.append(&s, vec![limit.clone()]).await?;
    let read = cx.read(&s, 1, None).await?;
    ensure_eq!(read, stored.events);
    ensure!(
        read.first().map(|row| &row.payload) == Some(&limit.payload),
        "the payload at the depth limit changed"
    );
    Ok(())
}

/// A state nested 10,000 levels deep is refused as `InvalidInput` and the
/// reducer keeps no snapshot.
pub(crate) async fn deeply_nested_state_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let before: StateRead = cx
        .store
        .read_state(&s, "r", ReadStateOptions::default())
        .await?;
    for levels in [MAX_JSON_DEPTH + 1, 10_000] {
        let write = StateWrite {
            index: 1,
            state: nested(levels),
            pins: vec![],
        };
        ensure_code!(
            cx.store.write_state(&s, "r", vec![write]).await,
            ErrorCode::InvalidInput
        );
        ensure_eq!(
            cx.store
                .read_state(&s, "r", ReadStateOptions::default())
                .await?,
            before
        );
    }
    Ok(())
}

/// A presence value nested 10,000 levels deep is refused as `InvalidInput`
/// and no field is written.
pub(crate) async fn deeply_nested_presence_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    for levels in [MAX_JSON_DEPTH + 1, 10_000] {
        let values: BTreeMap<String, Value> = [
            ("ok".to_owned(), json!(1)),
            ("deep".to_owned(), nested(levels)),
        ]
        .into();
        let meta = PresenceMeta {
            at: 1,
            seen: None,
            ttl_ms: TTL,
        };
        ensure_code!(
            cx.store.set_presence(&s, "ann", values, meta).await,
            ErrorCode::InvalidInput
        );
        ensure_eq!(cx.store.read_presence(&s).await?, vec![]);
    }
    Ok(())
}

/// Indexes, counts, limits, attempts and times at 0, negative, `i64::MAX`,
/// `i64::MAX + 1` and `u64::MAX` through every operation: each answers or
/// fails with a typed error (never `Backend`, never a panic or silent
/// wrap-around), and a refused call changes nothing.
pub(crate) async fn numbers_at_their_limits_are_typed(cx: Cx) -> CaseResult {
    const ERR: &[ErrorCode] = &[ErrorCode::InvalidInput, ErrorCode::NoSuchEvent];
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let store = &cx.store;
    let indexes = [0, 1, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX];
    let times = [i64::MIN, -1, 0, 1, i64::MAX];
    for &index in &indexes {
        ensure_unchanged!(cx, &s, {
            for (after, through) in [
                (Some(index), None),
                (None, Some(index)),
                (Some(index), Some(index)),
            ] {
                for limit in [None, Some(0), Some(1), Some(usize::MAX)] {
                    let rows = typed(
                        "read",
                        store
                            .read(
                                &s,
                                ReadOptions {
                                    after,
                                    through,
                                    limit,
                                },
                            )
                            .await,
                        ERR,
                    )?;
                    if let Some(rows) = rows {
                        ensure!(
                            rows.iter().all(|row| after.is_none_or(|a| row.index > a)
                                && through.is_none_or(|t| row.index <= t)),
                            "read(after {after:?}, through {through:?}) returned rows outside its bounds"
                        );
                    }
                }
            }
            for attempt in [0, 1, u32::MAX] {
                if index == head.event.index && attempt == head.dispatch.attempt_count {
                    continue;
                }
                typed(
                    "complete",
                    store
                        .complete_attempt(CompleteRequest {
                            incarnation: None,
                            session_id: s.clone(),
                            consumer: "agent".into(),
                            lane: Some("L1".into()),
                            index,
                            attempt,
                            events: vec![],
                            consumers: None,
                        })
                        .await,
                    ERR,
                )?;
                for retry in [None, Some(i64::MIN), Some(-1), Some(0), Some(i64::MAX)] {
                    typed(
                        "fail",
                        store
                            .fail_attempt(FailRequest {
                                incarnation: None,
                                session_id: s.clone(),
                                consumer: "agent".into(),
                                lane: Some("L1".into()),
                                index,
                                attempt,
                                error: String::new(),
                                max_failures: Some(u32::MAX),
                                retry_after_ms: retry,
                            })
                            .await,
                        ERR,
                    )?;
                }
            }
            typed(
                "redrive",
                store
                    .redrive(RedriveRequest {
                        incarnation: None,
                        lane: None,
                        session_id: s.clone(),
                        consumer: "agent".into(),
                        index,
                        action: RedriveAction::Retry,
                        consumers: None,
                    })
                    .await,
                ERR,
            )?;
            typed(
                "read_state",
                store
                    .read_state(&s, "r", ReadStateOptions { at: Some(index) })
                    .await,
                ERR,
            )?;
            typed("subscribe", store.subscribe(&s, index).await, ERR)?;
            typed(
                "clear",
                store
                    .clear(ClearRequest {
                        incarnation: None,
                        session_id: s.clone(),
                        if_last_index: Some(index.max(3)),
                        cause: None,
                    })
                    .await,
                ERR,
            )?;
        });
    }
    // Lease times: a claim and a renewal of it on a fresh session each,
    // then another holder's claim with the same lease.
    for (n, &time) in times.iter().enumerate() {
        for (m, (ttl, expires)) in [(Some(time), None), (None, Some(time))]
            .into_iter()
            .enumerate()
        {
            let t = cx.session_id(&format!("lease-{n}-{m}"));
            cx.append(&t, vec![to_lane("a", "agent", "L1")]).await?;
            let held = nth(&cx.claim_heads(&t, "w1").await?, 0)?;
            let renewed = typed(
                "renew",
                store
                    .renew_claims(RenewRequest {
                        incarnation: None,
                        session_id: t.clone(),
                        holder: "w1".into(),
                        claims: vec![HeldClaim {
                            cursor: held.cursor_ref(),
                            attempt: held.dispatch.attempt_count,
                        }],
                        ttl_ms: ttl,
                        expires_at_ms: expires,
                    })
                    .await,
                ERR,
            )?;
            // An accepted lease is exactly the contract's expiry: a TTL
            // saturates instead of wrapping, an absolute time is kept.
            let expected = match renewed {
                Some(_) => a2_store_api::dispatch::lease_expiry(cx.now(), ttl, expires)?,
                None => cx.now() + TTL,
            };
            let cursor = only(&cx.cursors(&t).await?)?;
            ensure_eq!(cursor.dispatch.claim_expires_at, Some(expected));
            let claim = typed(
                "claim",
                store
                    .claim_available(ClaimRequest {
                        ttl_ms: ttl,
                        expires_at_ms: expires,
                        ..cx.req(&t, "w2")
                    })
                    .await,
                ERR,
            )?;
            if let Some(ClaimResult::Claimed { heads, .. }) = claim {
                ensure!(
                    expected <= cx.now(),
                    "claim with ttl {ttl:?} / expires {expires:?} claimed a busy head"
                );
                let taken = nth(&heads, 0)?;
                let lease = a2_store_api::dispatch::lease_expiry(cx.now(), ttl, expires)?;
                ensure_eq!(taken.dispatch.claim_expires_at, Some(lease));
            }
        }
        let presence = typed(
            "set_presence",
            store
                .set_presence(
                    &s,
                    "ann",
                    [("x".to_owned(), json!(time))].into(),
                    PresenceMeta {
                        at: time,
                        seen: Some(u64::MAX),
                        ttl_ms: time,
                    },
                )
                .await,
            ERR,
        )?;
        if presence.is_none() {
            ensure_eq!(
                store
                    .read_presence(&s)
                    .await?
                    .iter()
                    .filter(|row| row.value == json!(time))
                    .count(),
                0
            );
        }
        typed("read_presence", store.read_presence(&s).await, ERR)?;
    }
    // Claim bounds: limits and `through` at their extremes.
    for &through in &indexes {
        for limit in [Some(0), Some(1), Some(usize::MAX)] {
            typed(
                "claim",
                store
                    .claim_available(ClaimRequest {
                        through: Some(through),
                        limit,
                        max_failures: Some(u32::MAX),
                        ..cx.req(&s, "w3")
                    })
                    .await,
                ERR,
            )?;
        }
    }
    // Snapshots and the sessions listing at the index and limit extremes.
    for &index in &indexes {
        typed(
            "write_state",
            store
                .write_state(
                    &s,
                    "r",
                    vec![StateWrite {
                        index,
                        state: json!(index),
                        pins: vec![at("agent", Some("L1"), index)],
                    }],
                )
                .await,
            ERR,
        )?;
    }
    for limit in [Some(0), Some(1), Some(usize::MAX)] {
        typed(
            "sessions",
            store
                .sessions(ListSessions {
                    after: Some(s.clone()),
                    limit,
                })
                .await,
            ERR,
        )?;
    }
    Ok(())
}
