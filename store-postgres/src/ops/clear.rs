//! `clear` (the marker, dropping targeted cursors and every pin) and
//! `reclaim` (deleting rows below the marker in bounded batches).

use a2_store_api::{ClearRequest, ClearResult, NewEvent, ReclaimResult, StoreError, RECLAIM_BATCH};

use crate::batch::{write, Batch};
use crate::cursor_table::fence;
use crate::db::{execute, lock_session, Tx};
use crate::error::TxResult;
use crate::inner::{Inner, Wrote};
use crate::ops::work::{lock_and_rewrite, Rule, Touched};
use crate::rows::index_of;

/// The body of [`Store::clear`](a2_store_api::Store::clear). Returns the
/// result and what it wrote. Every work row of the session is rewritten
/// from the cursors left (none has a head: the rows go).
pub(crate) async fn clear(
    tx: &Tx<'_>,
    inner: &Inner,
    request: &ClearRequest,
) -> TxResult<(ClearResult, Wrote)> {
    let session_id = request.session_id.as_str();
    let mut state = lock_session(tx, session_id).await?;
    state.fence(session_id, request.incarnation)?;
    if let Some(cause) = &request.cause {
        fence(tx, session_id, state.clear, cause).await?;
    }
    if let Some(unmet) = request.unmet_condition(index_of(state.head)?) {
        return Ok((unmet, Wrote::default()));
    }
    let batch = Batch {
        session_id,
        events: &[NewEvent::clear_marker()],
        cause: None,
        consumers: None,
    };
    let now = inner.clock.now_ms();
    // The marker has no targets and no declarations: it touches no cursor.
    let mut touched = Touched::new(now);
    let mut rows = write(tx, inner, &mut state, &batch, &mut touched).await?;
    let Some(marker) = rows.pop() else {
        return Err(StoreError::Backend {
            message: "clearing: the marker row was not written".to_owned(),
            source: None,
        }
        .into());
    };
    let marker_index = state.head;
    execute(
        tx,
        "UPDATE sessions SET clear_index = $2 WHERE session_id = $1",
        &[&session_id, &marker_index],
    )
    .await?;
    for sql in [
        "DELETE FROM cursors WHERE session_id = $1 AND kind <> 2",
        "DELETE FROM lane_queue WHERE session_id = $1",
        "DELETE FROM completions WHERE session_id = $1",
        "DELETE FROM pins WHERE session_id = $1",
    ] {
        execute(tx, sql, &[&session_id]).await?;
    }
    execute(
        tx,
        "UPDATE cursors SET position = $2, head = NULL, attempt_count = 0, \
           first_claimed_at = NULL, last_claimed_at = NULL, claim_holder = NULL, \
           claim_expires_at = NULL, failure_count = 0, last_failed_at = NULL, \
           last_failed_attempt = NULL, last_error = NULL, failed_at = NULL, expired = false \
         WHERE session_id = $1",
        &[&session_id, &marker_index],
    )
    .await?;
    // Every cursor lock is held (the deletes and updates above took them).
    lock_and_rewrite(tx, session_id, None, now, Rule::Touched).await?;
    let wrote = Wrote {
        events: true,
        work: false,
    };
    Ok((ClearResult::Cleared { marker }, wrote))
}

/// The body of [`Store::reclaim`](a2_store_api::Store::reclaim).
pub(crate) async fn reclaim(tx: &Tx<'_>, session_id: &str) -> TxResult<ReclaimResult> {
    let state = lock_session(tx, session_id).await?;
    if state.clear == 0 {
        return Ok(ReclaimResult::nothing_left());
    }
    let batch = i64::try_from(RECLAIM_BATCH).unwrap_or(i64::MAX);
    let remaining = (state.clear - 1 - state.reclaimed).max(0);
    let count = remaining.min(batch);
    let through = state.reclaimed + count;
    if count > 0 {
        execute(
            tx,
            "DELETE FROM events WHERE session_id = $1 AND idx > $2 AND idx <= $3",
            &[&session_id, &state.reclaimed, &through],
        )
        .await?;
        execute(
            tx,
            "UPDATE sessions SET reclaimed_through = $2 WHERE session_id = $1",
            &[&session_id, &through],
        )
        .await?;
    }
    let done = through >= state.clear - 1;
    if done {
        for sql in [
            "DELETE FROM checkpoints WHERE session_id = $1 AND idx < $2",
            "DELETE FROM snapshots WHERE session_id = $1 AND idx < $2",
        ] {
            execute(tx, sql, &[&session_id, &state.clear]).await?;
        }
    }
    Ok(ReclaimResult::new(index_of(count)?, done))
}
