//! `reschedule`: moving or cancelling a head that has never run, or an
//! index still queued on a lane. This module finds where the index is
//! (`ScheduledAt`); `RescheduleRequest::verdict` decides what happens.

use a2_store_api::{
    CursorKind, Dispatch, RescheduleRequest, RescheduleResult, RescheduleStep, ScheduledAt,
    StoreError,
};
use rusqlite::Connection;

use crate::cursor_rows::{self, advance, fence, CursorRow};
use crate::errors::SqlContext;
use crate::events::row_at;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};
use crate::values::SqlIndex;
use crate::work::{self, Wake};

/// Applies `request` (validated): the cause fenced first, then the
/// verdict's step stored, the consumer's work row kept exact (`Wake`: it
/// moved earlier).
pub(crate) fn reschedule(
    tx: &Connection,
    ctx: &Ctx,
    request: &RescheduleRequest,
) -> Result<(RescheduleResult, Wake), StoreError> {
    let mut wake = Wake::default();
    let session = session::find(tx, &request.session_id)?;
    if let Some(session) = &session {
        session.fence_incarnation(request.incarnation)?;
    }
    if let Some(cause) = &request.cause {
        fence(tx, session.as_ref(), &request.session_id, cause)?;
    }
    let now = ctx.clock.now_ms();
    let Some(session) = session else {
        let at = ScheduledAt::NoCursor {
            event_exists: false,
        };
        return Ok((request.verdict(0, at, now)?.result(), wake));
    };
    let found = cursor_rows::find(
        tx,
        &session,
        &request.consumer,
        request.lane.as_deref(),
        request.index,
    )?;
    let step = match &found {
        None => {
            let event_exists = row_at(tx, &session, request.index)?.is_some();
            let at = ScheduledAt::NoCursor { event_exists };
            request.verdict(session.clear, at, now)?
        }
        Some(cursor) if cursor.head == Some(request.index) => request.verdict(
            session.clear,
            ScheduledAt::Head(cursor.kind, &cursor.dispatch),
            now,
        )?,
        Some(cursor) if queued(tx, cursor, request.index)? => {
            request.verdict(session.clear, ScheduledAt::Queued, now)?
        }
        Some(cursor) => request.verdict(session.clear, ScheduledAt::Elsewhere(cursor.kind), now)?,
    };
    if let Some(mut cursor) = found.filter(|_| step.changes()) {
        apply(
            tx,
            &session,
            &mut cursor,
            request.index,
            step,
            now,
            &mut wake,
        )?;
    }
    Ok((step.result(), wake))
}

/// Whether `index` waits on the lane `cursor` behind its head.
fn queued(tx: &Connection, cursor: &CursorRow, index: u64) -> Result<bool, StoreError> {
    let behind = cursor.kind == CursorKind::Lane && cursor.head.is_some_and(|head| head < index);
    let Some(idx) = SqlIndex::fitting(index).filter(|_| behind) else {
        return Ok(false);
    };
    tx.prepare_cached("SELECT 1 FROM lane_queue WHERE cid = ?1 AND idx = ?2")
        .and_then(|mut stmt| stmt.exists((cursor.cid, idx)))
        .ctx("looking up a queued index")
}

/// Stores what `step` says of `index` on `cursor`.
fn apply(
    tx: &Connection,
    session: &SessionRow,
    cursor: &mut CursorRow,
    index: u64,
    step: RescheduleStep,
    now: i64,
    wake: &mut Wake,
) -> Result<(), StoreError> {
    match step {
        RescheduleStep::MoveHead(not_before) => {
            cursor.dispatch = Dispatch::scheduled(not_before);
            cursor_rows::save(tx, cursor)?;
            work::touch(tx, session, &cursor.consumer, now, wake)
        }
        RescheduleStep::CancelHead => {
            advance(tx, session, cursor)?;
            work::after_advance(tx, session, cursor, now, wake)
        }
        RescheduleStep::MoveQueued(not_before) => {
            let idx = SqlIndex::new("queued index", index)?;
            tx.prepare_cached("UPDATE lane_queue SET not_before = ?3 WHERE cid = ?1 AND idx = ?2")
                .and_then(|mut stmt| stmt.execute((cursor.cid, idx, not_before)))
                .ctx("rescheduling a queued index")?;
            Ok(())
        }
        RescheduleStep::CancelQueued => {
            let idx = SqlIndex::new("queued index", index)?;
            tx.prepare_cached("DELETE FROM lane_queue WHERE cid = ?1 AND idx = ?2")
                .and_then(|mut stmt| stmt.execute((cursor.cid, idx)))
                .ctx("cancelling a queued index")?;
            Ok(())
        }
        RescheduleStep::Answer(_) => Ok(()),
    }
}
