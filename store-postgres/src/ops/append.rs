//! `append`: idempotent replay of stored ids, the cleared-origin check and
//! the fence of causes, then the batch is written.

use a2_store_api::{replay, AppendOptions, AppendResult, NewEvent, StoreError};

use std::collections::HashMap;

use a2_store_api::StoredEvent;
use tokio_postgres::types::ToSql;

use crate::batch::{prepare, stored_ids, stored_ids_sql, Batch, Columns, Prepared};
use crate::cursor_table::{fence, has_pending, refresh_log_types, served_names, HAS_PENDING};
use crate::db::{decode_state, lock_session, SessionState, Stmt, Tx, LOCK_SESSION};
use crate::error::TxResult;
use crate::inner::{Inner, Wrote};
use crate::ops::work::{Touched, TouchedPlan};
use crate::rows::{decode_event, index_of};

/// The body of [`Store::append`](a2_store_api::Store::append) for a
/// validated, non-empty batch. Returns the result and what it wrote.
pub(crate) async fn append(
    tx: &Tx<'_>,
    inner: &Inner,
    session_id: &str,
    events: &[NewEvent],
    options: &AppendOptions,
) -> TxResult<(AppendResult, Wrote)> {
    let consumers = options.consumers.as_deref();
    let supplied: Vec<&str> = events.iter().filter_map(|e| e.id.as_deref()).collect();
    // The session's lock and the supplied ids' lookup in one round trip.
    let (mut state, mut owners) = lock_with_ids(tx, session_id, &supplied).await?;
    if !owners.is_empty() {
        // Batch ids are distinct, so as many owners as events means every
        // event has a stored id: a replay.
        let fresh = events.len() - owners.len();
        if fresh > 0 {
            return Err(StoreError::mixed_batch(owners.len(), fresh).into());
        }
        let rows = events
            .iter()
            .filter_map(|event| owners.remove(event.id.as_deref()?))
            .collect();
        let events = replay::append(events, rows)?;
        refresh_log_types(tx, session_id, consumers).await?;
        let has_pending = has_pending(tx, session_id, consumers, inner.clock.now_ms()).await?;
        return Ok((AppendResult::new(events, has_pending), Wrote::default()));
    }
    options.check_origin(session_id, index_of(state.clear)?)?;
    for cause in events.iter().filter_map(|event| event.cause.as_ref()) {
        fence(tx, session_id, state.clear, cause).await?;
    }
    let batch = Batch {
        session_id,
        events,
        cause: None,
        consumers,
    };
    let mut touched = Touched::new(inner.clock.now_ms());
    // Generated ids are checked here (one round trip when there are any).
    let prepared = prepare(tx, inner, &mut state, &batch, &mut touched).await?;
    // The rows, the head, the cursors, the queue, the NOTIFY, the work
    // rows, `has_pending` and `COMMIT` in one round trip.
    let columns = prepared.as_ref().map(Prepared::columns).transpose()?;
    let params = columns.as_ref().map(|c| c.params(&inner.channel));
    let plan = touched.plan(session_id);
    let work = plan.params();
    let served = served_names(consumers);
    let now = touched.now();
    let pending_params: [&(dyn ToSql + Sync); 3] = [&session_id, &served, &now];
    let mut statements = Vec::with_capacity(10);
    if let Some(params) = &params {
        Columns::push(params, &mut statements);
    }
    TouchedPlan::push(&work, &mut statements);
    statements.push(Stmt::new(HAS_PENDING, &pending_params));
    let mut answers = tx.commit_with(&statements).await?;
    let pending = answers.pop().unwrap_or_default();
    let has_pending = match pending.first() {
        Some(row) => row.try_get(0)?,
        None => false,
    };
    let work = plan.finish(&mut answers, &work)?;
    let stored = prepared.map(|p| p.stored).unwrap_or_default();
    Ok((
        AppendResult::new(stored, has_pending),
        Wrote { events: true, work },
    ))
}

/// Locks the session row (inserting it first when the session is new) and
/// looks up the rows above the clear owning any of `ids`, in one round trip
/// for a session that exists (see [`lock_session`] and
/// [`crate::batch::stored_ids`]): the lookup reads the clear index under
/// the lock, in the same pipeline.
async fn lock_with_ids(
    tx: &Tx<'_>,
    session_id: &str,
    ids: &[&str],
) -> TxResult<(SessionState, HashMap<String, StoredEvent>)> {
    if ids.is_empty() {
        return Ok((lock_session(tx, session_id).await?, HashMap::new()));
    }
    let lock_params: [&(dyn ToSql + Sync); 1] = [&session_id];
    let ids_params: [&(dyn ToSql + Sync); 2] = [&session_id, &ids];
    let lookup = stored_ids_sql();
    let mut answers = tx
        .pipeline(&[
            Stmt::new(LOCK_SESSION, &lock_params),
            Stmt::new(&lookup, &ids_params),
        ])
        .await?;
    let found = answers.pop().unwrap_or_default();
    let locked = answers.pop().unwrap_or_default();
    let Some(row) = locked.first() else {
        // A session new when the lookup ran: once its row is locked, a
        // concurrent first append may have committed rows, so look again.
        let state = lock_session(tx, session_id).await?;
        let owners = stored_ids(tx, session_id, state.clear, ids).await?;
        return Ok((state, owners));
    };
    let state = decode_state(row)?;
    let mut owners = HashMap::with_capacity(found.len());
    for row in &found {
        let event = decode_event(row, 0, session_id)?;
        owners.insert(event.id.clone(), event);
    }
    Ok((state, owners))
}

/// The body of [`Store::append`](a2_store_api::Store::append) for an empty
/// batch: refreshes declared log types and reports `has_pending`.
pub(crate) async fn append_nothing(
    tx: &Tx<'_>,
    inner: &Inner,
    session_id: &str,
    options: &AppendOptions,
) -> TxResult<AppendResult> {
    let consumers = options.consumers.as_deref();
    // Only the declared log cursors' rows change (each under its row lock).
    refresh_log_types(tx, session_id, consumers).await?;
    Ok(AppendResult::new(
        Vec::new(),
        has_pending(tx, session_id, consumers, inner.clock.now_ms()).await?,
    ))
}
