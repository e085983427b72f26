//! `delete_session`: every row of one session removed in one transaction,
//! as `a2_store_api::retention` decides ([`remove`] is also what `prune`
//! runs on each session it deletes), then a bounded give-back of freed
//! pages to the file system ([`free_pages`]).

use a2_store_api::retention::{delete_blocker, heads_ended};
use a2_store_api::{DeleteSessionRequest, DeleteSessionResult, Removed, StoreError};
use rusqlite::Connection;

use crate::cursors;
use crate::errors::SqlContext;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};

/// The statements deleting a session's rows keyed by its integer key
/// (`?1`), children before their parents: lane queues, completion records
/// and pins of its cursors, snapshots, presence, cursors, ids, events.
/// Each is a range of a primary key or index led by the session.
const BY_KEY: &[(&str, &str)] = &[
    (
        "DELETE FROM lane_queue WHERE cid IN (SELECT cid FROM cursors WHERE sid = ?1)",
        "deleting a session's lane queues",
    ),
    (
        "DELETE FROM completions WHERE cid IN (SELECT cid FROM cursors WHERE sid = ?1)",
        "deleting a session's completion records",
    ),
    (
        "DELETE FROM pins WHERE sid = ?1",
        "deleting a session's pins",
    ),
    (
        "DELETE FROM checkpoints WHERE sid = ?1",
        "deleting a session's checkpoints",
    ),
    (
        "DELETE FROM snapshot_heads WHERE sid = ?1",
        "deleting a session's snapshots",
    ),
    (
        "DELETE FROM presence WHERE sid = ?1",
        "deleting a session's presence",
    ),
    (
        "DELETE FROM event_ids WHERE sid = ?1",
        "deleting a session's event ids",
    ),
];

/// The statements deleting a session's rows keyed by its name (`?1`): its
/// work rows and the pauses scoped to it.
const BY_NAME: &[(&str, &str)] = &[
    (
        "DELETE FROM work WHERE session = ?1",
        "deleting a session's work rows",
    ),
    (
        "DELETE FROM pauses INDEXED BY pauses_by_session WHERE session = ?1",
        "deleting a session's pauses",
    ),
];

/// How many free pages one delete or prune gives back to the file system
/// at most (`PRAGMA incremental_vacuum`): 4 MiB of 4 KiB pages, moved from
/// the end of the file into free slots, so the cost stays bounded whatever
/// the delete freed; later deletes give back the rest, and new rows reuse
/// free pages first meanwhile.
const VACUUM: &str = "PRAGMA incremental_vacuum(1024)";

/// Deletes the session `request` names (validated request) at the store
/// time of `ctx`: `NotFound` (nothing created) when it does not exist (no
/// row, or one nothing was appended to and no presence written in),
/// `NotDeleted` when `if_last_index` does not match, `SessionInUse` when a
/// head still has work and the request is not forced; else every row of
/// the session goes.
pub(crate) fn delete_session(
    tx: &Connection,
    ctx: &Ctx,
    request: &DeleteSessionRequest,
) -> Result<DeleteSessionResult, StoreError> {
    let Some(session) = session::find(tx, &request.session_id)?.filter(SessionRow::exists) else {
        return Ok(DeleteSessionResult::NotFound);
    };
    if let Some(unmet) = request.unmet_condition(session.head) {
        return Ok(unmet);
    }
    let now = ctx.clock.now_ms();
    let listed = cursors::listed(tx, &session, now)?;
    if !request.force {
        if let Some(blocker) = delete_blocker(&session.name, &listed, now) {
            return Err(blocker);
        }
    }
    let ended = if request.force {
        heads_ended(&listed)
    } else {
        0
    };
    let removed = remove(tx, &session, listed.len() as u64, ended)?;
    free_pages(tx)?;
    Ok(DeleteSessionResult::Deleted { removed })
}

/// Deletes every row of `session` in every table, reporting `cursors`
/// cursors deleted and `ended` heads ended; the events deleted are counted
/// here.
pub(crate) fn remove(
    tx: &Connection,
    session: &SessionRow,
    cursors: u64,
    ended: u64,
) -> Result<Removed, StoreError> {
    for (sql, doing) in BY_KEY {
        tx.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([session.sid]))
            .ctx(doing)?;
    }
    tx.prepare_cached("DELETE FROM cursors WHERE sid = ?1")
        .and_then(|mut stmt| stmt.execute([session.sid]))
        .ctx("deleting a session's cursors")?;
    let events = tx
        .prepare_cached("DELETE FROM events WHERE sid = ?1")
        .and_then(|mut stmt| stmt.execute([session.sid]))
        .ctx("deleting a session's events")?;
    for (sql, doing) in BY_NAME {
        tx.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([&session.name]))
            .ctx(doing)?;
    }
    tx.prepare_cached("DELETE FROM sessions WHERE sid = ?1")
        .and_then(|mut stmt| stmt.execute([session.sid]))
        .ctx("deleting a session")?;
    Ok(Removed::new(
        session.incarnation,
        session.head,
        events as u64,
        cursors,
        ended,
    ))
}

/// Gives up to 1024 free pages back to the file system, in the calling
/// transaction. A no-op on a file created before incremental auto-vacuum
/// (its free pages are reused by new rows, never returned).
pub(crate) fn free_pages(tx: &Connection) -> Result<(), StoreError> {
    tx.execute_batch(VACUUM).ctx("giving free pages back")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::query_plan as plan;

    #[test]
    fn a_delete_reads_only_ranges_led_by_the_session() {
        for (sql, _) in BY_KEY.iter().chain(BY_NAME) {
            let shown = plan(sql);
            assert!(!shown.contains("SCAN"), "no scan: {sql}\n{shown}");
        }
    }
}
