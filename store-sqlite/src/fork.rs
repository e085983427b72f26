//! `fork`: a session's rows after its clear copied into a new session in
//! one transaction (`INSERT ... SELECT`, the rows never leave SQLite), as
//! `ForkRequest::plan` decides; the new session records its origin.

use a2_store_api::{ForkRequest, ForkResult, SessionInfo, StoreError};
use rusqlite::Connection;

use crate::errors::SqlContext;
use crate::session;
use crate::values::SqlIndex;

/// Copies the rows `plan.first ..= plan.through` of the source, with their
/// id index, into `request.into` (validated request), and sets the new
/// session's clear, reclaimed offset and origin; its creation at `now` is
/// its last activity. No cursors, snapshots or presence are copied: the
/// fork owns its rows, so deleting the source leaves it whole.
pub(crate) fn fork(
    tx: &Connection,
    request: &ForkRequest,
    now: i64,
) -> Result<ForkResult, StoreError> {
    let source = session::find(tx, &request.session_id)?;
    let info = source.as_ref().map(|source| {
        SessionInfo::new(
            source.name.clone(),
            source.head,
            source.clear,
            source.reclaimed,
        )
        .with_incarnation(source.incarnation)
    });
    let into_head = session::find(tx, &request.into)?.map_or(0, |into| into.head);
    let plan = request.plan(info.as_ref(), into_head)?;
    let source = source.ok_or_else(|| StoreError::Backend {
        message: "internal error: a fork was planned from a session that does not exist".to_owned(),
        source: None,
    })?;
    let mut into = session::find_or_create(tx, &request.into)?;
    session::active(tx, &mut into, now)?;
    let first = SqlIndex::new("fork start", plan.first)?;
    let through = SqlIndex::new("fork end", plan.through)?;
    let clear = SqlIndex::new("clear index", plan.session.clear_index)?;
    let reclaimed = SqlIndex::new("reclaimed offset", plan.session.reclaimed_through)?;
    let origin = plan.session.forked_from.as_ref();
    let origin_index = origin
        .map(|origin| SqlIndex::new("fork origin", origin.index))
        .transpose()?;
    tx.prepare_cached(
        "UPDATE sessions SET clear_index = ?2, reclaimed_through = ?3, forked_from = ?4, \
         forked_through = ?5 WHERE sid = ?1",
    )
    .and_then(|mut stmt| {
        stmt.execute(rusqlite::params![
            into.sid,
            clear,
            reclaimed,
            origin.map(|origin| &origin.session_id),
            origin_index,
        ])
    })
    .ctx("recording a fork")?;
    let bounds = (into.sid, source.sid, first, through);
    tx.prepare_cached(
        "INSERT INTO events (sid, idx, id, type, payload, created_at, cause) \
         SELECT ?1, idx, id, type, payload, created_at, cause FROM events \
         WHERE sid = ?2 AND idx >= ?3 AND idx <= ?4",
    )
    .and_then(|mut stmt| stmt.execute(bounds))
    .ctx("copying a session's events")?;
    // Each copied row owns its id in the fork, as in the source above its
    // clear, so an append replaying it is recognised.
    tx.prepare_cached(
        "INSERT INTO event_ids (sid, id, idx) SELECT ?1, id, idx FROM events \
         WHERE sid = ?2 AND idx >= ?3 AND idx <= ?4",
    )
    .and_then(|mut stmt| stmt.execute(bounds))
    .ctx("copying a session's event ids")?;
    let copied = plan.rows();
    Ok(ForkResult::new(
        plan.session.with_incarnation(into.incarnation),
        copied,
    ))
}
