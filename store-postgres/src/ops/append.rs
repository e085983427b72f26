//! `append`: idempotent replay of stored ids, the cleared-origin check and
//! the fence of causes, then the batch is written.

use a2_store_api::{replay, AppendOptions, AppendResult, NewEvent, StoreError};

use crate::batch::{stored_ids, write, Batch};
use crate::cursor_table::{fence, has_pending, refresh_log_types};
use crate::db::{lock_session, Tx};
use crate::error::TxResult;
use crate::inner::{Inner, Wrote};
use crate::ops::work::Touched;
use crate::rows::index_of;

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
    let mut state = lock_session(tx, session_id).await?;
    let supplied: Vec<&str> = events.iter().filter_map(|e| e.id.as_deref()).collect();
    let mut owners = stored_ids(tx, session_id, state.clear, &supplied).await?;
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
        let has_pending = has_pending(tx, session_id, consumers).await?;
        return Ok((
            AppendResult {
                events,
                has_pending,
            },
            Wrote::default(),
        ));
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
    let stored = write(tx, inner, &mut state, &batch, &mut touched).await?;
    let work = touched.flush(tx, session_id).await?;
    let has_pending = has_pending(tx, session_id, consumers).await?;
    Ok((
        AppendResult {
            events: stored,
            has_pending,
        },
        Wrote { events: true, work },
    ))
}

/// The body of [`Store::append`](a2_store_api::Store::append) for an empty
/// batch: refreshes declared log types and reports `has_pending`.
pub(crate) async fn append_nothing(
    tx: &Tx<'_>,
    session_id: &str,
    options: &AppendOptions,
) -> TxResult<AppendResult> {
    let consumers = options.consumers.as_deref();
    // Only the declared log cursors' rows change (each under its row lock).
    refresh_log_types(tx, session_id, consumers).await?;
    Ok(AppendResult {
        events: Vec::new(),
        has_pending: has_pending(tx, session_id, consumers).await?,
    })
}
