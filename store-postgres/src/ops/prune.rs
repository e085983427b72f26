//! `prune`: the idle sessions with nothing left to do deleted a page at a
//! time, with expired presence fields and unpinned checkpoints swept.
//!
//! One transaction per page. The candidates are read from `sessions_idle`
//! (`(last_activity, session_id)`, a range scan of at most a page), then,
//! unless it is a dry run, their session rows and cursor rows are locked
//! and read again: a session that gained activity or work since is kept.
//! `a2_store_api::retention` decides (`idle_cutoff`, `prunable`); the
//! deletes are set-based (`= ANY($1)`, one statement per table for the
//! whole page, [`remove`]) and go with the sweeps and `COMMIT` in one
//! round trip.

use std::collections::{BTreeMap, BTreeSet};

use a2_store_api::retention::{idle_cutoff, prunable, PruneFrom};
use a2_store_api::{Cursor, PruneRequest, PruneResult};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::db::{query, Stmt, Tx};
use crate::error::TxResult;
use crate::ops::delete_session::{remove, LOCK_CURSORS};
use crate::rows::{CursorRow, CURSOR_COLUMNS};

/// The first page of idle sessions: `$1` the cutoff, `$2` the page size.
const CANDIDATES: &str = "SELECT session_id, last_activity FROM sessions \
    WHERE last_activity < $1 ORDER BY last_activity, session_id LIMIT $2";

/// A later page, after `($2, $3)` in `(last_activity, session_id)` order:
/// `$1` the cutoff, `$4` the page size.
const CANDIDATES_AFTER: &str = "SELECT session_id, last_activity FROM sessions \
    WHERE last_activity < $1 AND (last_activity, session_id) > ($2, $3) \
    ORDER BY last_activity, session_id LIMIT $4";

/// The candidates' rows locked (in id order, as `fork` locks two) and read
/// again: `$1` the sessions.
const LOCK_SESSIONS: &str = "SELECT session_id, last_activity FROM sessions \
    WHERE session_id = ANY($1) ORDER BY session_id FOR UPDATE";

/// The cursors `cursors()` lists, of the sessions `$1`, each with its session.
fn cursors_sql() -> String {
    format!(
        "SELECT c.session_id, {CURSOR_COLUMNS} FROM cursors c WHERE c.session_id = ANY($1) \
         AND (c.kind <> 0 OR c.head IS NOT NULL)"
    )
}

/// Expired presence fields (`expires_at` at or before `$1`, as
/// `read_presence` hides them), at most `$2`, by the
/// `presence_expiry` index, deleted; their count.
const SWEEP_PRESENCE: &str = "WITH gone AS (DELETE FROM presence p USING \
      (SELECT session_id, participant, field FROM presence WHERE expires_at <= $1 \
        ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) d \
      WHERE p.session_id = d.session_id AND p.participant = d.participant \
        AND p.field = d.field RETURNING 1) \
    SELECT count(*) FROM gone";

/// Checkpoints no pin holds that are not their reducer's latest snapshot,
/// at most `$1`, deleted; their count. (`read_state` reads a checkpoint
/// only while a pin holds it.)
const SWEEP_CHECKPOINTS: &str = "WITH gone AS (DELETE FROM checkpoints k USING \
      (SELECT c.session_id, c.reducer, c.idx FROM checkpoints c \
        WHERE NOT EXISTS (SELECT 1 FROM pins p WHERE p.session_id = c.session_id \
            AND p.reducer = c.reducer AND p.idx = c.idx) \
          AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.session_id = c.session_id \
            AND s.reducer = c.reducer AND s.idx = c.idx) \
        LIMIT $1 FOR UPDATE OF c SKIP LOCKED) d \
      WHERE k.session_id = d.session_id AND k.reducer = d.reducer AND k.idx = d.idx \
      RETURNING 1) \
    SELECT count(*) FROM gone";

/// The body of [`Store::prune`](a2_store_api::Store::prune) for a validated
/// request at `now`, on the schema whose `NOTIFY` channel is `channel`.
/// Returns the page's answer; its `sessions` are the ones deleted (the
/// caller wakes their streams).
pub(crate) async fn prune(
    tx: &Tx<'_>,
    channel: &str,
    request: &PruneRequest,
    now: i64,
) -> TxResult<PruneResult> {
    let cutoff = idle_cutoff(now, request.idle_for_ms);
    let page = request.page_size();
    let limit = i64::try_from(page).unwrap_or(i64::MAX);
    let candidates = match &request.after {
        None => query(tx, CANDIDATES, &[&cutoff, &limit]).await?,
        Some(after) => {
            query(
                tx,
                CANDIDATES_AFTER,
                &[&cutoff, &after.last_activity_ms, &after.session_id, &limit],
            )
            .await?
        }
    };
    let mut idle: Vec<(String, i64)> = Vec::with_capacity(candidates.len());
    for row in &candidates {
        idle.push((row.try_get(0)?, row.try_get(1)?));
    }
    let examined = idle.len();
    let next = match idle.last() {
        Some((session_id, last_activity)) if examined == page => Some(PruneFrom {
            last_activity_ms: *last_activity,
            session_id: session_id.clone(),
        }),
        _ => None,
    };
    let ids: Vec<&str> = idle.iter().map(|(id, _)| id.as_str()).collect();
    if request.dry_run {
        let cursors = cursors_of(tx, &ids).await?;
        let would = idle
            .iter()
            .filter(|(id, _)| {
                prunable(
                    cursors.get(id).map(Vec::as_slice).unwrap_or_default(),
                    request.include_dead_letters,
                )
            })
            .map(|(id, _)| id.clone())
            .collect();
        return Ok(PruneResult::new(would, examined, next));
    }
    // Under the locks: still idle (no append since) and still without work.
    let mut still_idle = BTreeSet::new();
    if !ids.is_empty() {
        for row in query(tx, LOCK_SESSIONS, &[&ids]).await? {
            let last_activity: Option<i64> = row.try_get(1)?;
            if last_activity.is_some_and(|at| at < cutoff) {
                still_idle.insert(row.try_get::<_, String>(0)?);
            }
        }
    }
    let locked: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| still_idle.contains(*id))
        .collect();
    let cursors = if locked.is_empty() {
        BTreeMap::new()
    } else {
        query(tx, LOCK_CURSORS, &[&locked]).await?;
        cursors_of(tx, &locked).await?
    };
    let deleted: Vec<String> = locked
        .iter()
        .filter(|id| {
            prunable(
                cursors.get(**id).map(Vec::as_slice).unwrap_or_default(),
                request.include_dead_letters,
            )
        })
        .map(|id| (*id).to_owned())
        .collect();
    let gone: Vec<&str> = deleted.iter().map(String::as_str).collect();
    let presence: [&(dyn ToSql + Sync); 2] = [&now, &limit];
    let checkpoints: [&(dyn ToSql + Sync); 1] = [&limit];
    let sweeps = [
        Stmt::new(SWEEP_PRESENCE, &presence),
        Stmt::new(SWEEP_CHECKPOINTS, &checkpoints),
    ];
    let swept = if gone.is_empty() {
        tx.commit_with(&sweeps).await?
    } else {
        remove(tx, channel, &gone, &sweeps).await?.1
    };
    let expired = count(swept.first())?;
    let unpinned = count(swept.get(1))?;
    Ok(PruneResult::new(deleted, examined, next).with_swept(expired, unpinned))
}

/// The cursors of `ids` as `cursors()` lists them (without the pause in
/// force, which no retention rule reads), by session.
async fn cursors_of(tx: &Tx<'_>, ids: &[&str]) -> TxResult<BTreeMap<String, Vec<Cursor>>> {
    let mut by_session: BTreeMap<String, Vec<Cursor>> = BTreeMap::new();
    if ids.is_empty() {
        return Ok(by_session);
    }
    for row in query(tx, &cursors_sql(), &[&ids]).await? {
        let cursor = CursorRow::decode(&row, 1)?.to_cursor()?;
        by_session.entry(row.try_get(0)?).or_default().push(cursor);
    }
    Ok(by_session)
}

/// The count a sweep answered (0 when it answered nothing).
fn count(rows: Option<&Vec<Row>>) -> TxResult<u64> {
    let Some(row) = rows.and_then(|rows| rows.first()) else {
        return Ok(0);
    };
    let count: i64 = row.try_get(0)?;
    Ok(u64::try_from(count).unwrap_or(0))
}
