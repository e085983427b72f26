//! Event rows: inserting, reading, id ownership and a log consumer's next event.

use a2_store_api::log::takes;
use a2_store_api::{Cause, Payload, StoreError, StoredEvent, CLEAR_EVENT_TYPE};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::errors::SqlContext;
use crate::session::SessionRow;
use crate::values::{Json, SqlIndex, SqlLimit};

/// The event of `session` in a row selected as `idx, id, type, payload,
/// created_at, cause`.
fn event_of(session: &str, row: &Row<'_>) -> rusqlite::Result<StoredEvent> {
    Ok(StoredEvent::new(
        session.to_owned(),
        row.get::<_, SqlIndex>(0)?.get(),
        row.get::<_, String>(1)?,
        row.get::<_, String>(2)?,
        row.get::<_, Json<Payload>>(3)?.0,
        row.get(4)?,
    )
    .with_cause(row.get::<_, Option<Json<Cause>>>(5)?.map(|cause| cause.0)))
}

/// The stored row at `index`, if it exists (never appended or reclaimed: `None`).
pub(crate) fn row_at(
    tx: &Connection,
    session: &SessionRow,
    index: u64,
) -> Result<Option<StoredEvent>, StoreError> {
    let Some(idx) = SqlIndex::fitting(index) else {
        return Ok(None);
    };
    tx.prepare_cached(
        "SELECT idx, id, type, payload, created_at, cause FROM events WHERE sid = ?1 AND idx = ?2",
    )
    .and_then(|mut stmt| {
        stmt.query_row((session.sid, idx), |row| event_of(&session.name, row))
            .optional()
    })
    .ctx("reading an event")
}

/// The row at a cursor's head, which must exist.
pub(crate) fn head_row(
    tx: &Connection,
    session: &SessionRow,
    index: u64,
) -> Result<StoredEvent, StoreError> {
    row_at(tx, session, index)?.ok_or_else(|| {
        StoreError::corrupt_value(&format!(
            "cursor head {index} (no event row) in session '{}'",
            session.name
        ))
    })
}

/// The row owning `id` in the session, ignoring rows below its clear.
pub(crate) fn owner_of(
    tx: &Connection,
    session: &SessionRow,
    id: &str,
) -> Result<Option<StoredEvent>, StoreError> {
    let clear = SqlIndex::new("clear index", session.clear)?;
    tx.prepare_cached(
        "SELECT e.idx, e.id, e.type, e.payload, e.created_at, e.cause \
         FROM event_ids AS i JOIN events AS e ON e.sid = i.sid AND e.idx = i.idx \
         WHERE i.sid = ?1 AND i.id = ?2 AND i.idx >= ?3",
    )
    .and_then(|mut stmt| {
        stmt.query_row((session.sid, id, clear), |row| event_of(&session.name, row))
            .optional()
    })
    .ctx("looking up an event id")
}

/// Rows with `after < index <= through`, in order, at most `limit`.
pub(crate) fn read_range(
    tx: &Connection,
    session: &SessionRow,
    after: u64,
    through: u64,
    limit: Option<usize>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let bounds = (
        session.sid,
        SqlIndex::clamped(after),
        SqlIndex::clamped(through),
        SqlLimit(limit),
    );
    tx.prepare_cached(
        "SELECT idx, id, type, payload, created_at, cause FROM events \
         WHERE sid = ?1 AND idx > ?2 AND idx <= ?3 ORDER BY idx LIMIT ?4",
    )
    .and_then(|mut stmt| {
        stmt.query_map(bounds, |row| event_of(&session.name, row))?
            .collect()
    })
    .ctx("reading events")
}

/// Writes rows of one session, with its statements prepared once per batch.
pub(crate) struct RowWriter<'c> {
    claim_id: rusqlite::CachedStatement<'c>,
    insert: rusqlite::CachedStatement<'c>,
    sid: i64,
    clear: SqlIndex,
}

impl<'c> RowWriter<'c> {
    /// A writer of rows of `session`.
    pub(crate) fn new(tx: &'c Connection, session: &SessionRow) -> Result<Self, StoreError> {
        Ok(Self {
            claim_id: tx
                .prepare_cached(
                    "INSERT INTO event_ids (sid, id, idx) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (sid, id) DO UPDATE SET idx = excluded.idx \
                     WHERE event_ids.idx < ?4",
                )
                .ctx("indexing an event id")?,
            insert: tx
                .prepare_cached(
                    "INSERT INTO events (sid, idx, id, type, payload, created_at, cause) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .ctx("inserting an event")?,
            sid: session.sid,
            clear: SqlIndex::new("clear index", session.clear)?,
        })
    }

    /// Writes one row and claims its id. An id owned by a row at or above
    /// the clear is a `PartialDuplicateBatch` (the caller's transaction
    /// rolls back); ids below the clear are taken over.
    pub(crate) fn write(&mut self, session: &str, event: &StoredEvent) -> Result<(), StoreError> {
        let idx = SqlIndex::new("event index", event.index)?;
        let claimed = self
            .claim_id
            .execute((self.sid, &event.id, idx, self.clear))
            .ctx("indexing an event id")?;
        if claimed == 0 {
            return Err(StoreError::id_taken(session, &event.id));
        }
        self.insert
            .execute((
                self.sid,
                idx,
                &event.id,
                &event.event_type,
                Json(&event.payload),
                event.created_at,
                event.cause.as_ref().map(Json),
            ))
            .ctx("inserting an event")?;
        Ok(())
    }
}

/// The next event after `after` a log cursor taking `types` takes (never the
/// clear marker): one index probe per listed type.
pub(crate) fn next_log_head(
    tx: &Connection,
    session: &SessionRow,
    after: u64,
    types: Option<&[String]>,
) -> Result<Option<u64>, StoreError> {
    let after = SqlIndex::clamped(after);
    let found: Option<SqlIndex> = match types {
        None => {
            // Markers are rare, so walking past them in index order is cheap.
            let mut stmt = tx
                .prepare_cached(
                    "SELECT idx FROM events WHERE sid = ?1 AND idx > ?2 AND type <> ?3 \
                     ORDER BY idx LIMIT 1",
                )
                .ctx("finding a log consumer's next event")?;
            stmt.query_row((session.sid, after, CLEAR_EVENT_TYPE), |row| row.get(0))
                .optional()
                .ctx("finding a log consumer's next event")?
        }
        Some(types) => {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT MIN(idx) FROM events WHERE sid = ?1 AND type = ?2 AND idx > ?3",
                )
                .ctx("finding a log consumer's next event")?;
            let mut best: Option<SqlIndex> = None;
            for event_type in types {
                if !takes(Some(types), event_type) {
                    continue;
                }
                let next: Option<SqlIndex> = stmt
                    .query_row((session.sid, event_type, after), |row| row.get(0))
                    .ctx("finding a log consumer's next event")?;
                if let Some(next) = next {
                    best = Some(best.map_or(next, |best| best.min(next)));
                }
            }
            best
        }
    };
    Ok(found.map(SqlIndex::get))
}
