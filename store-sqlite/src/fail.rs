//! `fail_attempt`, `dead_letters` and `redrive`: a failed attempt counted
//! (up to a dead letter), dead letters listed, and one retried or skipped.

use a2_store_api::dispatch::cleared;
use a2_store_api::order::compare_heads;
use a2_store_api::{
    FailOutcome, FailRequest, FailResult, Head, RedriveAction, RedriveRequest, RedriveResult,
    StoreError,
};
use rusqlite::Connection;

use crate::cursor_rows::{
    self, advance, cursor_columns, has_pending, refresh_log_types, release_head_pins, CursorRow,
};
use crate::errors::SqlContext;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};
use crate::values::SqlIndex;
use crate::work::{self, Wake};

/// Records a failed attempt: counted, holder released, retry delay or dead
/// letter; the consumer's work row is rewritten (`Wake`: it moved earlier).
pub(crate) fn fail(
    tx: &Connection,
    ctx: &Ctx,
    request: &FailRequest,
) -> Result<(FailResult, Wake), StoreError> {
    let mut wake = Wake::default();
    let session = session::find(tx, &request.session_id)?;
    if let Some(session) = &session {
        if !session.incarnation_current(request.incarnation) {
            return Ok((FailResult::superseded(), wake));
        }
    }
    if cleared(request.index, session.as_ref().map_or(0, |s| s.clear)) {
        return Ok((FailResult::superseded(), wake));
    }
    let Some(mut found) = cursor_rows::find_attempted(
        tx,
        session.as_ref(),
        &request.session_id,
        &request.consumer,
        request.lane.as_deref(),
        request.index,
    )?
    else {
        return Ok((FailResult::superseded(), wake));
    };
    let on_head = found.head == Some(request.index);
    if let Some(result) = found.dispatch.fail_verdict(on_head, request.attempt) {
        return Ok((result, wake));
    }
    let now = ctx.clock.now_ms();
    let result = found.dispatch.record_failure(request, now);
    if result.outcome == FailOutcome::DeadLettered {
        release_head_pins(tx, &found)?;
        cursor_rows::save(tx, &found)?;
    } else {
        cursor_rows::save_claim(tx, &found)?;
    }
    if let Some(session) = &session {
        work::touch(tx, session, &found.consumer, now, &mut wake)?;
    }
    Ok((result, wake))
}

/// Dead-lettered heads above the clear, by `(index, consumer, lane)`.
pub(crate) fn dead_letters(tx: &Connection, session_id: &str) -> Result<Vec<Head>, StoreError> {
    let Some(session) = session::find(tx, session_id)? else {
        return Ok(Vec::new());
    };
    let cursors = dead_cursors(tx, &session, None)?;
    let mut heads = cursors
        .iter()
        .map(|found| found.to_head(tx, &session))
        .collect::<Result<Vec<_>, _>>()?;
    heads.sort_by(compare_heads);
    Ok(heads)
}

/// Dead-lettered cursors above the clear, optionally only those whose head is `at`.
fn dead_cursors(
    tx: &Connection,
    session: &SessionRow,
    at: Option<SqlIndex>,
) -> Result<Vec<CursorRow>, StoreError> {
    let above = SqlIndex::clamped(session.clear.saturating_add(1));
    let (low, high) = match at {
        Some(at) => (at.max(above), at),
        None => (above, SqlIndex::MAX),
    };
    let mut stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors INDEXED BY cursors_dead WHERE sid = ?1 AND head IS NOT NULL \
             AND failed_at IS NOT NULL AND head >= ?2 AND head <= ?3 ORDER BY head, consumer, lane"
        ))
        .ctx("reading dead letters")?;
    let mut rows = stmt
        .query((session.sid, low, high))
        .ctx("reading dead letters")?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().ctx("reading dead letters")? {
        found.push(cursor_rows::decode(row)?);
    }
    Ok(found)
}

/// Retries or skips the consumer's dead-lettered head at `index` (on the
/// named lane, or the first in `(lane)` order: `RedriveRequest::picks`),
/// moving the consumer's work row as the head's cursor now needs (`Wake`:
/// it moved earlier).
pub(crate) fn redrive(
    tx: &Connection,
    ctx: &Ctx,
    request: &RedriveRequest,
) -> Result<(RedriveResult, Wake), StoreError> {
    let mut wake = Wake::default();
    let consumers = request.consumers.as_deref();
    let Some(session) = session::find(tx, &request.session_id)? else {
        let result = RedriveResult::new(false, false);
        return Ok((result, wake));
    };
    session.fence_incarnation(request.incarnation)?;
    refresh_log_types(tx, &session, consumers)?;
    let target = match SqlIndex::fitting(request.index) {
        Some(at) => dead_cursors(tx, &session, Some(at))?
            .into_iter()
            .find(|found| request.picks(&found.consumer, found.lane.as_deref(), request.index)),
        None => None,
    };
    let now = ctx.clock.now_ms();
    let Some(mut found) = target else {
        let result = RedriveResult::new(false, has_pending(tx, Some(&session), consumers, now)?);
        return Ok((result, wake));
    };
    redrive_head(tx, &session, &mut found, request.action, now, &mut wake)?;
    let result = RedriveResult::new(true, has_pending(tx, Some(&session), consumers, now)?);
    Ok((result, wake))
}

/// Retries or skips the dead-lettered head of `found` at `now`, and
/// rewrites its consumer's work row.
pub(crate) fn redrive_head(
    tx: &Connection,
    session: &SessionRow,
    found: &mut CursorRow,
    action: RedriveAction,
    now: i64,
    wake: &mut Wake,
) -> Result<(), StoreError> {
    match action {
        RedriveAction::Skip => {
            advance(tx, session, found)?;
            work::after_advance(tx, session, found, now, wake)
        }
        RedriveAction::Retry => {
            found.dispatch.retry();
            cursor_rows::save(tx, found)?;
            // The head keeps its last lease end, which may not have passed.
            work::touch(tx, session, &found.consumer, now, wake)
        }
    }
}
