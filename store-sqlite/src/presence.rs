//! Presence fields: last writer wins per field by the writer's timestamp,
//! with TTLs and tombstones for deletions.

use std::collections::BTreeMap;

use a2_store_api::presence::write_wins;
use a2_store_api::{PresenceMeta, PresenceResult, PresenceRow, StoreError};
use rusqlite::{Connection, OptionalExtension};
use serde_json::Value;

use crate::errors::SqlContext;
use crate::session;
use crate::values::{Bits, Json};

/// Writes `values` for `participant` at store time `now`; a field is skipped
/// only when its stored entry is unexpired with a strictly greater `at`.
/// `null` is stored as a tombstone with the same TTL.
pub(crate) fn set_presence(
    tx: &Connection,
    session_id: &str,
    participant: &str,
    values: &BTreeMap<String, Value>,
    meta: PresenceMeta,
    now: i64,
) -> Result<PresenceResult, StoreError> {
    let mut session = session::find_or_create(tx, session_id)?;
    let expires_at = now.saturating_add(meta.ttl_ms);
    let seen = meta.seen.map(Bits);
    let mut applied = BTreeMap::new();
    for (field, value) in values {
        let existing: Option<(i64, i64)> = tx
            .prepare_cached(
                "SELECT at, expires_at FROM presence WHERE sid = ?1 AND participant = ?2 \
                 AND field = ?3",
            )
            .and_then(|mut stmt| {
                stmt.query_row((session.sid, participant, field), |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()
            })
            .ctx("reading presence")?;
        if !write_wins(existing, meta.at, now) {
            continue;
        }
        tx.prepare_cached(
            "INSERT INTO presence (sid, participant, field, value, seen, at, expires_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
             ON CONFLICT (sid, participant, field) DO UPDATE SET value = excluded.value, \
             seen = excluded.seen, at = excluded.at, expires_at = excluded.expires_at",
        )
        .and_then(|mut stmt| {
            stmt.execute((
                session.sid,
                participant,
                field,
                Json(value),
                seen,
                meta.at,
                expires_at,
            ))
        })
        .ctx("writing presence")?;
        applied.insert(field.clone(), value.clone());
    }
    let applied_count = applied.len();
    if applied_count > 0 {
        // The first field stored makes the session exist (for retention).
        session::created(tx, &mut session, now)?;
    }
    Ok(PresenceResult::new(applied, applied_count))
}

/// Live rows at `now` (unexpired, not tombstones), by participant then field.
pub(crate) fn read_presence(
    tx: &Connection,
    session_id: &str,
    now: i64,
) -> Result<Vec<PresenceRow>, StoreError> {
    let Some(session) = session::find(tx, session_id)? else {
        return Ok(Vec::new());
    };
    tx.prepare_cached(
        "SELECT participant, field, value, seen, at, expires_at FROM presence \
             WHERE sid = ?1 AND expires_at > ?2 AND value <> 'null' \
             ORDER BY participant, field",
    )
    .and_then(|mut stmt| {
        stmt.query_map((session.sid, now), |row| {
            Ok(PresenceRow::new(
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Json<Value>>(2)?.0,
                row.get::<_, Option<Bits>>(3)?.map(|seen| seen.0),
                row.get(4)?,
                row.get(5)?,
            ))
        })?
        .collect()
    })
    .ctx("reading presence")
}
