//! Event rows: inserting, reading, id ownership and a log consumer's next event.

use a2_store_api::log::takes;
use a2_store_api::sql::{decode_json, encode_json, from_sql_int, to_sql_int};
use a2_store_api::{Cause, StoreError, StoredEvent, CLEAR_EVENT_TYPE};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::errors::SqlContext;
use crate::session::SessionRow;

/// The raw columns of an event row, decoded outside the rusqlite callback.
type RawEvent = (i64, String, String, String, i64, Option<String>);

fn raw_event(row: &Row<'_>) -> rusqlite::Result<RawEvent> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

fn decode(session: &str, raw: RawEvent) -> Result<StoredEvent, StoreError> {
    let (idx, id, event_type, payload, created_at, cause) = raw;
    Ok(StoredEvent {
        id,
        event_type,
        payload: decode_json("event payload", &payload)?,
        index: from_sql_int("event index", idx)?,
        session_id: session.to_owned(),
        created_at,
        cause: cause
            .map(|text| decode_json::<Cause>("event cause", &text))
            .transpose()?,
    })
}

/// The stored row at `index`, if it exists (never appended or reclaimed: `None`).
pub(crate) fn row_at(
    tx: &Connection,
    session: &SessionRow,
    index: u64,
) -> Result<Option<StoredEvent>, StoreError> {
    let Ok(idx) = i64::try_from(index) else {
        return Ok(None);
    };
    let raw = tx
        .prepare_cached(
            "SELECT idx, id, type, payload, created_at, cause FROM events WHERE sid = ?1 AND idx = ?2",
        )
        .and_then(|mut stmt| stmt.query_row((session.sid, idx), raw_event).optional())
        .ctx("reading an event")?;
    raw.map(|raw| decode(&session.name, raw)).transpose()
}

/// The row at a cursor's head, which must exist.
pub(crate) fn head_row(
    tx: &Connection,
    session: &SessionRow,
    index: u64,
) -> Result<StoredEvent, StoreError> {
    row_at(tx, session, index)?.ok_or_else(|| StoreError::Backend {
        message: format!(
            "corrupt database: a cursor's head {index} in session '{}' has no event row",
            session.name
        ),
        source: None,
    })
}

/// The row owning `id` in the session, ignoring rows below its clear.
pub(crate) fn owner_of(
    tx: &Connection,
    session: &SessionRow,
    id: &str,
) -> Result<Option<StoredEvent>, StoreError> {
    let clear = to_sql_int("clear index", session.clear)?;
    let raw = tx
        .prepare_cached(
            "SELECT e.idx, e.id, e.type, e.payload, e.created_at, e.cause \
             FROM event_ids AS i JOIN events AS e ON e.sid = i.sid AND e.idx = i.idx \
             WHERE i.sid = ?1 AND i.id = ?2 AND i.idx >= ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_row((session.sid, id, clear), raw_event)
                .optional()
        })
        .ctx("looking up an event id")?;
    raw.map(|raw| decode(&session.name, raw)).transpose()
}

/// Rows with `after < index <= through`, in order, at most `limit`.
pub(crate) fn read_range(
    tx: &Connection,
    session: &SessionRow,
    after: u64,
    through: u64,
    limit: Option<usize>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let through = i64::try_from(through).unwrap_or(i64::MAX);
    let limit = limit.map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let mut stmt = tx
        .prepare_cached(
            "SELECT idx, id, type, payload, created_at, cause FROM events \
             WHERE sid = ?1 AND idx > ?2 AND idx <= ?3 ORDER BY idx LIMIT ?4",
        )
        .ctx("reading events")?;
    let raws = stmt
        .query_map((session.sid, after, through, limit), raw_event)
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .ctx("reading events")?;
    raws.into_iter()
        .map(|raw| decode(&session.name, raw))
        .collect()
}

/// Writes rows of one session, with its statements prepared once per batch.
pub(crate) struct RowWriter<'c> {
    claim_id: rusqlite::CachedStatement<'c>,
    insert: rusqlite::CachedStatement<'c>,
    sid: i64,
    clear: i64,
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
            clear: to_sql_int("clear index", session.clear)?,
        })
    }

    /// Writes one row and claims its id. An id owned by a row at or above
    /// the clear is a `PartialDuplicateBatch` (the caller's transaction
    /// rolls back); ids below the clear are taken over.
    pub(crate) fn write(&mut self, session: &str, event: &StoredEvent) -> Result<(), StoreError> {
        let idx = to_sql_int("event index", event.index)?;
        let claimed = self
            .claim_id
            .execute((self.sid, &event.id, idx, self.clear))
            .ctx("indexing an event id")?;
        if claimed == 0 {
            return Err(StoreError::partial_duplicate(format!(
                "event id '{}' already exists in session '{session}'",
                event.id
            )));
        }
        let payload = encode_json(&event.payload)?;
        let cause = event.cause.as_ref().map(encode_json).transpose()?;
        self.insert
            .execute((
                self.sid,
                idx,
                &event.id,
                &event.event_type,
                payload,
                event.created_at,
                cause,
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
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let found: Option<i64> = match types {
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
            let mut best: Option<i64> = None;
            for event_type in types {
                if !takes(Some(types), event_type) {
                    continue;
                }
                let next: Option<i64> = stmt
                    .query_row((session.sid, event_type, after), |row| row.get(0))
                    .ctx("finding a log consumer's next event")?;
                if let Some(next) = next {
                    best = Some(best.map_or(next, |best: i64| best.min(next)));
                }
            }
            best
        }
    };
    found
        .map(|idx| from_sql_int("event index", idx))
        .transpose()
}
