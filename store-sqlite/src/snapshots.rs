//! `write_state` and `read_state`: the head snapshot of each reducer plus
//! checkpoints kept while one of their pins (a cursor head) holds (released
//! in [`crate::pins`]). Only a cache.

use a2_store_api::dispatch::cleared;
use a2_store_api::{Snapshot, StateRead, StateWrite, StoreError};
use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::Value;

use crate::cursor_rows;
use crate::errors::SqlContext;
use crate::session::{self, SessionRow};
use crate::values::{Json, SqlIndex};

/// Drops snapshots below the clear (after a finished reclaim).
pub(crate) fn drop_below(tx: &Connection, session: &SessionRow) -> Result<(), StoreError> {
    let clear = SqlIndex::new("clear index", session.clear)?;
    tx.prepare_cached("DELETE FROM snapshot_heads WHERE sid = ?1 AND idx < ?2")
        .and_then(|mut stmt| stmt.execute((session.sid, clear)))
        .ctx("dropping old snapshots")?;
    tx.prepare_cached("DELETE FROM checkpoints WHERE sid = ?1 AND idx < ?2")
        .and_then(|mut stmt| stmt.execute((session.sid, clear)))
        .ctx("dropping old checkpoints")?;
    tx.prepare_cached("DELETE FROM pins WHERE sid = ?1 AND cp_idx < ?2")
        .and_then(|mut stmt| stmt.execute((session.sid, clear)))
        .ctx("dropping old pins")?;
    Ok(())
}

/// Applies `writes` in index order: each becomes the reducer's head snapshot
/// and, when one of its pins holds, a checkpoint kept by those pins. Writes
/// below the clear are ignored.
pub(crate) fn write_state(
    tx: &Connection,
    session_id: &str,
    reducer: &str,
    mut writes: Vec<StateWrite>,
) -> Result<(), StoreError> {
    if writes.is_empty() {
        return Ok(());
    }
    let session = session::find_or_create(tx, session_id)?;
    writes.sort_by_key(|write| write.index);
    for write in writes {
        if !write.kept(session.clear) {
            continue;
        }
        let idx = SqlIndex::new("snapshot index", write.index)?;
        let state = Json(&write.state);
        let mut held = Vec::new();
        for pin in &write.pins {
            if cleared(pin.index, session.clear) {
                continue;
            }
            let found =
                cursor_rows::find(tx, &session, &pin.consumer, pin.lane.as_deref(), pin.index)?;
            if let Some(found) = found {
                if found.dispatch.holds_pin(found.head == Some(pin.index)) {
                    held.push((found.cid, SqlIndex::new("pinned head", pin.index)?));
                }
            }
        }
        if !held.is_empty() {
            tx.prepare_cached(
                "INSERT INTO checkpoints (sid, reducer, idx, state) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (sid, reducer, idx) DO UPDATE SET state = excluded.state",
            )
            .and_then(|mut stmt| stmt.execute((session.sid, reducer, idx, &state)))
            .ctx("writing a checkpoint")?;
            let mut pin_stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO pins (cid, head, sid, reducer, cp_idx) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .ctx("pinning a checkpoint")?;
            for (cid, head) in held {
                pin_stmt
                    .execute((cid, head, session.sid, reducer, idx))
                    .ctx("pinning a checkpoint")?;
            }
        }
        tx.prepare_cached(
            "INSERT INTO snapshot_heads (sid, reducer, idx, state) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (sid, reducer) DO UPDATE SET idx = excluded.idx, state = excluded.state",
        )
        .and_then(|mut stmt| stmt.execute((session.sid, reducer, idx, &state)))
        .ctx("writing a snapshot")?;
    }
    Ok(())
}

/// The highest of the head snapshot and the pinned checkpoints with
/// `clear <= index <= at` (the head snapshot wins a tie: it is newer).
pub(crate) fn read_state(
    tx: &Connection,
    session_id: &str,
    reducer: &str,
    at: Option<u64>,
) -> Result<StateRead, StoreError> {
    let Some(session) = session::find(tx, session_id)? else {
        return Ok(StateRead::new(None, 0));
    };
    let none = StateRead::new(None, session.clear);
    let at = at.unwrap_or(u64::MAX);
    if at < session.clear {
        return Ok(none);
    }
    let clear = SqlIndex::new("clear index", session.clear)?;
    let at = SqlIndex::clamped(at);
    let head = tx
        .prepare_cached(
            "SELECT idx, state FROM snapshot_heads WHERE sid = ?1 AND reducer = ?2 \
             AND idx >= ?3 AND idx <= ?4",
        )
        .and_then(|mut stmt| {
            stmt.query_row((session.sid, reducer, clear, at), snapshot_of)
                .optional()
        })
        .ctx("reading a snapshot")?;
    // A checkpoint wins only above the head snapshot (which wins a tie: it
    // is newer), so only those are read.
    let above = match &head {
        Some(head) => SqlIndex::fitting(head.index + 1),
        None => Some(clear),
    };
    let pinned = match above {
        Some(above) => tx
            .prepare_cached(
                "SELECT idx, state FROM checkpoints WHERE sid = ?1 AND reducer = ?2 \
                 AND idx >= ?3 AND idx <= ?4 ORDER BY idx DESC LIMIT 1",
            )
            .and_then(|mut stmt| {
                stmt.query_row((session.sid, reducer, above, at), snapshot_of)
                    .optional()
            })
            .ctx("reading a checkpoint")?,
        None => None,
    };
    Ok(StateRead::new(pinned.or(head), session.clear))
}

/// The snapshot in a row selected as `idx, state`.
fn snapshot_of(row: &Row<'_>) -> rusqlite::Result<Snapshot> {
    Ok(Snapshot::new(
        row.get::<_, SqlIndex>(0)?.get(),
        row.get::<_, Json<Value>>(1)?.0,
    ))
}
