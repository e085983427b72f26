//! Cursor rows: loading, saving, moving a cursor to its next head, and the
//! questions calls ask of them (pending work, fencing, the cursor an
//! attempt names).

use a2_store_api::dispatch::without_cursor;
use a2_store_api::pause::hold;
use a2_store_api::{
    dispatch, Cause, ConsumerDeclaration, Cursor, CursorKind, Dispatch, Head, LogDeclaration,
    StoreError,
};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::errors::SqlContext;
use crate::events::{head_row, next_log_head, row_at};
use crate::pins;
use crate::session::SessionRow;
use crate::values::{Json, SqlCount, SqlIndex, SqlKind, SqlLimit};

/// The columns of a cursor row, in the order [`decode`] reads them.
macro_rules! cursor_columns {
    () => {
        "cid, consumer, lane, ev_index, kind, position, head, types, attempt_count, \
         first_claimed_at, last_claimed_at, claim_holder, claim_expires_at, failure_count, \
         last_failed_at, last_failed_attempt, last_error, failed_at"
    };
}
pub(crate) use cursor_columns;

/// A cursor as stored: its key, position, head and the head's bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CursorRow {
    /// Row id, the key of its queue, completions and pins.
    pub cid: i64,
    /// The consumer.
    pub consumer: String,
    /// The lane (`None` for event cursors).
    pub lane: Option<String>,
    /// The targeted index of an event cursor, 0 for lane and log cursors.
    pub ev_index: u64,
    /// Event, lane or log.
    pub kind: CursorKind,
    /// Last index finished.
    pub position: u64,
    /// Next index to process.
    pub head: Option<u64>,
    /// Types a log cursor takes.
    pub types: Option<Vec<String>>,
    /// The head's bookkeeping.
    pub dispatch: Dispatch,
}

impl CursorRow {
    /// A new, not yet stored log cursor of `consumer` following `log` from
    /// `position`, with `head` as its first head and fresh bookkeeping.
    pub(crate) fn new_log(
        consumer: &str,
        log: &LogDeclaration,
        position: u64,
        head: Option<u64>,
    ) -> Self {
        CursorRow {
            cid: 0,
            consumer: consumer.to_owned(),
            lane: Some(log.lane.clone()),
            ev_index: 0,
            kind: CursorKind::Log,
            position,
            head,
            types: log.types.clone(),
            dispatch: Dispatch::default(),
        }
    }

    /// The public view of this cursor.
    pub(crate) fn to_cursor(&self) -> Cursor {
        Cursor::new(
            self.consumer.clone(),
            self.lane.clone(),
            self.kind,
            self.position,
        )
        .with_head(self.head)
        .with_types(self.types.clone())
        .with_dispatch(self.dispatch.clone())
    }

    /// The head as returned by claims and dead letters.
    pub(crate) fn to_head(
        &self,
        tx: &Connection,
        session: &SessionRow,
    ) -> Result<Head, StoreError> {
        let index = self.head.ok_or_else(|| StoreError::Backend {
            message: "internal error: a cursor without a head was reported as one".to_owned(),
            source: None,
        })?;
        Ok(Head::new(
            head_row(tx, session, index)?,
            self.consumer.clone(),
            self.lane.clone(),
            self.dispatch.clone(),
        )
        .with_clear_index(session.clear_index())
        .with_incarnation(session.incarnation))
    }
}

/// Decodes a row selected with [`cursor_columns`].
pub(crate) fn decode(row: &Row<'_>) -> Result<CursorRow, StoreError> {
    decode_row(row).ctx("reading a cursor")
}

fn decode_row(row: &Row<'_>) -> rusqlite::Result<CursorRow> {
    let lane: String = row.get(2)?;
    Ok(CursorRow {
        cid: row.get(0)?,
        consumer: row.get(1)?,
        lane: (!lane.is_empty()).then_some(lane),
        ev_index: row.get::<_, SqlIndex>(3)?.get(),
        kind: row.get::<_, SqlKind>(4)?.0,
        position: row.get::<_, SqlIndex>(5)?.get(),
        head: row.get::<_, Option<SqlIndex>>(6)?.map(SqlIndex::get),
        types: row.get::<_, Option<Json<_>>>(7)?.map(|types| types.0),
        dispatch: {
            let mut dispatch = Dispatch::default();
            dispatch.attempt_count = row.get::<_, SqlCount>(8)?.0;
            dispatch.first_claimed_at = row.get(9)?;
            dispatch.last_claimed_at = row.get(10)?;
            dispatch.claim_holder = row.get(11)?;
            dispatch.claim_expires_at = row.get(12)?;
            dispatch.failure_count = row.get::<_, SqlCount>(13)?.0;
            dispatch.last_failed_at = row.get(14)?;
            dispatch.last_failed_attempt = row.get::<_, Option<SqlCount>>(15)?.map(|count| count.0);
            dispatch.last_error = row.get(16)?;
            dispatch.failed_at = row.get(17)?;
            dispatch
        },
    })
}

/// The stored key of a cursor ref: `(lane, ev_index)`. `None` for a ref no
/// cursor can have (an empty lane, an index beyond SQL's range).
pub(crate) fn key_of(lane: Option<&str>, index: u64) -> Option<(&str, SqlIndex)> {
    match lane {
        Some("") => None,
        Some(lane) => Some((lane, SqlIndex::default())),
        None => SqlIndex::fitting(index).map(|index| ("", index)),
    }
}

/// The cursor a ref `(consumer, lane, index)` names, if it exists. Event and
/// lane cursors created before the session's last clear are gone (they
/// stay as *stale* rows, with no head, until `reclaim` deletes them).
pub(crate) fn find(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    lane: Option<&str>,
    index: u64,
) -> Result<Option<CursorRow>, StoreError> {
    let Some((lane, ev_index)) = key_of(lane, index) else {
        return Ok(None);
    };
    let mut stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors WHERE sid = ?1 AND consumer = ?2 AND lane = ?3 AND ev_index = ?4 \
             AND (kind = 2 OR born >= ?5)"
        ))
        .ctx("looking up a cursor")?;
    let clear = SqlIndex::new("clear index", session.clear)?;
    let mut rows = stmt
        .query((session.sid, consumer, lane, ev_index, clear))
        .ctx("looking up a cursor")?;
    match rows.next().ctx("looking up a cursor")? {
        Some(row) => decode(row).map(Some),
        None => Ok(None),
    }
}

/// The cursor a completion or failure names: `Ok(None)` when there is none
/// but the event exists (the call is superseded), `NoSuchEvent` when neither
/// exists (never appended, or reclaimed).
pub(crate) fn find_attempted(
    tx: &Connection,
    session: Option<&SessionRow>,
    session_id: &str,
    consumer: &str,
    lane: Option<&str>,
    index: u64,
) -> Result<Option<CursorRow>, StoreError> {
    let Some(session) = session else {
        return without_cursor(session_id, index, false).map(|()| None);
    };
    match find(tx, session, consumer, lane, index)? {
        Some(found) => Ok(Some(found)),
        None => {
            let exists = row_at(tx, session, index)?.is_some();
            without_cursor(session_id, index, exists).map(|()| None)
        }
    }
}

/// Creates a cursor row and returns it with its id.
pub(crate) fn create(
    tx: &Connection,
    session: &SessionRow,
    mut cursor: CursorRow,
) -> Result<CursorRow, StoreError> {
    let lane = cursor.lane.clone().unwrap_or_default();
    let ev_index = SqlIndex::new("cursor index", cursor.ev_index)?;
    let clear = SqlIndex::new("clear index", session.clear)?;
    // A stale cursor of a cleared generation may still hold the key.
    let stale: Option<i64> = tx
        .prepare_cached(
            "SELECT cid FROM cursors WHERE sid = ?1 AND consumer = ?2 AND lane = ?3 \
             AND ev_index = ?4 AND kind <> 2 AND born < ?5",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                (session.sid, &cursor.consumer, &lane, ev_index, clear),
                |row| row.get(0),
            )
            .optional()
        })
        .ctx("creating a cursor")?;
    if let Some(stale) = stale {
        purge(tx, stale)?;
    }
    tx.prepare_cached(
        "INSERT INTO cursors (sid, consumer, lane, ev_index, kind, position, born) \
         VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
    )
    .and_then(|mut stmt| {
        stmt.execute((
            session.sid,
            &cursor.consumer,
            lane,
            ev_index,
            SqlKind(cursor.kind),
            clear,
        ))
    })
    .ctx("creating a cursor")?;
    cursor.cid = tx.last_insert_rowid();
    save(tx, &cursor)?;
    Ok(cursor)
}

/// Deletes a cursor row with its lane queue and completion records.
pub(crate) fn purge(tx: &Connection, cid: i64) -> Result<(), StoreError> {
    for sql in [
        "DELETE FROM lane_queue WHERE cid = ?1",
        "DELETE FROM completions WHERE cid = ?1",
        "DELETE FROM cursors WHERE cid = ?1",
    ] {
        tx.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([cid]))
            .ctx("deleting a cleared cursor")?;
    }
    Ok(())
}

/// Deletes up to `batch` stale cursors (event and lane cursors of cleared
/// generations) with their queues and completion records; returns how many.
pub(crate) fn purge_stale(
    tx: &Connection,
    session: &SessionRow,
    batch: usize,
) -> Result<usize, StoreError> {
    let clear = SqlIndex::new("clear index", session.clear)?;
    let batch = SqlLimit(Some(batch));
    let stale: Vec<i64> = tx
        .prepare_cached(
            "SELECT cid FROM cursors INDEXED BY cursors_stale WHERE sid = ?1 AND kind <> 2 \
             AND born < ?2 LIMIT ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_map((session.sid, clear, batch), |row| row.get(0))?
                .collect()
        })
        .ctx("finding cleared cursors")?;
    for cid in &stale {
        purge(tx, *cid)?;
    }
    Ok(stale.len())
}

/// Stores a cursor's position, head, types and bookkeeping.
pub(crate) fn save(tx: &Connection, cursor: &CursorRow) -> Result<(), StoreError> {
    let position = SqlIndex::new("cursor position", cursor.position)?;
    let head = cursor
        .head
        .map(|head| SqlIndex::new("cursor head", head))
        .transpose()?;
    let d = &cursor.dispatch;
    tx.prepare_cached(
        "UPDATE cursors SET position = ?2, head = ?3, types = ?4, attempt_count = ?5, \
         first_claimed_at = ?6, last_claimed_at = ?7, claim_holder = ?8, claim_expires_at = ?9, \
         failure_count = ?10, last_failed_at = ?11, last_failed_attempt = ?12, last_error = ?13, \
         failed_at = ?14, expired = 0 WHERE cid = ?1",
    )
    .and_then(|mut stmt| {
        stmt.execute(rusqlite::params![
            cursor.cid,
            position,
            head,
            cursor.types.as_ref().map(Json),
            SqlCount(d.attempt_count),
            d.first_claimed_at,
            d.last_claimed_at,
            d.claim_holder,
            d.claim_expires_at,
            SqlCount(d.failure_count),
            d.last_failed_at,
            d.last_failed_attempt.map(SqlCount),
            d.last_error,
            d.failed_at,
        ])
    })
    .ctx("updating a cursor")?;
    Ok(())
}

/// Stores only a cursor's claim bookkeeping (not its head, position, types
/// or dead-letter mark): claims, renewals and failures that do not
/// dead-letter. Only the expiry index is touched, so a commit writes fewer
/// pages than [`save`].
pub(crate) fn save_claim(tx: &Connection, cursor: &CursorRow) -> Result<(), StoreError> {
    let d = &cursor.dispatch;
    tx.prepare_cached(
        "UPDATE cursors SET attempt_count = ?2, first_claimed_at = ?3, last_claimed_at = ?4, \
         claim_holder = ?5, claim_expires_at = ?6, failure_count = ?7, last_failed_at = ?8, \
         last_failed_attempt = ?9, last_error = ?10, expired = 0 WHERE cid = ?1",
    )
    .and_then(|mut stmt| {
        stmt.execute(rusqlite::params![
            cursor.cid,
            SqlCount(d.attempt_count),
            d.first_claimed_at,
            d.last_claimed_at,
            d.claim_holder,
            d.claim_expires_at,
            SqlCount(d.failure_count),
            d.last_failed_at,
            d.last_failed_attempt.map(SqlCount),
            d.last_error,
        ])
    })
    .ctx("updating a claim")?;
    Ok(())
}

/// Moves a cursor past its head (releasing the head's pins) and saves it:
/// the next queued index for a lane, the next taken event for a log,
/// finished for an event cursor. The next head starts with fresh bookkeeping
/// (busy until its not-before time when it was queued with one).
pub(crate) fn advance(
    tx: &Connection,
    session: &SessionRow,
    cursor: &mut CursorRow,
) -> Result<(), StoreError> {
    let Some(done) = cursor.head else {
        return Ok(());
    };
    pins::release(tx, cursor.cid, done)?;
    cursor.position = done;
    cursor.dispatch = Dispatch::default();
    cursor.head = match cursor.kind {
        CursorKind::Event => None,
        CursorKind::Lane => {
            let done = SqlIndex::new("lane index", done)?;
            tx.prepare_cached("DELETE FROM lane_queue WHERE cid = ?1 AND idx <= ?2")
                .and_then(|mut stmt| stmt.execute((cursor.cid, done)))
                .ctx("advancing a lane")?;
            let next: Option<(SqlIndex, Option<i64>)> = tx
                .prepare_cached(
                    "SELECT idx, not_before FROM lane_queue WHERE cid = ?1 ORDER BY idx LIMIT 1",
                )
                .and_then(|mut stmt| {
                    stmt.query_row([cursor.cid], |row| Ok((row.get(0)?, row.get(1)?)))
                        .optional()
                })
                .ctx("advancing a lane")?;
            // The lane's new head takes the time it was queued with.
            next.map(|(index, not_before)| {
                cursor.dispatch = Dispatch::scheduled(not_before);
                index.get()
            })
        }
        CursorKind::Log => next_log_head(tx, session, done, cursor.types.as_deref())?,
    };
    save(tx, cursor)
}

/// Releases the pins a cursor's head holds, as a dead letter does (the
/// head's `Dispatch` is already dead-lettered; the caller saves it).
pub(crate) fn release_head_pins(tx: &Connection, cursor: &CursorRow) -> Result<(), StoreError> {
    match cursor.head {
        Some(head) => pins::release(tx, cursor.cid, head),
        None => Ok(()),
    }
}

/// Whether some served cursor has a head that is not dead-lettered (busy
/// heads count) and that no pause holds at `now`.
pub(crate) fn has_pending(
    tx: &Connection,
    session: Option<&SessionRow>,
    consumers: Option<&[ConsumerDeclaration]>,
    now: i64,
) -> Result<bool, StoreError> {
    let Some(session) = session else {
        return Ok(false);
    };
    let pauses = crate::pause::covering(tx, &session.name)?;
    let held = |consumer: &str| hold(&pauses, consumer, &session.name, now).is_held();
    match consumers {
        None if pauses.is_empty() => tx
            .prepare_cached(
                "SELECT 1 FROM cursors INDEXED BY cursors_pending WHERE sid = ?1 \
                 AND head IS NOT NULL AND failed_at IS NULL LIMIT 1",
            )
            .and_then(|mut stmt| stmt.exists([session.sid]))
            .ctx("checking for pending work"),
        None => {
            // One entry per consumer with a pending head (the index is
            // ordered by consumer), until one that no pause holds.
            let mut stmt = tx
                .prepare_cached(
                    "SELECT DISTINCT consumer FROM cursors INDEXED BY cursors_pending \
                     WHERE sid = ?1 AND head IS NOT NULL AND failed_at IS NULL",
                )
                .ctx("checking for pending work")?;
            let mut rows = stmt.query([session.sid]).ctx("checking for pending work")?;
            while let Some(row) = rows.next().ctx("checking for pending work")? {
                let consumer: String = row.get(0).ctx("checking for pending work")?;
                if !held(&consumer) {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Some(consumers) => {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT 1 FROM cursors INDEXED BY cursors_pending WHERE sid = ?1 \
                     AND consumer = ?2 AND head IS NOT NULL AND failed_at IS NULL LIMIT 1",
                )
                .ctx("checking for pending work")?;
            for consumer in consumers {
                if held(&consumer.name) {
                    continue;
                }
                if stmt
                    .exists((session.sid, &consumer.name))
                    .ctx("checking for pending work")?
                {
                    return Ok(true);
                }
            }
            Ok(false)
        }
    }
}

/// Refreshes the types of the declared consumers' existing log cursors.
pub(crate) fn refresh_log_types(
    tx: &Connection,
    session: &SessionRow,
    consumers: Option<&[ConsumerDeclaration]>,
) -> Result<(), StoreError> {
    let Some(consumers) = consumers else {
        return Ok(());
    };
    for consumer in consumers {
        let Some(log) = &consumer.log else { continue };
        if log.lane.is_empty() {
            continue;
        }
        let types = log.types.as_ref().map(Json);
        tx.prepare_cached(
            "UPDATE cursors SET types = ?4 WHERE sid = ?1 AND consumer = ?2 AND lane = ?3 \
             AND ev_index = 0 AND kind = 2",
        )
        .and_then(|mut stmt| stmt.execute((session.sid, &consumer.name, &log.lane, types)))
        .ctx("refreshing a log cursor's types")?;
    }
    Ok(())
}

/// The fence of causes (appends and clears), [`dispatch::fence`] on the
/// cursor `cause` names (none without a session).
pub(crate) fn fence(
    tx: &Connection,
    session: Option<&SessionRow>,
    session_id: &str,
    cause: &Cause,
) -> Result<(), StoreError> {
    let Some(session) = session else {
        return dispatch::fence(session_id, 0, cause, None);
    };
    let cursor = find(
        tx,
        session,
        &cause.consumer,
        cause.lane.as_deref(),
        cause.index,
    )?;
    let cursor = cursor.as_ref().map(|found| (found.head, &found.dispatch));
    dispatch::fence(session_id, session.clear, cause, cursor)
}

/// Whether a lane or log cursor `(consumer, lane)` exists and of which kind.
pub(crate) fn lane_kind(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    lane: &str,
) -> Result<Option<CursorKind>, StoreError> {
    let clear = SqlIndex::new("clear index", session.clear)?;
    let kind: Option<SqlKind> = tx
        .prepare_cached(
            "SELECT kind FROM cursors WHERE sid = ?1 AND consumer = ?2 AND lane = ?3 \
             AND ev_index = 0 AND (kind = 2 OR born >= ?4)",
        )
        .and_then(|mut stmt| {
            stmt.query_row((session.sid, consumer, lane, clear), |row| row.get(0))
                .optional()
        })
        .ctx("looking up a lane")?;
    Ok(kind.map(|kind| kind.0))
}
