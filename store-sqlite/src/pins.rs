//! Snapshot pins: a checkpoint is kept while a cursor head pins it. Releasing
//! a head's pins (it advanced or was dead-lettered) or all of a session's
//! (a clear) drops the checkpoints no pin keeps any more; `write_state`
//! adds them.

use a2_store_api::StoreError;
use rusqlite::Connection;

use crate::errors::SqlContext;
use crate::session::SessionRow;
use crate::values::SqlIndex;

/// Releases the pins a cursor's head `head` holds; checkpoints no pin keeps
/// any more are dropped.
pub(crate) fn release(tx: &Connection, cid: i64, head: u64) -> Result<(), StoreError> {
    let head = SqlIndex::new("pinned head", head)?;
    // Pins are rare: a plain probe is much cheaper than a DELETE ... RETURNING.
    let pinned = tx
        .prepare_cached("SELECT 1 FROM pins WHERE cid = ?1 AND head = ?2 LIMIT 1")
        .and_then(|mut stmt| stmt.exists((cid, head)))
        .ctx("releasing snapshot pins")?;
    if !pinned {
        return Ok(());
    }
    let released: Vec<(i64, String, SqlIndex)> = tx
        .prepare_cached(
            "DELETE FROM pins WHERE cid = ?1 AND head = ?2 RETURNING sid, reducer, cp_idx",
        )
        .and_then(|mut stmt| {
            stmt.query_map((cid, head), |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?
            .collect()
        })
        .ctx("releasing snapshot pins")?;
    for (sid, reducer, cp_idx) in released {
        let still_pinned = tx
            .prepare_cached("SELECT 1 FROM pins WHERE sid = ?1 AND reducer = ?2 AND cp_idx = ?3")
            .and_then(|mut stmt| stmt.exists((sid, &reducer, cp_idx)))
            .ctx("releasing snapshot pins")?;
        if !still_pinned {
            tx.prepare_cached(
                "DELETE FROM checkpoints WHERE sid = ?1 AND reducer = ?2 AND idx = ?3",
            )
            .and_then(|mut stmt| stmt.execute((sid, &reducer, cp_idx)))
            .ctx("dropping an unpinned checkpoint")?;
        }
    }
    Ok(())
}

/// Releases every pin of a session (a clear): every checkpoint goes.
pub(crate) fn release_all(tx: &Connection, session: &SessionRow) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM pins WHERE sid = ?1")
        .and_then(|mut stmt| stmt.execute([session.sid]))
        .ctx("releasing snapshot pins")?;
    tx.prepare_cached("DELETE FROM checkpoints WHERE sid = ?1")
        .and_then(|mut stmt| stmt.execute([session.sid]))
        .ctx("dropping checkpoints")?;
    Ok(())
}
