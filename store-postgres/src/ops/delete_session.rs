//! `delete_session`: every row of one session gone in one transaction
//! (`a2_store_api::retention` decides what may go), and [`remove`], the
//! set-based removal `prune` shares.
//!
//! The session's row is locked first (as every writer's), then every
//! cursor row of the session (claimers and completions without events
//! lock only cursor rows: once they are held, no head changes under the
//! check). The cursors are then read as `cursors()` lists them, the rules
//! decide, and the removal's statements go with `COMMIT` in one round trip.
//! Open streams of the session are told by the `NOTIFY` in the same commit
//! (other processes) and by the caller's wake (this one); each then finds
//! the session's row gone, or another incarnation, and ends with
//! `SessionDeleted`.

use std::collections::BTreeMap;

use a2_store_api::retention::{delete_blocker, heads_ended, Removed};
use a2_store_api::{DeleteSessionRequest, DeleteSessionResult};
use tokio_postgres::types::ToSql;

use crate::db::{decode_state, execute, query_opt, Stmt, Tx, LOCK_SESSION};
use crate::error::TxResult;
use crate::notify::notification_payload;
use crate::rows::index_of;

/// Every cursor row of the sessions `$1`, locked in key order (the order
/// every batch of cursor locks takes).
pub(crate) const LOCK_CURSORS: &str = "SELECT 1 FROM cursors WHERE session_id = ANY($1) \
    ORDER BY session_id, consumer, lane, slot FOR UPDATE";

/// Tells listeners in every process (on commit) that the sessions `$2`
/// (with `NOTIFY` payloads `$3`) changed, for those with a registered
/// subscriber: `$1` channel. Sent before the subscribers' rows go.
const NOTIFY_MANY: &str = "SELECT pg_notify($1, k.payload) \
    FROM unnest($2::text[], $3::text[]) AS k(session_id, payload) \
    WHERE EXISTS (SELECT 1 FROM subscribers s WHERE s.session_id = k.session_id)";

/// The events of the sessions `$1`, deleted; one row per session with the
/// number deleted.
const DELETE_EVENTS: &str = "WITH gone AS (DELETE FROM events WHERE session_id = ANY($1) \
    RETURNING session_id) SELECT session_id, count(*) FROM gone GROUP BY session_id";

/// The other rows keyed by session, deleted for the sessions `$1`: every
/// table but `events` (above) and `sessions` (last).
const DELETE_ROWS: [&str; 11] = [
    "DELETE FROM cursors WHERE session_id = ANY($1)",
    "DELETE FROM lane_queue WHERE session_id = ANY($1)",
    "DELETE FROM completions WHERE session_id = ANY($1)",
    "DELETE FROM work WHERE session_id = ANY($1)",
    "DELETE FROM pins WHERE session_id = ANY($1)",
    "DELETE FROM checkpoints WHERE session_id = ANY($1)",
    "DELETE FROM snapshots WHERE session_id = ANY($1)",
    "DELETE FROM presence WHERE session_id = ANY($1)",
    "DELETE FROM pauses WHERE session_id = ANY($1)",
    "DELETE FROM subscribers WHERE session_id = ANY($1)",
    "DELETE FROM sessions WHERE session_id = ANY($1)",
];

/// The body of [`Store::delete_session`](a2_store_api::Store::delete_session)
/// for a validated request at `now`, on the schema whose `NOTIFY` channel
/// is `channel`. Commits the removal itself; every other answer leaves the
/// transaction to the caller, having written nothing.
pub(crate) async fn delete_session(
    tx: &Tx<'_>,
    channel: &str,
    request: &DeleteSessionRequest,
    now: i64,
) -> TxResult<DeleteSessionResult> {
    let session_id = request.session_id.as_str();
    let Some(row) = query_opt(tx, LOCK_SESSION, &[&session_id]).await? else {
        return Ok(DeleteSessionResult::NotFound);
    };
    let state = decode_state(&row)?;
    if !state.exists {
        // A row made only to be locked: no session was ever stored.
        return Ok(DeleteSessionResult::NotFound);
    }
    let head = index_of(state.head)?;
    if let Some(unmet) = request.unmet_condition(head) {
        return Ok(unmet);
    }
    let ids = [session_id];
    execute(tx, LOCK_CURSORS, &[&ids.as_slice()]).await?;
    let cursors = crate::ops::cursors::cursors(tx, session_id, now).await?;
    if !request.force {
        if let Some(refused) = delete_blocker(session_id, &cursors, now) {
            return Err(refused.into());
        }
    }
    let ended = if request.force {
        heads_ended(&cursors)
    } else {
        0
    };
    let events = remove(tx, channel, &ids, &[])
        .await?
        .0
        .get(session_id)
        .copied()
        .unwrap_or(0);
    let removed = Removed::new(
        state.incarnation(),
        head,
        events,
        cursors.len() as u64,
        ended,
    );
    Ok(DeleteSessionResult::Deleted { removed })
}

/// Deletes every row of the sessions `ids` (their rows and cursor rows
/// locked by the caller), sends their subscribers' `NOTIFY`, then runs
/// `after` and commits, all in one round trip. Returns the events deleted
/// per session (sessions without events are absent) and the answers of
/// the statements `after`.
pub(crate) async fn remove(
    tx: &Tx<'_>,
    channel: &str,
    ids: &[&str],
    after: &[Stmt<'_>],
) -> TxResult<(BTreeMap<String, u64>, Vec<Vec<tokio_postgres::Row>>)> {
    let channel = channel.to_owned();
    let payloads: Vec<&str> = ids.iter().map(|id| notification_payload(id)).collect();
    let keyed: [&(dyn ToSql + Sync); 1] = [&ids];
    let notify: [&(dyn ToSql + Sync); 3] = [&channel, &ids, &payloads];
    let mut statements = Vec::with_capacity(DELETE_ROWS.len() + 2 + after.len());
    statements.push(Stmt::new(NOTIFY_MANY, &notify));
    statements.push(Stmt::new(DELETE_EVENTS, &keyed));
    statements.extend(DELETE_ROWS.iter().map(|sql| Stmt::new(sql, &keyed)));
    statements.extend(after.iter().map(|s| Stmt::new(s.sql, s.params)));
    let mut answers = tx.commit_with(&statements).await?;
    let rest = answers.split_off((DELETE_ROWS.len() + 2).min(answers.len()));
    let mut events = BTreeMap::new();
    for row in answers.get(1).map(Vec::as_slice).unwrap_or_default() {
        let count: i64 = row.try_get(1)?;
        events.insert(row.try_get::<_, String>(0)?, index_of(count)?);
    }
    Ok((events, rest))
}
