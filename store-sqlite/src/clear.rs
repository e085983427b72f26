//! `clear` (the marker, cursor reset, pin release) and `reclaim` (deleting
//! rows below the marker in batches).

use a2_store_api::{
    ClearRequest, ClearResult, ReclaimResult, StoreError, StoredEvent, RECLAIM_BATCH,
};
use rusqlite::Connection;

use crate::cursor_rows::{self, fence};
use crate::errors::SqlContext;
use crate::events::RowWriter;
use crate::pins;
use crate::pool::Ctx;
use crate::session;
use crate::snapshots;
use crate::values::SqlIndex;
use crate::work;

/// Appends the `a2.cleared` marker: drops event and lane cursors (with their
/// queues and completion records), parks log cursors at the marker and
/// releases every pin.
pub(crate) fn clear(
    tx: &Connection,
    ctx: &Ctx,
    request: &ClearRequest,
) -> Result<ClearResult, StoreError> {
    let existing = session::find(tx, &request.session_id)?;
    if let Some(session) = &existing {
        session.fence_incarnation(request.incarnation)?;
    }
    if let Some(cause) = &request.cause {
        fence(tx, existing.as_ref(), &request.session_id, cause)?;
    }
    let head = existing.as_ref().map_or(0, |session| session.head);
    if let Some(unmet) = request.unmet_condition(head) {
        return Ok(unmet);
    }
    let mut session = match existing {
        Some(session) => session,
        None => session::find_or_create(tx, &request.session_id)?,
    };
    let id = ctx.ids.next_id();
    let marker = StoredEvent::clear_marker(&session.name, id, session.head + 1, ctx.clock.now_ms());
    RowWriter::new(tx, &session)?.write(&session.name, &marker)?;
    session::active(tx, &mut session, marker.created_at)?;
    session.head = marker.index;
    session.clear = marker.index;
    session::save(tx, &session)?;
    pins::release_all(tx, &session)?;
    let sid = session.sid;
    let marker_idx = SqlIndex::new("marker index", marker.index)?;
    // Event and lane cursors go stale (born below the new clear): they lose
    // their heads now, which takes them out of every dispatch index, and
    // `reclaim` deletes them with their queues and completion records later,
    // so a clear costs the work in flight, not all the work ever done.
    for sql in [
        "UPDATE cursors INDEXED BY cursors_pending SET head = NULL \
         WHERE sid = ?1 AND head IS NOT NULL AND failed_at IS NULL AND kind <> 2",
        "UPDATE cursors INDEXED BY cursors_dead SET head = NULL \
         WHERE sid = ?1 AND head IS NOT NULL AND failed_at IS NOT NULL AND kind <> 2",
        "DELETE FROM completions WHERE cid IN \
         (SELECT cid FROM cursors INDEXED BY cursors_logs WHERE sid = ?1 AND kind = 2)",
    ] {
        tx.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([sid]))
            .ctx("dropping cleared cursors")?;
    }
    tx.prepare_cached(
        "UPDATE cursors INDEXED BY cursors_logs SET position = ?2, head = NULL, attempt_count = 0, \
         first_claimed_at = NULL, last_claimed_at = NULL, claim_holder = NULL, \
         claim_expires_at = NULL, failure_count = 0, last_failed_at = NULL, \
         last_failed_attempt = NULL, last_error = NULL, failed_at = NULL, born = ?2, \
         expired = 0 \
         WHERE sid = ?1 AND kind = 2",
    )
    .and_then(|mut stmt| stmt.execute((sid, marker_idx)))
    .ctx("parking log cursors at the marker")?;
    work::clear(tx, &session, ctx.clock.now_ms())?;
    Ok(ClearResult::Cleared { marker })
}

/// Deletes up to [`RECLAIM_BATCH`] rows below the clear marker; when none
/// remain, snapshots below the clear go too.
pub(crate) fn reclaim(tx: &Connection, session_id: &str) -> Result<ReclaimResult, StoreError> {
    let Some(mut session) = session::find(tx, session_id)? else {
        return Ok(ReclaimResult::nothing_left());
    };
    if session.clear == 0 {
        return Ok(ReclaimResult::nothing_left());
    }
    let last = session.clear - 1;
    let from = session.reclaimed;
    let to = last.min(from + RECLAIM_BATCH as u64);
    let mut reclaimed = 0;
    if to > from {
        let low = SqlIndex::new("reclaim start", from)?;
        let high = SqlIndex::new("reclaim end", to)?;
        tx.prepare_cached(
            "DELETE FROM event_ids WHERE sid = ?1 AND id IN \
             (SELECT id FROM events WHERE sid = ?1 AND idx > ?2 AND idx <= ?3) \
             AND idx > ?2 AND idx <= ?3",
        )
        .and_then(|mut stmt| stmt.execute((session.sid, low, high)))
        .ctx("reclaiming event ids")?;
        reclaimed = tx
            .prepare_cached("DELETE FROM events WHERE sid = ?1 AND idx > ?2 AND idx <= ?3")
            .and_then(|mut stmt| stmt.execute((session.sid, low, high)))
            .ctx("reclaiming events")? as u64;
        session.reclaimed = to;
        session::save(tx, &session)?;
    }
    // Cursors of cleared generations go at the same pace (not counted as rows).
    cursor_rows::purge_stale(tx, &session, RECLAIM_BATCH)?;
    let done = session.reclaimed >= last;
    if done {
        snapshots::drop_below(tx, &session)?;
    }
    Ok(ReclaimResult::new(reclaimed, done))
}
