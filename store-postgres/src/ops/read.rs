//! `read` (a session's stored rows) and `sessions` (the sessions with rows).

use a2_store_api::{ListSessions, SessionInfo, StoredEvent};

use crate::ops::fork::session_info;

use crate::db::{bound, query, Tx};
use crate::error::TxResult;
use crate::rows::{decode_event, EVENT_COLUMNS};

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

/// The sessions listing's columns, from the first page.
const SESSIONS_FIRST: &str = "SELECT session_id, head, clear_index, reclaimed_through, \
    forked_session, forked_index, incarnation FROM sessions \
    WHERE head > 0 ORDER BY session_id LIMIT $1";

/// The same after the id `$1`: its own statement, so its plan is always an
/// index range from `$1` (one text with `$1 IS NULL OR ...` got a generic
/// plan that filtered every session before `$1`).
const SESSIONS_AFTER: &str = "SELECT session_id, head, clear_index, reclaimed_through, \
    forked_session, forked_index, incarnation FROM sessions \
    WHERE session_id > $1 AND head > 0 ORDER BY session_id LIMIT $2";

/// Sessions with at least one appended row, by id, after `after`: an index
/// range of the page, however many sessions come before it.
pub(crate) async fn sessions(tx: &Tx<'_>, options: &ListSessions) -> TxResult<Vec<SessionInfo>> {
    let limit = options
        .limit
        .map(|limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let rows = match &options.after {
        None => query(tx, SESSIONS_FIRST, &[&limit]).await?,
        Some(after) => query(tx, SESSIONS_AFTER, &[after, &limit]).await?,
    };
    let mut sessions = Vec::with_capacity(rows.len());
    for row in &rows {
        sessions.push(session_info(row.try_get(0)?, row, 1)?);
    }
    Ok(sessions)
}
