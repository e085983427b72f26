//! Rewriting stored payloads (`rewrite_payloads`): only the payload bytes
//! change and everything reads them back (reads, streams opened later,
//! claims, snapshots, presence); a stale `expected` refuses the whole page
//! and changes nothing; missing, cleared and deleted items are typed
//! errors; bad input is refused; open streams are sent nothing; replays
//! compare the rewritten rows.

use std::collections::BTreeMap;
use std::time::Duration;

use a2_store_api::validate::MAX_JSON_DEPTH;
use a2_store_api::{
    ClearRequest, CompleteResult, DeleteSessionRequest, ErrorCode, EventStream, ListSessions,
    NewEvent, PresenceMeta, PresenceRow, ReadStateOptions, RewritePayloadsRequest,
    RewritePayloadsResult, Snapshot, StateWrite, StoreError, StoredEvent, MAX_REWRITE_ITEMS,
};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::support::*;

/// How long a case waits for a stream item before failing.
const WAITING: Duration = Duration::from_secs(10);

/// The error `result` was refused with, which must have `code`.
fn refused<T: std::fmt::Debug>(
    result: a2_store_api::Result<T>,
    code: ErrorCode,
) -> std::result::Result<StoreError, Failure> {
    match result {
        Err(error) if error.code() == code => Ok(error),
        Err(error) => Err(Failure::Fail(format!(
            "expected error {code}, got {}: {error}",
            error.code()
        ))),
        Ok(value) => Err(Failure::Fail(format!(
            "expected error {code}, but the call succeeded with {value:?}"
        ))),
    }
}

/// The next item of `stream`, failing the case when it ends, errs or
/// yields nothing for a while.
async fn next_item(stream: &mut EventStream) -> std::result::Result<StoredEvent, Failure> {
    let item = tokio::time::timeout(WAITING, stream.next())
        .await
        .map_err(|_| Failure::Fail("the stream yielded nothing".to_owned()))?
        .ok_or_else(|| Failure::Fail("the stream ended".to_owned()))?;
    Ok(item?)
}

/// Sets `participant`'s `field` in `s` to `value`, seen through index 2,
/// for an hour.
async fn set_field(cx: &Cx, s: &str, participant: &str, field: &str, value: Value) -> CaseResult {
    cx.store
        .set_presence(
            s,
            participant,
            BTreeMap::from([(field.to_owned(), value)]),
            PresenceMeta {
                at: cx.now(),
                seen: Some(2),
                ttl_ms: 3_600_000,
            },
        )
        .await?;
    Ok(())
}

/// Writes `state` as reducer `r`'s snapshot at `index`, unpinned.
async fn write_state(cx: &Cx, s: &str, index: u64, state: Value) -> CaseResult {
    let write = StateWrite {
        index,
        state,
        pins: Vec::new(),
    };
    cx.store.write_state(s, "r", vec![write]).await?;
    Ok(())
}

/// Reducer `r`'s snapshot of `s` at or below `at`.
async fn snapshot(
    cx: &Cx,
    s: &str,
    at: Option<u64>,
) -> std::result::Result<Option<Snapshot>, Failure> {
    Ok(cx
        .store
        .read_state(s, "r", ReadStateOptions { at })
        .await?
        .snapshot)
}

/// A session with a claimed lane head (index 1, held by `w1`), a second
/// lane event, a plain event, a snapshot of reducer `r` at 2 and alice's
/// `status` field.
async fn busy_session(cx: &Cx, s: &str) -> CaseResult {
    cx.append(
        s,
        vec![
            to_lane("a", "agent", "main"),
            to_lane("b", "agent", "main"),
            msg("c"),
        ],
    )
    .await?;
    let heads = cx.claim_heads(s, "w1").await?;
    ensure_eq!(
        heads
            .iter()
            .map(|head| head.event.index)
            .collect::<Vec<_>>(),
        vec![1]
    );
    write_state(cx, s, 2, json!({"turns": 1})).await?;
    set_field(cx, s, "alice", "status", json!("typing")).await
}

/// A rewrite replaces the payloads named and nothing else: rows keep id,
/// type, index, time and cause; cursors and the lease held stay; a stream
/// opened later, a claim of the head after its lease ran out, the snapshot
/// and the presence field (its `at`, `seen` and expiry kept) all read the
/// new payloads.
pub(crate) async fn rewrite_replaces_the_payload_and_nothing_else(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    busy_session(&cx, &s).await?;
    let before = cx.state(&s).await?;
    let presence_before = cx.store.read_presence(&s).await?;
    let request = RewritePayloadsRequest::new(&s)
        .event(1, json!({"id": "a"}), json!({"sealed": "A"}))
        .event(3, json!({"id": "c"}), json!({"sealed": "C"}))
        .state("r", 2, json!({"turns": 1}), json!({"sealed": "T"}))
        .presence("alice", "status", json!("typing"), json!({"sealed": "S"}));
    let done = cx.store.rewrite_payloads(request).await?;
    ensure_eq!(done, RewritePayloadsResult::new(2, 1, 1));

    let after = cx.state(&s).await?;
    ensure_eq!(after.cursors, before.cursors, "cursors and leases are kept");
    ensure_eq!(after.dead, before.dead);
    ensure_eq!(after.events.len(), before.events.len());
    for (old, new) in before.events.iter().zip(&after.events) {
        ensure_eq!(
            (
                &new.id,
                &new.event_type,
                new.index,
                new.created_at,
                &new.cause
            ),
            (
                &old.id,
                &old.event_type,
                old.index,
                old.created_at,
                &old.cause
            )
        );
    }
    let payloads: Vec<Value> = after
        .events
        .iter()
        .map(|e| e.payload.as_value().clone())
        .collect();
    ensure_eq!(
        payloads,
        vec![
            json!({"sealed": "A"}),
            json!({"id": "b"}),
            json!({"sealed": "C"})
        ]
    );

    let mut stream = cx.store.subscribe(&s, 0).await?;
    let mut streamed = Vec::new();
    for _ in 0..3 {
        streamed.push(next_item(&mut stream).await?);
    }
    ensure_eq!(
        streamed,
        after.events,
        "a stream opened later reads the new payloads"
    );

    ensure_eq!(
        snapshot(&cx, &s, None).await?,
        Some(Snapshot::new(2, json!({"sealed": "T"})))
    );
    let presence = cx.store.read_presence(&s).await?;
    let expected: Vec<PresenceRow> = presence_before
        .iter()
        .map(|row| {
            PresenceRow::new(
                row.participant.clone(),
                row.field.clone(),
                json!({"sealed": "S"}),
                row.seen,
                row.at,
                row.expires_at,
            )
        })
        .collect();
    ensure_eq!(presence, expected, "only the value changes");

    // The head claimed before the rewrite, claimed again once its lease ran
    // out, carries the new payload.
    cx.advance(TTL + 1);
    let heads = cx.claim_heads(&s, "w2").await?;
    let head = nth(&heads, 0)?;
    ensure_eq!(
        (head.event.index, head.dispatch.attempt_count),
        (1, 2),
        "the same head, attempt 2"
    );
    ensure_eq!(head.event.payload, json!({"sealed": "A"}));
    Ok(())
}

/// One item whose stored payload is not its `expected` refuses the whole
/// call with `PAYLOAD_MISMATCH` naming the first such item (events, then
/// states, then presence): no event, state or presence value changes.
pub(crate) async fn rewrite_with_a_stale_expected_refuses_the_whole_page(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    busy_session(&cx, &s).await?;
    let presence = cx.store.read_presence(&s).await?;
    let state = snapshot(&cx, &s, None).await?;
    let good = RewritePayloadsRequest::new(&s)
        .event(1, json!({"id": "a"}), json!("A"))
        .state("r", 2, json!({"turns": 1}), json!("T"))
        .presence("alice", "status", json!("typing"), json!("S"));

    let stale_event = good.clone().event(2, json!({"id": "changed"}), json!("B"));
    let error = ensure_unchanged!(cx, &s, when |_: &_| true, {
        refused(
            cx.store.rewrite_payloads(stale_event).await,
            ErrorCode::PayloadMismatch,
        )?
    });
    ensure!(
        error.to_string().contains("event 2"),
        "the error names the item: {error}"
    );

    let mut stale_state = good.clone();
    stale_state.states[0].expected = json!({"turns": 0});
    stale_state.presence[0].expected = json!("away");
    let error = ensure_unchanged!(cx, &s, when |_: &_| true, {
        refused(
            cx.store.rewrite_payloads(stale_state).await,
            ErrorCode::PayloadMismatch,
        )?
    });
    ensure!(
        error.to_string().contains("reducer 'r' at index 2"),
        "the first stale item, the state, is named: {error}"
    );

    let mut stale_presence = good.clone();
    stale_presence.presence[0].expected = json!("away");
    let error = ensure_unchanged!(cx, &s, when |_: &_| true, {
        refused(
            cx.store.rewrite_payloads(stale_presence).await,
            ErrorCode::PayloadMismatch,
        )?
    });
    ensure!(
        error
            .to_string()
            .contains("'status' of participant 'alice'"),
        "the error names the field: {error}"
    );

    ensure_eq!(
        snapshot(&cx, &s, None).await?,
        state,
        "the state is unchanged"
    );
    ensure_eq!(
        cx.store.read_presence(&s).await?,
        presence,
        "presence is unchanged"
    );
    // The same page, all current, applies.
    ensure_eq!(
        cx.store.rewrite_payloads(good).await?,
        RewritePayloadsResult::new(1, 1, 1)
    );
    Ok(())
}

/// Items that are not stored are typed errors naming them, and change
/// nothing: an event above the head or in a session never written
/// (`NO_SUCH_EVENT`), a snapshot at an index or of a reducer never
/// written, a presence field never set or expired (`NOT_FOUND`). An empty
/// request is a no-op.
pub(crate) async fn rewrite_of_missing_items_is_a_typed_error(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    busy_session(&cx, &s).await?;
    let rewrite = || RewritePayloadsRequest::new(&s);
    ensure_unchanged!(cx, &s, {
        let error = refused(
            cx.store
                .rewrite_payloads(rewrite().event(1, json!({"id": "a"}), json!(1)).event(
                    4,
                    json!(null),
                    json!(1),
                ))
                .await,
            ErrorCode::NoSuchEvent,
        )?;
        ensure!(error.to_string().contains("index 4"), "{error}");
        refused(
            cx.store
                .rewrite_payloads(rewrite().state("r", 3, json!({"turns": 1}), json!(1)))
                .await,
            ErrorCode::NotFound,
        )?;
        refused(
            cx.store
                .rewrite_payloads(rewrite().state("other", 2, json!({"turns": 1}), json!(1)))
                .await,
            ErrorCode::NotFound,
        )?;
        let error = refused(
            cx.store
                .rewrite_payloads(rewrite().presence("bob", "status", json!("typing"), json!(1)))
                .await,
            ErrorCode::NotFound,
        )?;
        ensure!(error.to_string().contains("participant 'bob'"), "{error}");
        ensure_eq!(
            cx.store.rewrite_payloads(rewrite()).await?,
            RewritePayloadsResult::new(0, 0, 0)
        );
    });
    let never = cx.session_id("never-written");
    refused(
        cx.store
            .rewrite_payloads(RewritePayloadsRequest::new(&never).event(1, json!(1), json!(2)))
            .await,
        ErrorCode::NoSuchEvent,
    )?;
    refused(
        cx.store
            .rewrite_payloads(RewritePayloadsRequest::new(&never).presence(
                "a",
                "f",
                json!(1),
                json!(2),
            ))
            .await,
        ErrorCode::NotFound,
    )?;
    let listed = cx.store.sessions(ListSessions::default()).await?;
    ensure!(
        listed.iter().all(|info| info.session_id != never),
        "a refused rewrite creates no session"
    );
    // An expired field is not stored any more.
    cx.advance(3_600_000);
    refused(
        cx.store
            .rewrite_payloads(rewrite().presence("alice", "status", json!("typing"), json!(1)))
            .await,
        ErrorCode::NotFound,
    )?;
    Ok(())
}

/// After a clear, events below it are gone (`NO_SUCH_EVENT`, even before
/// they are reclaimed: reclaim them instead), the marker's payload is the
/// store's (`INVALID_INPUT`), and snapshots below it are `NOT_FOUND`;
/// events above it are rewritten. A request naming an incarnation of a
/// session deleted since is `SESSION_DELETED`, and the new session's rows
/// are not touched.
pub(crate) async fn rewrite_after_a_clear_or_a_delete_is_refused(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    write_state(&cx, &s, 1, json!("one")).await?;
    cx.store.clear(ClearRequest::new(&s)).await?;
    cx.append(&s, vec![msg("d")]).await?;
    let rewrite = || RewritePayloadsRequest::new(&s);
    ensure_unchanged!(cx, &s, {
        refused(
            cx.store
                .rewrite_payloads(rewrite().event(2, json!({"id": "b"}), json!("B")))
                .await,
            ErrorCode::NoSuchEvent,
        )?;
        let error = refused(
            cx.store
                .rewrite_payloads(rewrite().event(3, json!(null), json!("marker")))
                .await,
            ErrorCode::InvalidInput,
        )?;
        ensure!(error.to_string().contains("clear marker"), "{error}");
        refused(
            cx.store
                .rewrite_payloads(rewrite().state("r", 1, json!("one"), json!("ONE")))
                .await,
            ErrorCode::NotFound,
        )?;
    });
    ensure_eq!(
        cx.store
            .rewrite_payloads(rewrite().event(4, json!({"id": "d"}), json!("D")))
            .await?,
        RewritePayloadsResult::new(1, 0, 0)
    );

    let t = cx.session_id("t");
    cx.append(&t, vec![msg("a")]).await?;
    let listed = cx.store.sessions(ListSessions::default()).await?;
    let old = listed
        .iter()
        .find(|info| info.session_id == t)
        .map(|info| info.incarnation)
        .ok_or_else(|| Failure::Fail("the session is not listed".to_owned()))?;
    cx.store
        .delete_session(DeleteSessionRequest::new(&t).forced())
        .await?;
    cx.append(&t, vec![msg("a")]).await?;
    ensure_unchanged!(cx, &t, {
        refused(
            cx.store
                .rewrite_payloads(RewritePayloadsRequest::new(&t).with_incarnation(old).event(
                    1,
                    json!({"id": "a"}),
                    json!("A"),
                ))
                .await,
            ErrorCode::SessionDeleted,
        )?;
    });
    Ok(())
}

/// Bad input is `INVALID_INPUT` and changes nothing: an empty session id,
/// more than `MAX_REWRITE_ITEMS` items, event index 0, an item named twice,
/// an empty reducer or participant, a `null` presence value, a new payload
/// nested deeper than `MAX_JSON_DEPTH`.
pub(crate) async fn rewrite_refuses_bad_input(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    busy_session(&cx, &s).await?;
    let rewrite = || RewritePayloadsRequest::new(&s);
    let mut deep = json!(1);
    for _ in 0..=MAX_JSON_DEPTH {
        deep = json!([deep]);
    }
    let mut too_many = rewrite();
    for index in 1..=MAX_REWRITE_ITEMS as u64 {
        too_many = too_many.event(index, json!(null), json!(null));
    }
    too_many = too_many.presence("alice", "status", json!("typing"), json!("x"));
    let bad = vec![
        RewritePayloadsRequest::new("").event(1, json!({"id": "a"}), json!(1)),
        too_many,
        rewrite().event(0, json!(null), json!(1)),
        rewrite()
            .event(1, json!({"id": "a"}), json!(1))
            .event(1, json!({"id": "a"}), json!(2)),
        rewrite()
            .state("r", 2, json!({"turns": 1}), json!(1))
            .state("r", 2, json!({"turns": 1}), json!(2)),
        rewrite()
            .presence("alice", "status", json!("typing"), json!(1))
            .presence("alice", "status", json!("typing"), json!(2)),
        rewrite().state("", 2, json!({"turns": 1}), json!(1)),
        rewrite().presence("", "status", json!("typing"), json!(1)),
        rewrite().presence("alice", "status", json!("typing"), json!(null)),
        rewrite().event(1, json!({"id": "a"}), deep.clone()),
        rewrite().state("r", 2, json!({"turns": 1}), deep),
    ];
    let state = snapshot(&cx, &s, None).await?;
    let presence = cx.store.read_presence(&s).await?;
    ensure_unchanged!(cx, &s, {
        for request in bad {
            let items = request.len();
            let result = cx.store.rewrite_payloads(request).await;
            ensure!(
                matches!(&result, Err(error) if error.code() == ErrorCode::InvalidInput),
                "a request of {items} items answered {result:?}"
            );
        }
    });
    ensure_eq!(snapshot(&cx, &s, None).await?, state);
    ensure_eq!(cx.store.read_presence(&s).await?, presence);
    Ok(())
}

/// A state item rewrites every stored copy of the snapshot at its index
/// that holds `expected`: a checkpoint kept by a pin is read back new once
/// the head snapshot has moved on.
pub(crate) async fn rewrite_of_a_state_reaches_its_pinned_checkpoint(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "main"), msg("b"), msg("c")])
        .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    let pin = nth(&heads, 0)?.cause().cursor_ref();
    let pinned = StateWrite {
        index: 1,
        state: json!("one"),
        pins: vec![pin],
    };
    cx.store.write_state(&s, "r", vec![pinned]).await?;
    ensure_eq!(
        cx.store
            .rewrite_payloads(RewritePayloadsRequest::new(&s).state(
                "r",
                1,
                json!("one"),
                json!("ONE")
            ))
            .await?,
        RewritePayloadsResult::new(0, 1, 0)
    );
    write_state(&cx, &s, 3, json!("three")).await?;
    ensure_eq!(
        snapshot(&cx, &s, Some(2)).await?,
        Some(Snapshot::new(1, json!("ONE"))),
        "the pinned checkpoint was rewritten with the head snapshot"
    );
    ensure_eq!(
        snapshot(&cx, &s, None).await?,
        Some(Snapshot::new(3, json!("three")))
    );
    Ok(())
}

/// A stream open during a rewrite is sent nothing for it: its next item is
/// the next append, not a rewritten row.
pub(crate) async fn open_streams_are_sent_nothing_by_a_rewrite(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let mut stream = cx.store.subscribe(&s, 0).await?;
    ensure_eq!(next_item(&mut stream).await?.payload, json!({"id": "a"}));
    cx.store
        .rewrite_payloads(RewritePayloadsRequest::new(&s).event(1, json!({"id": "a"}), json!("A")))
        .await?;
    cx.append(&s, vec![msg("b")]).await?;
    let item = next_item(&mut stream).await?;
    ensure_eq!(
        (item.index, item.payload.as_value()),
        (2, &json!({"id": "b"}))
    );
    Ok(())
}

/// Replays compare what is stored, so after a rewrite a repeated
/// completion or append replays with the new payload and is
/// `IDEMPOTENCY_CONFLICT` with the old one (a payload layer that rewrote
/// its rows to a new key encodes a replay under that key too).
pub(crate) async fn replays_after_a_rewrite_compare_the_rewritten_rows(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "main")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let reply = |payload: Value| NewEvent::new("reply", payload).with_id("r1");
    let done = completed(cx.complete(&s, &head, vec![reply(json!({"v": 1}))]).await?)?;
    let index = done
        .first()
        .map(|event| event.index)
        .ok_or_else(|| Failure::Fail("the completion appended nothing".to_owned()))?;
    cx.store
        .rewrite_payloads(
            RewritePayloadsRequest::new(&s)
                .event(index, json!({"v": 1}), json!({"v": 2}))
                .event(1, json!({"id": "a"}), json!({"id": "A"})),
        )
        .await?;
    ensure_unchanged!(cx, &s, {
        refused(
            cx.complete(&s, &head, vec![reply(json!({"v": 1}))]).await,
            ErrorCode::IdempotencyConflict,
        )?;
        let replayed = cx.complete(&s, &head, vec![reply(json!({"v": 2}))]).await?;
        let CompleteResult::Completed { events } = replayed else {
            return Err(Failure::Fail(format!(
                "expected a replay, got {replayed:?}"
            )));
        };
        ensure_eq!(
            events
                .iter()
                .map(|e| e.payload.as_value().clone())
                .collect::<Vec<_>>(),
            vec![json!({"v": 2})]
        );
        refused(
            cx.append(&s, vec![msg("a")]).await,
            ErrorCode::IdempotencyConflict,
        )?;
        let again = cx
            .append(
                &s,
                vec![NewEvent::new("msg", json!({"id": "A"})).with_id("a")],
            )
            .await?;
        ensure_eq!(idx(&again.events), vec![1]);
    });
    Ok(())
}
