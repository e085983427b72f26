//! `complete_attempt`: a claimed head done, its returned events appended
//! with it as their cause, or a repeated completion replayed.

use a2_store_api::dispatch::cleared;
use a2_store_api::{
    replay, CompleteRequest, CompleteResult, CompleteVerdict, CursorKind, StoreError,
};
use rusqlite::{Connection, OptionalExtension};

use crate::batch;
use crate::cursor_rows::{self, advance, refresh_log_types, CursorRow};
use crate::errors::SqlContext;
use crate::events::owner_of;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};
use crate::values::{Json, SqlCount, SqlIndex};
use crate::work::{self, Wake};

/// What a completion did: its result, and whether rows were written.
pub(crate) struct Completed {
    /// The call's result.
    pub result: CompleteResult,
    /// Whether new rows were committed.
    pub wrote: bool,
    /// Whether some work row moved earlier (waiting claimers are woken).
    pub wake: Wake,
}

impl Completed {
    fn superseded() -> Self {
        Self {
            result: CompleteResult::Superseded,
            wrote: false,
            wake: Wake::default(),
        }
    }
}

/// Completes the current attempt atomically (append with this attempt as
/// cause, record the completion, advance), or replays a recorded one.
pub(crate) fn complete(
    tx: &Connection,
    ctx: &Ctx,
    request: &CompleteRequest,
) -> Result<Completed, StoreError> {
    let session = session::find(tx, &request.session_id)?;
    if let Some(session) = &session {
        // An attempt of another incarnation (the session was deleted since)
        // changes nothing, not even the declared types.
        if !session.incarnation_current(request.incarnation) {
            return Ok(Completed::superseded());
        }
        // Every outcome refreshes the declared log types (an error rolls it back).
        refresh_log_types(tx, session, request.consumers.as_deref())?;
    }
    if cleared(request.index, session.as_ref().map_or(0, |s| s.clear)) {
        return Ok(Completed::superseded());
    }
    let lane = request.lane.as_deref();
    let Some(found) = cursor_rows::find_attempted(
        tx,
        session.as_ref(),
        &request.session_id,
        &request.consumer,
        lane,
        request.index,
    )?
    else {
        return Ok(Completed::superseded());
    };
    let Some(mut session) = session else {
        return Ok(Completed::superseded());
    };
    let on_head = found.head == Some(request.index);
    match found.dispatch.complete_verdict(on_head, request.attempt) {
        CompleteVerdict::Apply => {}
        CompleteVerdict::Replay => return replay(tx, &session, &found, request),
        CompleteVerdict::Superseded => return Ok(Completed::superseded()),
    }
    for event in &request.events {
        if let Some(id) = &event.id {
            if owner_of(tx, &session, id)?.is_some() {
                return Err(StoreError::returned_ids_stored());
            }
        }
    }
    let cause = request.cause();
    let mut wake = Wake::default();
    let rows = batch::insert(
        tx,
        ctx,
        &mut session,
        &request.events,
        request.consumers.as_deref(),
        Some(&cause),
        &mut wake,
    )?;
    // The cursor was read after the types refresh, and the insert changes
    // nothing of it but those same types (its head is set), so it is current.
    let mut current = found;
    if current.kind == CursorKind::Log {
        tx.prepare_cached("DELETE FROM completions WHERE cid = ?1")
            .and_then(|mut stmt| stmt.execute([current.cid]))
            .ctx("recording a completion")?;
    }
    let ids: Vec<Option<String>> = request.events.iter().map(|e| e.id.clone()).collect();
    let idx = SqlIndex::new("completed index", request.index)?;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO completions (cid, idx, attempt, returned_ids) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut stmt| stmt.execute((current.cid, idx, SqlCount(request.attempt), Json(&ids))))
    .ctx("recording a completion")?;
    advance(tx, &session, &mut current)?;
    work::after_advance(tx, &session, &current, ctx.clock.now_ms(), &mut wake)?;
    let wrote = !rows.is_empty();
    Ok(Completed {
        result: CompleteResult::Completed { events: rows },
        wrote,
        wake,
    })
}

/// A completion of a head the cursor already moved past: a replay when the
/// same attempt completed it with the same ids.
fn replay(
    tx: &Connection,
    session: &SessionRow,
    found: &CursorRow,
    request: &CompleteRequest,
) -> Result<Completed, StoreError> {
    let Some(idx) = SqlIndex::fitting(request.index) else {
        return Ok(Completed::superseded());
    };
    let record: Option<(SqlCount, Json<Vec<Option<String>>>)> = tx
        .prepare_cached("SELECT attempt, returned_ids FROM completions WHERE cid = ?1 AND idx = ?2")
        .and_then(|mut stmt| {
            stmt.query_row((found.cid, idx), |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .ctx("reading a completion record")?;
    let record = record
        .as_ref()
        .map(|(attempt, ids)| (attempt.0, ids.0.as_slice()));
    if !replay::completion_record(request, record)? {
        return Ok(Completed::superseded());
    }
    let mut stored = Vec::new();
    for event in &request.events {
        if let Some(id) = &event.id {
            if let Some(row) = owner_of(tx, session, id)? {
                stored.push(row);
            }
        }
    }
    let events = replay::completed_events(request, stored)?;
    Ok(Completed {
        result: CompleteResult::Completed { events },
        wrote: false,
        wake: Wake::default(),
    })
}
