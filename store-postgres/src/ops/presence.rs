//! Presence: last-writer-wins fields with a TTL, `null` kept as a tombstone.

use std::collections::BTreeMap;

use a2_store_api::{PresenceMeta, PresenceResult, PresenceRow};
use serde_json::Value;
use tokio_postgres::types::{Json, ToSql};

use crate::db::{query, sql_index, Stmt, Tx};
use crate::error::TxResult;
use crate::rows::index_of;

/// A session's row made when a presence field is its first write, active
/// since `$2`: `$1` the session.
const CREATE_SESSION: &str = "INSERT INTO sessions (session_id, last_activity) \
    VALUES ($1, $2) ON CONFLICT DO NOTHING";

/// A session row made only to be locked (no activity yet) becomes a
/// session, active since `$2`: `$1` the session. Locks no row that already
/// has an activity.
const FIRST_ACTIVITY: &str = "UPDATE sessions SET last_activity = $2 \
    WHERE session_id = $1 AND last_activity IS NULL";

/// The fields' upsert: `$1` session, `$2` participant, `$3`, `$4` fields
/// and values, `$5` seen, `$6` at, `$7` expiry, `$8` now.
const UPSERT: &str = "INSERT INTO presence (session_id, participant, field, value, seen, at, \
       expires_at) \
    SELECT $1, $2, f.field, f.value, $5, $6, $7 \
    FROM unnest($3::text[], $4::jsonb[]) AS f(field, value) \
    ON CONFLICT (session_id, participant, field) DO UPDATE SET value = EXCLUDED.value, \
      seen = EXCLUDED.seen, at = EXCLUDED.at, expires_at = EXCLUDED.expires_at \
    WHERE presence.expires_at <= $8 OR presence.at <= EXCLUDED.at \
    RETURNING field";

/// The body of [`Store::set_presence`](a2_store_api::Store::set_presence):
/// a field is written unless the stored entry is unexpired with a strictly
/// greater `at`; the upsert decides that under the row lock. The first
/// field of a session never written makes the session exist.
pub(crate) async fn set_presence(
    tx: &Tx<'_>,
    session_id: &str,
    participant: &str,
    values: &BTreeMap<String, Value>,
    meta: &PresenceMeta,
    now: i64,
) -> TxResult<PresenceResult> {
    let mut result = PresenceResult::default();
    if values.is_empty() {
        return Ok(result);
    }
    let seen = meta
        .seen
        .map(|seen| sql_index("seen index", seen))
        .transpose()?;
    let expires_at = now.saturating_add(meta.ttl_ms);
    let fields: Vec<&str> = values.keys().map(String::as_str).collect();
    let states: Vec<Json<&Value>> = values.values().map(Json).collect();
    let upsert: [&(dyn ToSql + Sync); 8] = [
        &session_id,
        &participant,
        &fields,
        &states,
        &seen,
        &meta.at,
        &expires_at,
        &now,
    ];
    let session: [&(dyn ToSql + Sync); 2] = [&session_id, &now];
    // The session exists from its first presence field (active since then);
    // the upsert after, in the same round trip.
    let mut answers = tx
        .pipeline(&[
            Stmt::new(CREATE_SESSION, &session),
            Stmt::new(FIRST_ACTIVITY, &session),
            Stmt::new(UPSERT, &upsert),
        ])
        .await?;
    let rows = answers.pop().unwrap_or_default();
    for row in &rows {
        let field: String = row.try_get(0)?;
        if let Some(value) = values.get(&field) {
            result.applied.insert(field, value.clone());
        }
    }
    result.applied_count = result.applied.len();
    Ok(result)
}

/// The body of [`Store::read_presence`](a2_store_api::Store::read_presence):
/// unexpired, non-tombstone fields by participant, then field.
pub(crate) async fn read_presence(
    tx: &Tx<'_>,
    session_id: &str,
    now: i64,
) -> TxResult<Vec<PresenceRow>> {
    let rows = query(
        tx,
        "SELECT participant, field, value, seen, at, expires_at FROM presence \
         WHERE session_id = $1 AND expires_at > $2 AND value <> 'null'::jsonb \
         ORDER BY participant, field",
        &[&session_id, &now],
    )
    .await?;
    let mut presence = Vec::with_capacity(rows.len());
    for row in &rows {
        let Json(value): Json<Value> = row.try_get(2)?;
        let seen: Option<i64> = row.try_get(3)?;
        presence.push(PresenceRow::new(
            row.try_get::<_, String>(0)?,
            row.try_get::<_, String>(1)?,
            value,
            seen.map(index_of).transpose()?,
            row.try_get(4)?,
            row.try_get(5)?,
        ));
    }
    Ok(presence)
}
