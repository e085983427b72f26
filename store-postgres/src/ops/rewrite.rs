//! `rewrite_payloads`: compare-and-set rewrites of stored payloads, set
//! based, in one transaction of two round trips.
//!
//! The first round trip locks the session's row (as every writer of the
//! session does, so no clear, reclaim, append or delete runs under the
//! check) and reads, with `unnest`, every stored row an item names, each
//! locked `FOR UPDATE` in key order (snapshots and presence are written
//! without the session's lock). [`a2_store_api::rewrite::verdict`] then
//! decides; a refusal ends the transaction having written nothing. The
//! second round trip sends one `UPDATE ... FROM unnest(...)` per kind with
//! `COMMIT`. Only the payload columns change.

use a2_store_api::rewrite::{self, Found, FoundState};
use a2_store_api::{RewritePayloadsRequest, RewritePayloadsResult};
use serde_json::Value;
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::Row;

use crate::db::{decode_state, Stmt, Tx, LOCK_SESSION};
use crate::error::TxResult;
use crate::rows::index_of;

/// The events at the indexes `$2` of session `$1` (`$3` the items'
/// positions), locked: position, type, payload.
const EVENTS: &str = "SELECT k.pos, e.type, e.payload \
    FROM unnest($2::bigint[], $3::bigint[]) AS k(idx, pos) \
    JOIN events e ON e.session_id = $1 AND e.idx = k.idx \
    ORDER BY e.idx FOR UPDATE OF e";

/// The head snapshots of the reducers `$2` at the indexes `$3` of session
/// `$1` (`$4` the positions), locked: position, state.
const SNAPSHOTS: &str = "SELECT k.pos, s.state \
    FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS k(reducer, idx, pos) \
    JOIN snapshots s ON s.session_id = $1 AND s.reducer = k.reducer AND s.idx = k.idx \
    ORDER BY s.reducer FOR UPDATE OF s";

/// The checkpoints of the reducers `$2` at the indexes `$3` of session
/// `$1` (`$4` the positions), locked: position, state.
const CHECKPOINTS: &str = "SELECT k.pos, c.state \
    FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS k(reducer, idx, pos) \
    JOIN checkpoints c ON c.session_id = $1 AND c.reducer = k.reducer AND c.idx = k.idx \
    ORDER BY c.reducer, c.idx FOR UPDATE OF c";

/// The presence fields `$2`.`$3` of session `$1` (`$4` the positions),
/// locked: position, value, expiry.
const PRESENCE: &str = "SELECT k.pos, p.value, p.expires_at \
    FROM unnest($2::text[], $3::text[], $4::bigint[]) AS k(participant, field, pos) \
    JOIN presence p ON p.session_id = $1 AND p.participant = k.participant AND p.field = k.field \
    ORDER BY p.participant, p.field FOR UPDATE OF p";

/// The new payloads `$3` of the events `$2` of session `$1`.
const UPDATE_EVENTS: &str = "UPDATE events e SET payload = k.payload \
    FROM unnest($2::bigint[], $3::jsonb[]) AS k(idx, payload) \
    WHERE e.session_id = $1 AND e.idx = k.idx";

/// The new states `$4` of the head snapshots of reducers `$2` at `$3`.
const UPDATE_SNAPSHOTS: &str = "UPDATE snapshots s SET state = k.state \
    FROM unnest($2::text[], $3::bigint[], $4::jsonb[]) AS k(reducer, idx, state) \
    WHERE s.session_id = $1 AND s.reducer = k.reducer AND s.idx = k.idx";

/// The new states `$4` of the checkpoints of reducers `$2` at `$3`.
const UPDATE_CHECKPOINTS: &str = "UPDATE checkpoints c SET state = k.state \
    FROM unnest($2::text[], $3::bigint[], $4::jsonb[]) AS k(reducer, idx, state) \
    WHERE c.session_id = $1 AND c.reducer = k.reducer AND c.idx = k.idx";

/// The new values `$4` of the presence fields `$2`.`$3`.
const UPDATE_PRESENCE: &str = "UPDATE presence p SET value = k.value \
    FROM unnest($2::text[], $3::text[], $4::jsonb[]) AS k(participant, field, value) \
    WHERE p.session_id = $1 AND p.participant = k.participant AND p.field = k.field";

/// The body of [`Store::rewrite_payloads`](a2_store_api::Store::rewrite_payloads)
/// for a validated request at `now`: commits the rewrite itself; a refusal
/// leaves the transaction to the caller, having written nothing.
pub(crate) async fn rewrite_payloads(
    tx: &Tx<'_>,
    request: &RewritePayloadsRequest,
    now: i64,
) -> TxResult<RewritePayloadsResult> {
    let session_id = request.session_id.as_str();
    // Indexes beyond any stored row (above i64::MAX) are left out: nothing
    // is found for them.
    let fitting = |index: u64| i64::try_from(index).ok();
    let event_keys: Vec<(i64, i64)> = positioned(request.events.iter().map(|e| fitting(e.index)));
    let (event_idx, event_pos): (Vec<i64>, Vec<i64>) = event_keys.iter().copied().unzip();
    let state_keys: Vec<(i64, i64)> = positioned(request.states.iter().map(|s| fitting(s.index)));
    let state_reducers: Vec<&str> = state_keys
        .iter()
        .filter_map(|(_, pos)| usize::try_from(*pos).ok())
        .filter_map(|pos| request.states.get(pos))
        .map(|item| item.reducer.as_str())
        .collect();
    let (state_idx, state_pos): (Vec<i64>, Vec<i64>) = state_keys.iter().copied().unzip();
    let participants: Vec<&str> = request
        .presence
        .iter()
        .map(|item| item.participant.as_str())
        .collect();
    let fields: Vec<&str> = request
        .presence
        .iter()
        .map(|item| item.field.as_str())
        .collect();
    let presence_pos: Vec<i64> = (0..request.presence.len())
        .filter_map(|pos| i64::try_from(pos).ok())
        .collect();

    let lock: [&(dyn ToSql + Sync); 1] = [&session_id];
    let events: [&(dyn ToSql + Sync); 3] = [&session_id, &event_idx, &event_pos];
    let states: [&(dyn ToSql + Sync); 4] = [&session_id, &state_reducers, &state_idx, &state_pos];
    let presence: [&(dyn ToSql + Sync); 4] = [&session_id, &participants, &fields, &presence_pos];
    let answers = tx
        .pipeline(&[
            Stmt::new(LOCK_SESSION, &lock),
            Stmt::new(EVENTS, &events),
            Stmt::new(SNAPSHOTS, &states),
            Stmt::new(CHECKPOINTS, &states),
            Stmt::new(PRESENCE, &presence),
        ])
        .await?;
    let [session, event_rows, snapshot_rows, checkpoint_rows, presence_rows]: [Vec<Row>; 5] =
        answers.try_into().map_err(|_| {
            a2_store_api::StoreError::corrupt_value("answer to the rewrite's reads")
        })?;
    let state = session.first().map(decode_state).transpose()?;

    let mut stored_events: Vec<Option<(String, Value)>> = vec![None; request.events.len()];
    for row in &event_rows {
        let Json(payload): Json<Value> = row.try_get(2)?;
        place(
            &mut stored_events,
            row.try_get(0)?,
            (row.try_get(1)?, payload),
        );
    }
    let mut heads: Vec<Option<Value>> = vec![None; request.states.len()];
    for row in &snapshot_rows {
        let Json(state): Json<Value> = row.try_get(1)?;
        place(&mut heads, row.try_get(0)?, state);
    }
    let mut checkpoints: Vec<Option<Value>> = vec![None; request.states.len()];
    for row in &checkpoint_rows {
        let Json(state): Json<Value> = row.try_get(1)?;
        place(&mut checkpoints, row.try_get(0)?, state);
    }
    let mut stored_presence: Vec<Option<(Value, i64)>> = vec![None; request.presence.len()];
    for row in &presence_rows {
        let Json(value): Json<Value> = row.try_get(1)?;
        place(
            &mut stored_presence,
            row.try_get(0)?,
            (value, row.try_get(2)?),
        );
    }

    let found = Found {
        incarnation: state
            .as_ref()
            .and_then(|state| state.exists.then(|| state.incarnation())),
        clear_index: state
            .as_ref()
            .map(|state| index_of(state.clear))
            .transpose()?
            .unwrap_or(0),
        now_ms: now,
        events: stored_events
            .iter()
            .map(|event| event.as_ref().map(|(ty, payload)| (ty.as_str(), payload)))
            .collect(),
        states: heads
            .iter()
            .zip(&checkpoints)
            .map(|(head, checkpoint)| FoundState {
                head: head.as_ref(),
                checkpoint: checkpoint.as_ref(),
            })
            .collect(),
        presence: stored_presence
            .iter()
            .map(|entry| entry.as_ref().map(|(value, expires)| (value, *expires)))
            .collect(),
    };
    let plan = rewrite::verdict(request, &found)?;

    // Every item passed, so every event index and state index fits.
    let new_events: Vec<Json<&Value>> = request
        .events
        .iter()
        .map(|item| Json(item.new.as_value()))
        .collect();
    let mut head_keys = (Vec::new(), Vec::new(), Vec::new());
    let mut checkpoint_keys = (Vec::new(), Vec::new(), Vec::new());
    for (item, copies) in request.states.iter().zip(&plan.states) {
        let index = crate::db::sql_index("snapshot index", item.index)?;
        for (wanted, keys) in [
            (copies.head, &mut head_keys),
            (copies.checkpoint, &mut checkpoint_keys),
        ] {
            if wanted {
                keys.0.push(item.reducer.as_str());
                keys.1.push(index);
                keys.2.push(Json(&item.new));
            }
        }
    }
    let new_presence: Vec<Json<&Value>> = request
        .presence
        .iter()
        .map(|item| Json(&item.new))
        .collect();
    let events: [&(dyn ToSql + Sync); 3] = [&session_id, &event_idx, &new_events];
    let heads: [&(dyn ToSql + Sync); 4] = [&session_id, &head_keys.0, &head_keys.1, &head_keys.2];
    let checkpoints: [&(dyn ToSql + Sync); 4] = [
        &session_id,
        &checkpoint_keys.0,
        &checkpoint_keys.1,
        &checkpoint_keys.2,
    ];
    let presence: [&(dyn ToSql + Sync); 4] = [&session_id, &participants, &fields, &new_presence];
    let mut updates = Vec::with_capacity(4);
    if !request.events.is_empty() {
        updates.push(Stmt::new(UPDATE_EVENTS, &events));
    }
    if !head_keys.0.is_empty() {
        updates.push(Stmt::new(UPDATE_SNAPSHOTS, &heads));
    }
    if !checkpoint_keys.0.is_empty() {
        updates.push(Stmt::new(UPDATE_CHECKPOINTS, &checkpoints));
    }
    if !request.presence.is_empty() {
        updates.push(Stmt::new(UPDATE_PRESENCE, &presence));
    }
    tx.commit_with(&updates).await?;
    Ok(RewritePayloadsResult::of(request))
}

/// `(key, position)` for each item whose key is `Some`.
fn positioned(keys: impl Iterator<Item = Option<i64>>) -> Vec<(i64, i64)> {
    keys.enumerate()
        .filter_map(|(pos, key)| Some((key?, i64::try_from(pos).ok()?)))
        .collect()
}

/// Puts `value` at `position` (a row's `pos` column) of `slots`; a position
/// outside them (never sent) is ignored.
fn place<T>(slots: &mut [Option<T>], position: i64, value: T) {
    if let Some(slot) = usize::try_from(position)
        .ok()
        .and_then(|position| slots.get_mut(position))
    {
        *slot = Some(value);
    }
}
