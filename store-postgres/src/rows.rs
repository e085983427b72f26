//! Rows as read from and written to the tables: one decode per row type
//! (stored events, cursors with their [`Dispatch`]) and the stored forms of
//! a cursor's key.

use a2_store_api::sql::{from_sql_count, from_sql_int, to_sql_int};
use a2_store_api::{Cause, Cursor, CursorKind, Dispatch, Head, Result, StoreError, StoredEvent};
use serde_json::Value;
use tokio_postgres::types::Json;
use tokio_postgres::Row;

use crate::error::TxResult;

/// The columns [`decode_event`] reads, from `events` aliased `e`.
pub(crate) const EVENT_COLUMNS: &str = "e.idx, e.id, e.type, e.payload, e.created_at, \
     e.cause_consumer, e.cause_lane, e.cause_index, e.cause_attempt";

/// The columns [`CursorRow::decode`] reads, from `cursors` aliased `c`.
pub(crate) const CURSOR_COLUMNS: &str = "c.consumer, c.lane, c.slot, c.kind, c.position, \
     c.head, c.types, c.attempt_count, c.first_claimed_at, c.last_claimed_at, c.claim_holder, \
     c.claim_expires_at, c.failure_count, c.last_failed_at, c.last_failed_attempt, \
     c.last_error, c.failed_at";

/// How many columns [`CURSOR_COLUMNS`] lists.
pub(crate) const CURSOR_WIDTH: usize = 17;

/// Decodes the [`EVENT_COLUMNS`] starting at column `at`.
pub(crate) fn decode_event(row: &Row, at: usize, session_id: &str) -> TxResult<StoredEvent> {
    let index: i64 = row.try_get(at)?;
    let Json(payload): Json<Value> = row.try_get(at + 3)?;
    let cause_consumer: Option<String> = row.try_get(at + 5)?;
    let cause = match cause_consumer {
        None => None,
        Some(consumer) => {
            let index: Option<i64> = row.try_get(at + 7)?;
            let attempt: Option<i64> = row.try_get(at + 8)?;
            Some(Cause {
                consumer,
                lane: row.try_get(at + 6)?,
                index: from_sql_int("cause index", index.unwrap_or(-1))?,
                attempt: from_sql_count("cause attempt", attempt.unwrap_or(-1))?,
            })
        }
    };
    Ok(StoredEvent::new(
        session_id.to_owned(),
        from_sql_int("event index", index)?,
        row.try_get::<_, String>(at + 1)?,
        row.try_get::<_, String>(at + 2)?,
        payload,
        row.try_get(at + 4)?,
    )
    .with_cause(cause))
}

/// A stored index or count read back as `u64` (negative means a corrupt row).
pub(crate) fn index_of(value: i64) -> Result<u64> {
    from_sql_int("index", value)
}

/// The session's clear index as the API reports it: `None` when never cleared.
pub(crate) fn clear_of(clear: i64) -> Result<Option<u64>> {
    (clear > 0).then(|| index_of(clear)).transpose()
}

/// The stored key of a cursor: `(consumer, lane or '', slot)`.
pub(crate) type CursorKey = (String, String, i64);

/// The stored key of the cursor `(consumer, lane, index)` names; `None` for
/// an event cursor beyond any storable index (none can exist).
pub(crate) fn key_of(consumer: &str, lane: Option<&str>, index: u64) -> Option<CursorKey> {
    let slot = slot_key(lane, index).ok()?;
    Some((consumer.to_owned(), lane_key(lane).to_owned(), slot))
}

/// The stored form of a cursor's lane: `''` for an event cursor.
pub(crate) fn lane_key(lane: Option<&str>) -> &str {
    lane.unwrap_or("")
}

/// The stored slot of a cursor: its index for an event cursor, 0 otherwise.
pub(crate) fn slot_key(lane: Option<&str>, index: u64) -> Result<i64> {
    match lane {
        Some(_) => Ok(0),
        None => to_sql_int("index", index),
    }
}

/// The stored code of a cursor kind.
pub(crate) fn kind_code(kind: CursorKind) -> i16 {
    match kind {
        CursorKind::Event => 0,
        CursorKind::Lane => 1,
        CursorKind::Log => 2,
    }
}

fn kind_from_code(code: i16) -> Result<CursorKind> {
    match code {
        0 => Ok(CursorKind::Event),
        1 => Ok(CursorKind::Lane),
        2 => Ok(CursorKind::Log),
        other => Err(StoreError::corrupt_value(&format!("cursor kind {other}"))),
    }
}

/// A cursor row: its key, position, head and bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CursorRow {
    pub consumer: String,
    /// `''` for an event cursor.
    pub lane: String,
    /// The index for an event cursor, 0 otherwise.
    pub slot: i64,
    pub kind: CursorKind,
    pub position: i64,
    pub head: Option<i64>,
    pub types: Option<Vec<String>>,
    pub dispatch: Dispatch,
}

impl CursorRow {
    /// A new cursor with fresh bookkeeping.
    pub(crate) fn new(
        consumer: &str,
        lane: Option<&str>,
        slot: i64,
        kind: CursorKind,
        position: i64,
        head: Option<i64>,
        types: Option<Vec<String>>,
    ) -> Self {
        Self {
            consumer: consumer.to_owned(),
            lane: lane_key(lane).to_owned(),
            slot,
            kind,
            position,
            head,
            types,
            dispatch: Dispatch::default(),
        }
    }

    /// Decodes the [`CURSOR_COLUMNS`] starting at column `at`.
    pub(crate) fn decode(row: &Row, at: usize) -> TxResult<Self> {
        let types: Option<Json<Vec<String>>> = row.try_get(at + 6)?;
        Ok(Self {
            consumer: row.try_get(at)?,
            lane: row.try_get(at + 1)?,
            slot: row.try_get(at + 2)?,
            kind: kind_from_code(row.try_get(at + 3)?)?,
            position: row.try_get(at + 4)?,
            head: row.try_get(at + 5)?,
            types: types.map(|Json(types)| types),
            dispatch: {
                let mut dispatch = Dispatch::default();
                dispatch.attempt_count = from_sql_count("attempt count", row.try_get(at + 7)?)?;
                dispatch.first_claimed_at = row.try_get(at + 8)?;
                dispatch.last_claimed_at = row.try_get(at + 9)?;
                dispatch.claim_holder = row.try_get(at + 10)?;
                dispatch.claim_expires_at = row.try_get(at + 11)?;
                dispatch.failure_count = from_sql_count("failure count", row.try_get(at + 12)?)?;
                dispatch.last_failed_at = row.try_get(at + 13)?;
                dispatch.last_failed_attempt = row
                    .try_get::<_, Option<i64>>(at + 14)?
                    .map(|attempt| from_sql_count("failed attempt", attempt))
                    .transpose()?;
                dispatch.last_error = row.try_get(at + 15)?;
                dispatch.failed_at = row.try_get(at + 16)?;
                dispatch
            },
        })
    }

    /// The stored key of this cursor.
    pub(crate) fn key(&self) -> CursorKey {
        (self.consumer.clone(), self.lane.clone(), self.slot)
    }

    /// The lane as the API spells it.
    pub(crate) fn lane(&self) -> Option<String> {
        (!self.lane.is_empty()).then(|| self.lane.clone())
    }

    /// The head as the API counts it.
    pub(crate) fn head_index(&self) -> Result<Option<u64>> {
        self.head
            .map(|head| from_sql_int("cursor head", head))
            .transpose()
    }

    /// The API view of the cursor.
    pub(crate) fn to_cursor(&self) -> Result<Cursor> {
        Ok(Cursor::new(
            self.consumer.clone(),
            self.lane(),
            self.kind,
            from_sql_int("cursor position", self.position)?,
        )
        .with_head(self.head_index()?)
        .with_types(if self.kind == CursorKind::Log {
            self.types.clone()
        } else {
            None
        })
        .with_dispatch(self.dispatch.clone()))
    }

    /// The head as claims and dead letters return it, with `event` at the head.
    pub(crate) fn to_head(&self, event: StoredEvent, clear_index: i64) -> Result<Head> {
        Ok(Head::new(
            event,
            self.consumer.clone(),
            self.lane(),
            self.dispatch.clone(),
        )
        .with_clear_index(clear_of(clear_index)?))
    }

    /// Resets the bookkeeping for a new head.
    pub(crate) fn fresh_dispatch(&mut self) {
        self.dispatch = Dispatch::default();
    }
}
