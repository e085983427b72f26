//! `reschedule`: move or cancel a head that has never been claimed, or an
//! index still queued on a lane. The backend finds where the index is
//! (`ScheduledAt`); `RescheduleRequest::verdict` decides what to do.

use a2_store_api::schedule::{RescheduleStep, ScheduledAt};
use a2_store_api::{CursorKind, Dispatch, RescheduleRequest, RescheduleResult};

use crate::cursor_table::{advance, fence, load, put};
use crate::db::{execute, lock_session, query_opt, Tx};
use crate::error::TxResult;
use crate::ops::work::Touched;
use crate::rows::{index_of, key_of, CursorRow};

/// The body of [`Store::reschedule`](a2_store_api::Store::reschedule) for a
/// validated request at `now`. A writer: the session's lock first, then
/// the cause fenced (as an append's), then the cursor named locked and the
/// lane queue probed. A moved or cancelled head's consumer has its work
/// row rewritten from its heads; also returns whether that made a row
/// ready sooner.
pub(crate) async fn reschedule(
    tx: &Tx<'_>,
    request: &RescheduleRequest,
    now: i64,
) -> TxResult<(RescheduleResult, bool)> {
    let session_id = request.session_id.as_str();
    let state = lock_session(tx, session_id).await?;
    state.fence(session_id, request.incarnation)?;
    if let Some(cause) = &request.cause {
        fence(tx, session_id, state.clear, cause).await?;
    }
    let stored = i64::try_from(request.index).ok();
    let mut cursor = match key_of(&request.consumer, request.lane.as_deref(), request.index) {
        Some((consumer, lane, slot)) => load(tx, session_id, &consumer, &lane, slot, true).await?,
        None => None,
    };
    let queued = match (&cursor, stored) {
        (Some(c), Some(index))
            if c.kind == CursorKind::Lane && c.head.is_some_and(|h| h < index) =>
        {
            query_opt(
                tx,
                "SELECT 1 FROM lane_queue WHERE session_id = $1 AND consumer = $2 \
                 AND lane = $3 AND idx = $4",
                &[&session_id, &c.consumer, &c.lane, &index],
            )
            .await?
            .is_some()
        }
        _ => false,
    };
    let event_exists = match (&cursor, stored) {
        (None, Some(index)) => query_opt(
            tx,
            "SELECT 1 FROM events WHERE session_id = $1 AND idx = $2",
            &[&session_id, &index],
        )
        .await?
        .is_some(),
        _ => false,
    };
    let at = match &cursor {
        None => ScheduledAt::NoCursor { event_exists },
        Some(c) if stored.is_some() && c.head == stored => ScheduledAt::Head(c.kind, &c.dispatch),
        Some(_) if queued => ScheduledAt::Queued,
        Some(c) => ScheduledAt::Elsewhere(c.kind),
    };
    let step = request.verdict(index_of(state.clear)?, at, now)?;
    let mut touched = Touched::new(now);
    match (step, cursor.as_mut(), stored) {
        (RescheduleStep::MoveHead(not_before), Some(cursor), _) => {
            cursor.dispatch = Dispatch::scheduled(not_before);
            put(tx, session_id, cursor).await?;
            touched.rewrite(cursor);
        }
        (RescheduleStep::CancelHead, Some(cursor), _) => {
            advance(tx, session_id, cursor).await?;
            touched.rewrite(cursor);
        }
        (RescheduleStep::MoveQueued(not_before), Some(cursor), Some(index)) => {
            queue_entry(tx, session_id, cursor, index, Some(not_before)).await?;
        }
        (RescheduleStep::CancelQueued, Some(cursor), Some(index)) => {
            queue_entry(tx, session_id, cursor, index, None).await?;
        }
        // `Answer` changes nothing; the other steps need the cursor found.
        _ => {}
    }
    let ready = touched.flush(tx, session_id).await?;
    Ok((step.result(), ready))
}

/// Stores a queued index's new not-before time (`Some`), or takes it out
/// of the lane's queue (`None`).
async fn queue_entry(
    tx: &Tx<'_>,
    session_id: &str,
    cursor: &CursorRow,
    index: i64,
    not_before: Option<Option<i64>>,
) -> TxResult<()> {
    match not_before {
        Some(not_before) => {
            execute(
                tx,
                "UPDATE lane_queue SET not_before = $5 WHERE session_id = $1 \
                 AND consumer = $2 AND lane = $3 AND idx = $4",
                &[
                    &session_id,
                    &cursor.consumer,
                    &cursor.lane,
                    &index,
                    &not_before,
                ],
            )
            .await?
        }
        None => {
            execute(
                tx,
                "DELETE FROM lane_queue WHERE session_id = $1 AND consumer = $2 \
                 AND lane = $3 AND idx = $4",
                &[&session_id, &cursor.consumer, &cursor.lane, &index],
            )
            .await?
        }
    };
    Ok(())
}
