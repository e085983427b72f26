//! Session rows: head, clear index and reclaimed offset of each log, its
//! incarnation and the time of its last append.

use a2_store_api::retention::{fence_incarnation, incarnation_current};
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
    /// The session's incarnation: drawn from the `incarnation` counter when
    /// the session was created, never handed out again.
    pub incarnation: u64,
    /// Store time (ms) of its last append of any kind, or of its creation
    /// by a presence write; `None` while neither happened (a row made by
    /// `write_state` alone): such a session does not exist for retention.
    pub last_activity: Option<i64>,
}

impl SessionRow {
    /// The clear index as returned on heads: `Some` once cleared.
    pub(crate) fn clear_index(&self) -> Option<u64> {
        (self.clear > 0).then_some(self.clear)
    }

    /// Whether the session exists for retention: something was appended
    /// to it or a presence field written. Only such a session is deleted,
    /// pruned, or fences requests by incarnation.
    pub(crate) fn exists(&self) -> bool {
        self.last_activity.is_some()
    }

    /// Whether a completion, failure or renewal naming `requested` may act
    /// on this session: it exists in another incarnation, or
    /// `retention::incarnation_current` says so.
    pub(crate) fn incarnation_current(&self, requested: Option<u64>) -> bool {
        incarnation_current(requested, self.exists().then_some(self.incarnation))
    }

    /// Refuses a redrive, reschedule or clear naming another incarnation of
    /// this session, when it exists (`retention::fence_incarnation`).
    pub(crate) fn fence_incarnation(&self, requested: Option<u64>) -> Result<(), StoreError> {
        fence_incarnation(
            &self.name,
            requested,
            self.exists().then_some(self.incarnation),
        )
    }
}

/// The session named `name`, if it was ever written to.
pub(crate) fn find(tx: &Connection, name: &str) -> Result<Option<SessionRow>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT s.sid, COALESCE((SELECT MAX(e.idx) FROM events AS e WHERE e.sid = s.sid), 0), \
             s.clear_index, s.reclaimed_through, s.incarnation, s.last_activity \
             FROM sessions AS s WHERE s.name = ?1",
        )
        .ctx("looking up a session")?;
    stmt.query_row([name], |row| {
        Ok(SessionRow {
            sid: row.get(0)?,
            name: name.to_owned(),
            head: row.get::<_, SqlIndex>(1)?.get(),
            clear: row.get::<_, SqlIndex>(2)?.get(),
            reclaimed: row.get::<_, SqlIndex>(3)?.get(),
            incarnation: row.get::<_, SqlIndex>(4)?.get(),
            last_activity: row.get(5)?,
        })
    })
    .optional()
    .ctx("looking up a session")
}

/// The session named `name`, its row created empty if there is none yet
/// (with the next incarnation of the database's counter, and no activity:
/// the caller records what it stores, [`active`] or [`created`]).
pub(crate) fn find_or_create(tx: &Connection, name: &str) -> Result<SessionRow, StoreError> {
    if let Some(session) = find(tx, name)? {
        return Ok(session);
    }
    let incarnation: SqlIndex = tx
        .prepare_cached(
            "UPDATE counters SET value = value + 1 WHERE name = 'incarnation' RETURNING value",
        )
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .ctx("drawing a session incarnation")?;
    tx.prepare_cached("INSERT INTO sessions (name, incarnation) VALUES (?1, ?2)")
        .and_then(|mut stmt| stmt.execute((name, incarnation)))
        .ctx("creating a session")?;
    Ok(SessionRow {
        sid: tx.last_insert_rowid(),
        name: name.to_owned(),
        head: 0,
        clear: 0,
        reclaimed: 0,
        incarnation: incarnation.get(),
        last_activity: None,
    })
}

/// Records an append of any kind to `session` at store time `now`: its
/// last activity, which `prune` reads.
pub(crate) fn active(
    tx: &Connection,
    session: &mut SessionRow,
    now: i64,
) -> Result<(), StoreError> {
    if session.last_activity == Some(now) {
        return Ok(());
    }
    tx.prepare_cached("UPDATE sessions SET last_activity = ?2 WHERE sid = ?1")
        .and_then(|mut stmt| stmt.execute((session.sid, now)))
        .ctx("recording a session's activity")?;
    session.last_activity = Some(now);
    Ok(())
}

/// Records that something other than an append (a presence field) was
/// stored in `session` at `now`: its activity when it had none yet, so it
/// exists from then on; later such writes are no activity.
pub(crate) fn created(
    tx: &Connection,
    session: &mut SessionRow,
    now: i64,
) -> Result<(), StoreError> {
    if session.exists() {
        return Ok(());
    }
    active(tx, session, now)
}

/// Stores a session's clear index and reclaimed offset. The head is not
/// stored: it is the last row's index (the clear marker is never reclaimed);
/// an append only moves the session's last activity ([`active`]).
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
