//! `cursors` and `wake_log`: listing a session's cursors, and making sure a
//! declared log consumer's cursor exists and points at its next taken event.

use a2_store_api::log::idle_log_cursor;
use a2_store_api::order::compare_cursors;
use a2_store_api::pause::in_force_for;
use a2_store_api::{
    ConsumerDeclaration, Cursor, CursorKind, LogDeclaration, StoreError, WakeLogResult,
};
use rusqlite::Connection;

use crate::cursor_rows::{self, cursor_columns, CursorRow};
use crate::errors::SqlContext;
use crate::events::next_log_head;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};
use crate::values::SqlIndex;
use crate::work::{self, Wake};

/// Creates or wakes the consumer's log cursor (`log`: its declaration's log
/// part); on a session with nothing after its clear, returns an idle cursor
/// without storing one. A cursor that got a head moves the consumer's work
/// row to now (`Wake`: it moved earlier).
pub(crate) fn wake_log(
    tx: &Connection,
    ctx: &Ctx,
    session_id: &str,
    consumer: &ConsumerDeclaration,
    log: &LogDeclaration,
) -> Result<(WakeLogResult, Wake), StoreError> {
    let mut wake = Wake::default();
    let Some(session) = session::find(tx, session_id)? else {
        let result = WakeLogResult::new(idle_log_cursor(consumer, 0), 0);
        return Ok((result, wake));
    };
    let found = cursor_rows::find(tx, &session, &consumer.name, Some(&log.lane), 0)?;
    let row = match found {
        Some(existing) if existing.kind != CursorKind::Log => {
            return Err(StoreError::lane_conflict(&consumer.name, &log.lane));
        }
        Some(mut existing) => {
            existing.types = log.types.clone();
            if existing.head.is_none() {
                existing.head =
                    next_log_head(tx, &session, existing.position, log.types.as_deref())?;
                if existing.head.is_some() {
                    let now = ctx.clock.now_ms();
                    work::ready_from(tx, &session, &consumer.name, now, &mut wake)?;
                }
            }
            cursor_rows::save(tx, &existing)?;
            existing
        }
        None => {
            if session.head == session.clear {
                let result =
                    WakeLogResult::new(idle_log_cursor(consumer, session.clear), session.head);
                return Ok((result, wake));
            }
            let position = log.start_position(session.clear, session.head);
            let head = if log.backfill {
                next_log_head(tx, &session, position, log.types.as_deref())?
            } else {
                None
            };
            if head.is_some() {
                let now = ctx.clock.now_ms();
                work::ready_from(tx, &session, &consumer.name, now, &mut wake)?;
            }
            cursor_rows::create(
                tx,
                &session,
                CursorRow::new_log(&consumer.name, log, position, head),
            )?
        }
    };
    let result = WakeLogResult::new(row.to_cursor(), session.head);
    Ok((result, wake))
}

/// Every cursor except finished event cursors, by consumer then lane
/// (laneless event cursors last by head): lane and log cursors from
/// `cursors_listed`, open event cursors from the pending and dead-letter
/// indexes, so finished event cursors are never visited. Each carries the
/// pause in force for its consumer at `now`.
pub(crate) fn cursors(
    tx: &Connection,
    session_id: &str,
    now: i64,
) -> Result<Vec<Cursor>, StoreError> {
    match session::find(tx, session_id)? {
        Some(session) => listed(tx, &session, now),
        None => Ok(Vec::new()),
    }
}

/// The cursors of `session` as [`cursors`] lists them at `now`.
pub(crate) fn listed(
    tx: &Connection,
    session: &SessionRow,
    now: i64,
) -> Result<Vec<Cursor>, StoreError> {
    let clear = SqlIndex::new("clear index", session.clear)?;
    let mut listed = Vec::new();
    for sql in [
        concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors INDEXED BY cursors_listed WHERE sid = ?1 AND kind <> 0 \
             AND (kind = 2 OR born >= ?2)"
        ),
        concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors INDEXED BY cursors_pending WHERE sid = ?1 AND head IS NOT NULL \
             AND failed_at IS NULL AND kind = 0 AND born >= ?2"
        ),
        concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors INDEXED BY cursors_dead WHERE sid = ?1 AND head IS NOT NULL \
             AND failed_at IS NOT NULL AND kind = 0 AND born >= ?2"
        ),
    ] {
        let mut stmt = tx.prepare_cached(sql).ctx("listing cursors")?;
        let mut rows = stmt.query((session.sid, clear)).ctx("listing cursors")?;
        while let Some(row) = rows.next().ctx("listing cursors")? {
            listed.push(cursor_rows::decode(row)?.to_cursor());
        }
    }
    let pauses = crate::pause::covering(tx, &session.name)?;
    if !pauses.is_empty() {
        for cursor in &mut listed {
            cursor.pause = in_force_for(&pauses, &cursor.consumer, &session.name, now);
        }
    }
    listed.sort_by(compare_cursors);
    Ok(listed)
}
