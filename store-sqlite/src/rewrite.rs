//! `rewrite_payloads`: compare-and-set rewrites of stored payloads in one
//! transaction on the writer. This module reads what is stored for each
//! item, [`a2_store_api::rewrite::verdict`] decides whether the call
//! applies (and which snapshot copies a state item rewrites), and only then
//! are the payload columns updated; no other column is touched.

use a2_store_api::rewrite::{self, Found, FoundState};
use a2_store_api::{RewritePayloadsRequest, RewritePayloadsResult, StoreError};
use rusqlite::{Connection, OptionalExtension};
use serde_json::Value;

use crate::errors::SqlContext;
use crate::pool::Ctx;
use crate::session;
use crate::values::{Json, SqlIndex};

/// What one state item found: the head snapshot's state when at the item's
/// index, and the checkpoint's.
type StoredState = (Option<Value>, Option<Value>);

/// Applies a validated rewrite at the store time of `ctx`, all items or none.
pub(crate) fn rewrite_payloads(
    tx: &Connection,
    ctx: &Ctx,
    request: &RewritePayloadsRequest,
) -> Result<RewritePayloadsResult, StoreError> {
    let session = session::find(tx, &request.session_id)?;
    let sid = session.as_ref().map(|session| session.sid);
    let events = match sid {
        Some(sid) => stored_events(tx, sid, request)?,
        None => vec![None; request.events.len()],
    };
    let states = match sid {
        Some(sid) => stored_states(tx, sid, request)?,
        None => vec![(None, None); request.states.len()],
    };
    let presence = match sid {
        Some(sid) => stored_presence(tx, sid, request)?,
        None => vec![None; request.presence.len()],
    };
    let found = Found {
        incarnation: session
            .as_ref()
            .and_then(|session| session.exists().then_some(session.incarnation)),
        clear_index: session.as_ref().map_or(0, |session| session.clear),
        now_ms: ctx.clock.now_ms(),
        events: events
            .iter()
            .map(|event| event.as_ref().map(|(ty, payload)| (ty.as_str(), payload)))
            .collect(),
        states: states
            .iter()
            .map(|(head, checkpoint)| FoundState {
                head: head.as_ref(),
                checkpoint: checkpoint.as_ref(),
            })
            .collect(),
        presence: presence
            .iter()
            .map(|entry| entry.as_ref().map(|(value, expires)| (value, *expires)))
            .collect(),
    };
    let plan = rewrite::verdict(request, &found)?;
    let Some(sid) = sid else {
        // Only an empty request passes without a session: nothing to write.
        return Ok(RewritePayloadsResult::of(request));
    };
    for item in &request.events {
        let idx = SqlIndex::new("event index", item.index)?;
        tx.prepare_cached("UPDATE events SET payload = ?3 WHERE sid = ?1 AND idx = ?2")
            .and_then(|mut stmt| stmt.execute((sid, idx, Json(&item.new))))
            .ctx("rewriting an event payload")?;
    }
    for (item, copies) in request.states.iter().zip(&plan.states) {
        let idx = SqlIndex::new("snapshot index", item.index)?;
        if copies.head {
            tx.prepare_cached(
                "UPDATE snapshot_heads SET state = ?4 WHERE sid = ?1 AND reducer = ?2 AND idx = ?3",
            )
            .and_then(|mut stmt| stmt.execute((sid, &item.reducer, idx, Json(&item.new))))
            .ctx("rewriting a snapshot")?;
        }
        if copies.checkpoint {
            tx.prepare_cached(
                "UPDATE checkpoints SET state = ?4 WHERE sid = ?1 AND reducer = ?2 AND idx = ?3",
            )
            .and_then(|mut stmt| stmt.execute((sid, &item.reducer, idx, Json(&item.new))))
            .ctx("rewriting a checkpoint")?;
        }
    }
    for item in &request.presence {
        tx.prepare_cached(
            "UPDATE presence SET value = ?4 WHERE sid = ?1 AND participant = ?2 AND field = ?3",
        )
        .and_then(|mut stmt| stmt.execute((sid, &item.participant, &item.field, Json(&item.new))))
        .ctx("rewriting a presence value")?;
    }
    Ok(RewritePayloadsResult::of(request))
}

/// The type and payload stored at each event item's index.
fn stored_events(
    tx: &Connection,
    sid: i64,
    request: &RewritePayloadsRequest,
) -> Result<Vec<Option<(String, Value)>>, StoreError> {
    let mut stmt = tx
        .prepare_cached("SELECT type, payload FROM events WHERE sid = ?1 AND idx = ?2")
        .ctx("reading events to rewrite")?;
    request
        .events
        .iter()
        .map(|item| {
            let Some(idx) = SqlIndex::fitting(item.index) else {
                return Ok(None);
            };
            stmt.query_row((sid, idx), |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, Json<Value>>(1)?.0))
            })
            .optional()
            .ctx("reading events to rewrite")
        })
        .collect()
}

/// The head snapshot (when at the item's index) and checkpoint stored for
/// each state item.
fn stored_states(
    tx: &Connection,
    sid: i64,
    request: &RewritePayloadsRequest,
) -> Result<Vec<StoredState>, StoreError> {
    let mut heads = tx
        .prepare_cached(
            "SELECT state FROM snapshot_heads WHERE sid = ?1 AND reducer = ?2 AND idx = ?3",
        )
        .ctx("reading snapshots to rewrite")?;
    let mut checkpoints = tx
        .prepare_cached(
            "SELECT state FROM checkpoints WHERE sid = ?1 AND reducer = ?2 AND idx = ?3",
        )
        .ctx("reading checkpoints to rewrite")?;
    request
        .states
        .iter()
        .map(|item| {
            let Some(idx) = SqlIndex::fitting(item.index) else {
                return Ok((None, None));
            };
            let key = (sid, &item.reducer, idx);
            let state = |row: &rusqlite::Row<'_>| Ok(row.get::<_, Json<Value>>(0)?.0);
            let head = heads
                .query_row(key, state)
                .optional()
                .ctx("reading snapshots to rewrite")?;
            let checkpoint = checkpoints
                .query_row(key, state)
                .optional()
                .ctx("reading checkpoints to rewrite")?;
            Ok((head, checkpoint))
        })
        .collect()
}

/// The value (`null` for a tombstone) and expiry stored for each presence item.
fn stored_presence(
    tx: &Connection,
    sid: i64,
    request: &RewritePayloadsRequest,
) -> Result<Vec<Option<(Value, i64)>>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT value, expires_at FROM presence WHERE sid = ?1 AND participant = ?2 AND field = ?3",
        )
        .ctx("reading presence to rewrite")?;
    request
        .presence
        .iter()
        .map(|item| {
            stmt.query_row((sid, &item.participant, &item.field), |row| {
                Ok((row.get::<_, Json<Value>>(0)?.0, row.get::<_, i64>(1)?))
            })
            .optional()
            .ctx("reading presence to rewrite")
        })
        .collect()
}
