//! `cursors` (a session's cursors) and `wake_log`, which makes sure a log
//! follower's cursor exists.

use a2_store_api::log::idle_log_cursor;
use a2_store_api::order::compare_cursors;
use a2_store_api::pause::in_force_for;
use a2_store_api::{
    ConsumerDeclaration, Cursor, CursorKind, LogDeclaration, StoreError, WakeLogResult,
};

use crate::cursor_table::{load, next_log_head, put};
use crate::db::{lock_session, query, sql_index, Tx};
use crate::error::TxResult;
use crate::ops::work::Touched;
use crate::rows::{index_of, CursorRow, CURSOR_COLUMNS};

/// Every cursor but finished event cursors, in `cursors()` order, each
/// with the pause in force for its consumer at `now`
/// (`pause::in_force_for`). The cursors and the pauses are read in one
/// round trip (pipelined).
pub(crate) async fn cursors(tx: &Tx<'_>, session_id: &str, now: i64) -> TxResult<Vec<Cursor>> {
    let sql = format!(
        "SELECT {CURSOR_COLUMNS} FROM cursors c WHERE c.session_id = $1 \
         AND (c.kind <> 0 OR c.head IS NOT NULL)"
    );
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&session_id];
    let (rows, pauses) = futures::try_join!(
        query(tx, &sql, &params),
        crate::ops::pause::stored(tx, Some(session_id)),
    )?;
    let mut cursors = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut cursor = CursorRow::decode(row, 0)?.to_cursor()?;
        cursor.pause = in_force_for(&pauses, &cursor.consumer, session_id, now);
        cursors.push(cursor);
    }
    cursors.sort_by(compare_cursors);
    Ok(cursors)
}

/// The body of [`Store::wake_log`](a2_store_api::Store::wake_log) for a
/// validated log declaration at `now`; also returns whether a work row was
/// made ready.
pub(crate) async fn wake_log(
    tx: &Tx<'_>,
    session_id: &str,
    consumer: &ConsumerDeclaration,
    log: &LogDeclaration,
    now: i64,
) -> TxResult<(WakeLogResult, bool)> {
    let state = lock_session(tx, session_id).await?;
    let head = index_of(state.head)?;
    let existing = load(tx, session_id, &consumer.name, &log.lane, 0, true).await?;
    let cursor = match existing {
        Some(cursor) if cursor.kind != CursorKind::Log => {
            return Err(StoreError::lane_conflict(&consumer.name, &log.lane).into());
        }
        Some(mut cursor) => {
            cursor.types = log.types.clone();
            if cursor.head.is_none() {
                cursor.head =
                    next_log_head(tx, session_id, cursor.position, log.types.as_deref()).await?;
            }
            put(tx, session_id, &cursor).await?;
            cursor
        }
        None if state.head == state.clear => {
            let result =
                WakeLogResult::new(idle_log_cursor(consumer, index_of(state.clear)?), head);
            return Ok((result, false));
        }
        None => {
            let start = log.start_position(index_of(state.clear)?, index_of(state.head)?);
            let position = sql_index("log cursor position", start)?;
            let next = if log.backfill {
                next_log_head(tx, session_id, position, log.types.as_deref()).await?
            } else {
                None
            };
            let cursor = CursorRow::new(
                &consumer.name,
                Some(&log.lane),
                0,
                CursorKind::Log,
                position,
                next,
                log.types.clone(),
            );
            put(tx, session_id, &cursor).await?;
            cursor
        }
    };
    let mut touched = Touched::new(now);
    touched.cursor(&cursor);
    let ready = touched.flush(tx, session_id).await?;
    let result = WakeLogResult::new(cursor.to_cursor()?, head);
    Ok((result, ready))
}
