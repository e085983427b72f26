//! Session rows: head, clear index and reclaimed offset of each log.

use a2_store_api::sql::{from_sql_int, to_sql_int};
use a2_store_api::StoreError;
use rusqlite::{Connection, OptionalExtension};

use crate::errors::SqlContext;

/// One session's log bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionRow {
    /// The session's integer key in every other table.
    pub sid: i64,
    /// The session's name.
    pub name: String,
    /// The last index (0 when empty): the highest stored row's index.
    pub head: u64,
    /// The index of the latest clear marker (0 when never cleared).
    pub clear: u64,
    /// Rows at or below this index are deleted.
    pub reclaimed: u64,
}

impl SessionRow {
    /// The clear index as returned on heads: `Some` once cleared.
    pub(crate) fn clear_index(&self) -> Option<u64> {
        (self.clear > 0).then_some(self.clear)
    }
}

/// The session named `name`, if it was ever written to.
pub(crate) fn find(tx: &Connection, name: &str) -> Result<Option<SessionRow>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT s.sid, COALESCE((SELECT MAX(e.idx) FROM events AS e WHERE e.sid = s.sid), 0), \
             s.clear_index, s.reclaimed_through FROM sessions AS s WHERE s.name = ?1",
        )
        .ctx("looking up a session")?;
    let raw = stmt
        .query_row([name], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
            ))
        })
        .optional()
        .ctx("looking up a session")?;
    raw.map(|(sid, head, clear, reclaimed)| {
        Ok(SessionRow {
            sid,
            name: name.to_owned(),
            head: from_sql_int("session head", head)?,
            clear: from_sql_int("clear index", clear)?,
            reclaimed: from_sql_int("reclaimed offset", reclaimed)?,
        })
    })
    .transpose()
}

/// The session named `name`, created empty if it does not exist yet.
pub(crate) fn find_or_create(tx: &Connection, name: &str) -> Result<SessionRow, StoreError> {
    if let Some(session) = find(tx, name)? {
        return Ok(session);
    }
    tx.prepare_cached("INSERT INTO sessions (name) VALUES (?1)")
        .and_then(|mut stmt| stmt.execute([name]))
        .ctx("creating a session")?;
    Ok(SessionRow {
        sid: tx.last_insert_rowid(),
        name: name.to_owned(),
        head: 0,
        clear: 0,
        reclaimed: 0,
    })
}

/// Stores a session's clear index and reclaimed offset. The head is not
/// stored: it is the last row's index (the clear marker is never reclaimed),
/// so an append dirties no session page.
pub(crate) fn save(tx: &Connection, session: &SessionRow) -> Result<(), StoreError> {
    let clear = to_sql_int("clear index", session.clear)?;
    let reclaimed = to_sql_int("reclaimed offset", session.reclaimed)?;
    tx.prepare_cached(
        "UPDATE sessions SET clear_index = ?2, reclaimed_through = ?3 WHERE sid = ?1",
    )
    .and_then(|mut stmt| stmt.execute((session.sid, clear, reclaimed)))
    .ctx("updating a session")?;
    Ok(())
}
