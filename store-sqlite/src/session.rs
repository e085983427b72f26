//! Session rows: head, clear index and reclaimed offset of each log.

use a2_store_api::StoreError;
use rusqlite::{Connection, OptionalExtension};

use crate::errors::SqlContext;
use crate::values::SqlIndex;

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
    stmt.query_row([name], |row| {
        Ok(SessionRow {
            sid: row.get(0)?,
            name: name.to_owned(),
            head: row.get::<_, SqlIndex>(1)?.get(),
            clear: row.get::<_, SqlIndex>(2)?.get(),
            reclaimed: row.get::<_, SqlIndex>(3)?.get(),
        })
    })
    .optional()
    .ctx("looking up a session")
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
    let clear = SqlIndex::new("clear index", session.clear)?;
    let reclaimed = SqlIndex::new("reclaimed offset", session.reclaimed)?;
    tx.prepare_cached(
        "UPDATE sessions SET clear_index = ?2, reclaimed_through = ?3 WHERE sid = ?1",
    )
    .and_then(|mut stmt| stmt.execute((session.sid, clear, reclaimed)))
    .ctx("updating a session")?;
    Ok(())
}
