//! Reads of the log and its cursors (`read`, `cursors`, `sessions`) and
//! `wake_log`, which makes sure a log follower's cursor exists.

use a2_store_api::log::idle_log_cursor;
use a2_store_api::order::compare_cursors;
use a2_store_api::{
    ConsumerDeclaration, Cursor, CursorKind, ListSessions, LogDeclaration, SessionInfo, StoreError,
    StoredEvent, WakeLogResult,
};

use crate::cursor_table::{load, next_log_head, put};
use crate::db::{bound, lock_exclusive, query, Tx};
use crate::error::TxResult;
use crate::rows::{decode_event, index_of, CursorRow, CURSOR_COLUMNS, EVENT_COLUMNS};

/// Stored rows with `after < index <= through`, in order, at most `limit`.
pub(crate) async fn read(
    tx: &Tx<'_>,
    session_id: &str,
    after: u64,
    through: u64,
    limit: Option<usize>,
) -> TxResult<Vec<StoredEvent>> {
    let limit = limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events e WHERE e.session_id = $1 AND e.idx > $2 \
         AND e.idx <= $3 ORDER BY e.idx LIMIT $4"
    );
    let rows = query(
        tx,
        &sql,
        &[&session_id, &bound(after), &bound(through), &limit],
    )
    .await?;
    rows.iter()
        .map(|row| decode_event(row, 0, session_id))
        .collect()
}

/// Every cursor but finished event cursors, in `cursors()` order.
pub(crate) async fn cursors(tx: &Tx<'_>, session_id: &str) -> TxResult<Vec<Cursor>> {
    let sql = format!(
        "SELECT {CURSOR_COLUMNS} FROM cursors c WHERE c.session_id = $1 \
         AND (c.kind <> 0 OR c.head IS NOT NULL)"
    );
    let rows = query(tx, &sql, &[&session_id]).await?;
    let mut cursors = Vec::with_capacity(rows.len());
    for row in &rows {
        cursors.push(CursorRow::decode(row, 0)?.to_cursor()?);
    }
    cursors.sort_by(compare_cursors);
    Ok(cursors)
}

/// The body of [`Store::wake_log`](a2_store_api::Store::wake_log) for a
/// validated log declaration.
pub(crate) async fn wake_log(
    tx: &Tx<'_>,
    session_id: &str,
    consumer: &ConsumerDeclaration,
    log: &LogDeclaration,
) -> TxResult<WakeLogResult> {
    let state = lock_exclusive(tx, session_id).await?;
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
            return Ok(WakeLogResult {
                cursor: idle_log_cursor(consumer, index_of(state.clear)?),
                head,
            });
        }
        None => {
            let (position, next) = if log.backfill {
                let next = next_log_head(tx, session_id, state.clear, log.types.as_deref()).await?;
                (state.clear, next)
            } else {
                (state.head, None)
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
    Ok(WakeLogResult {
        cursor: cursor.to_cursor()?,
        head,
    })
}

/// Sessions with at least one appended row, by id, after `after`.
pub(crate) async fn sessions(tx: &Tx<'_>, options: &ListSessions) -> TxResult<Vec<SessionInfo>> {
    let limit = options
        .limit
        .map(|limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let rows = query(
        tx,
        "SELECT session_id, head, clear_index, reclaimed_through FROM sessions \
         WHERE head > 0 AND ($1::text IS NULL OR session_id > $1) \
         ORDER BY session_id LIMIT $2",
        &[&options.after, &limit],
    )
    .await?;
    let mut sessions = Vec::with_capacity(rows.len());
    for row in &rows {
        sessions.push(SessionInfo {
            session_id: row.try_get(0)?,
            head: index_of(row.try_get(1)?)?,
            clear_index: index_of(row.try_get(2)?)?,
            reclaimed_through: index_of(row.try_get(3)?)?,
        });
    }
    Ok(sessions)
}
