//! `complete_attempt`: the current attempt of a head appends the events it
//! returns, its completion is recorded (for replays) and the cursor moves
//! to its next head; a repeat of a recorded completion replays it.

pub(crate) mod batch;

use a2_store_api::dispatch::cleared;
use a2_store_api::sql::{count_to_sql, from_sql_count};
use a2_store_api::{
    replay, CompleteRequest, CompleteResult, CompleteVerdict, CursorKind, StoreError,
};
use tokio_postgres::types::Json;

use crate::batch::{stored_ids, write, Batch};
use tokio_postgres::types::ToSql;

use crate::cursor_table::{
    advance, advance_in_memory, attempted, attempted_pipelined, completion_types_refreshed,
    refresh_loaded_types, refresh_log_types, CursorWrites, Named, TypeRefresh, PUT_ALL,
    RELEASE_PINS, TRIM_LANE,
};
use crate::db::{execute, query_opt, Stmt, Tx};
use crate::error::TxResult;
use crate::inner::{Inner, Wrote};
use crate::ops::claims::claimed::{self, Guard, Known};
use crate::ops::work::{Touched, TouchedPlan};
use crate::rows::{index_of, lane_key, CursorRow};

/// The body of [`Store::complete_attempt`](a2_store_api::Store::complete_attempt)
/// for a validated request. Returns the result and what it wrote.
pub(crate) async fn complete(
    tx: &Tx<'_>,
    inner: &Inner,
    request: &CompleteRequest,
) -> TxResult<(CompleteResult, Wrote)> {
    if request.events.is_empty() {
        return complete_quietly(tx, inner, request).await;
    }
    let session_id = request.session_id.as_str();
    let consumers = request.consumers.as_deref();
    let (consumer, lane) = (request.consumer.as_str(), request.lane.as_deref());
    // Returned events are an append: they need the session's writer lock
    // (taken first, like every writer). A completion without events changes
    // only its own cursor, so it locks just that row and completions of one
    // session commit side by side.
    let lock = !request.events.is_empty();
    let named = Named {
        consumer,
        lane,
        index: request.index,
        incarnation: request.incarnation,
    };
    let named = attempted(tx, session_id, named, lock).await?;
    let (mut state, index) = (named.state, named.index);
    if completion_types_refreshed(&state, request.incarnation) {
        refresh_log_types(tx, session_id, consumers).await?;
    }
    let Some(mut cursor) = named.cursor else {
        return Ok((CompleteResult::Superseded, Wrote::default()));
    };
    refresh_loaded_types(&mut cursor, consumers);
    let on_head = cursor.head == Some(index);
    match cursor.dispatch.complete_verdict(on_head, request.attempt) {
        CompleteVerdict::Apply => {}
        CompleteVerdict::Replay => return replay(tx, state.clear, request, index).await,
        CompleteVerdict::Superseded => return Ok((CompleteResult::Superseded, Wrote::default())),
    }
    let supplied: Vec<&str> = request
        .events
        .iter()
        .filter_map(|e| e.id.as_deref())
        .collect();
    if !stored_ids(tx, session_id, state.clear, &supplied)
        .await?
        .is_empty()
    {
        return Err(StoreError::returned_ids_stored().into());
    }
    let cause = request.cause();
    let batch = Batch {
        session_id,
        events: &request.events,
        cause: Some(&cause),
        consumers,
    };
    let mut touched = Touched::new(inner.clock.now_ms());
    let stored = write(tx, inner, &mut state, &batch, &mut touched).await?;
    // The write left our cursor's head and bookkeeping as loaded (it may
    // only have queued more of its lane, or refreshed its types, set above).
    let lane_stored = lane_key(lane);
    let returned: Vec<Option<&str>> = request.events.iter().map(|e| e.id.as_deref()).collect();
    let returned = Json(&returned);
    let is_log = cursor.kind == CursorKind::Log;
    let record = async {
        if is_log {
            execute(
                tx,
                "DELETE FROM completions WHERE session_id = $1 AND consumer = $2 AND lane = $3",
                &[&session_id, &request.consumer, &lane_stored],
            )
            .await?;
        }
        execute(
            tx,
            "INSERT INTO completions (session_id, consumer, lane, idx, attempt, returned_ids) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (session_id, consumer, lane, idx) DO UPDATE \
             SET attempt = EXCLUDED.attempt, returned_ids = EXCLUDED.returned_ids",
            &[
                &session_id,
                &request.consumer,
                &lane_stored,
                &index,
                &count_to_sql(request.attempt),
                &returned,
            ],
        )
        .await
    };
    // Independent statements on rows this transaction holds: pipelined.
    futures::try_join!(record, advance(tx, session_id, &mut cursor))?;
    touched.cursor(&cursor);
    let work = touched.flush(tx, session_id).await?;
    let events = !stored.is_empty();
    Ok((
        CompleteResult::Completed { events: stored },
        Wrote { events, work },
    ))
}

/// The statement recording a completion for replays: `$1` session, `$2`
/// consumer, `$3` lane, `$4` index, `$5` attempt, `$6` returned ids.
const RECORD: &str =
    "INSERT INTO completions (session_id, consumer, lane, idx, attempt, returned_ids) \
    VALUES ($1, $2, $3, $4, $5, $6) \
    ON CONFLICT (session_id, consumer, lane, idx) DO UPDATE \
    SET attempt = EXCLUDED.attempt, returned_ids = EXCLUDED.returned_ids";

/// The statements of completions that a new connection prepares before its
/// first call (see `crate::warm`).
pub(crate) const HOT_STATEMENTS: [&str; 1] = [RECORD];

/// A log cursor keeps only its latest completion: `$1` session, `$2`
/// consumer, `$3` lane.
const FORGET_LOG: &str =
    "DELETE FROM completions WHERE session_id = $1 AND consumer = $2 AND lane = $3";

/// A completion returning no events: it changes only its own cursor (no
/// session lock), so completions of one session commit side by side. Two
/// round trips for an event cursor: the cursor's lock with the session
/// read first (declared log types cost one more: their refresh, sent only
/// when the request names the session's incarnation); then the completion
/// record, the pin release, the cursor's write, its consumer's work row
/// and `COMMIT` together. A lane or log cursor's next head costs one more
/// in between (its queue or the log is read). An event cursor this store
/// claimed takes one round trip ([`complete_known`]).
async fn complete_quietly(
    tx: &Tx<'_>,
    inner: &Inner,
    request: &CompleteRequest,
) -> TxResult<(CompleteResult, Wrote)> {
    let session_id = request.session_id.as_str();
    let consumers = request.consumers.as_deref();
    let (consumer, lane) = (request.consumer.as_str(), request.lane.as_deref());
    let refresh = TypeRefresh::new(session_id, consumers);
    let declares_logs = consumers.is_some_and(|c| c.iter().any(|c| c.log.is_some()));
    // Declared logs are refreshed and checked by the two-step path.
    if !declares_logs {
        if let Some(known) = inner
            .claimed
            .take_event(session_id, consumer, lane, request.index)
        {
            if let Some(done) = complete_known(tx, inner, request, known).await? {
                return Ok(done);
            }
        }
    }
    let named = Named {
        consumer,
        lane,
        index: request.index,
        incarnation: request.incarnation,
    };
    let named = attempted_pipelined(tx, session_id, named, &refresh, true).await?;
    let (mut state, index, queued) = (named.state, named.index, named.queued);
    let Some(mut cursor) = named.cursor else {
        return Ok((CompleteResult::Superseded, Wrote::default()));
    };
    refresh_loaded_types(&mut cursor, consumers);
    let on_head = cursor.head == Some(index);
    match cursor.dispatch.complete_verdict(on_head, request.attempt) {
        CompleteVerdict::Apply => {}
        CompleteVerdict::Replay => return replay(tx, state.clear, request, index).await,
        CompleteVerdict::Superseded => return Ok((CompleteResult::Superseded, Wrote::default())),
    }
    let mut touched = Touched::new(inner.clock.now_ms());
    // The lane queue read with the lock is the one after this head only
    // while no declared log's write (below) could have queued more.
    let queued = if declares_logs { None } else { queued };
    if declares_logs {
        // The declarations are still checked for lane conflicts.
        let cause = request.cause();
        let batch = Batch {
            session_id,
            events: &request.events,
            cause: Some(&cause),
            consumers,
        };
        write(tx, inner, &mut state, &batch, &mut touched).await?;
    }
    record_quietly(tx, request, cursor, index, touched, queued, &[]).await
}

/// A completion decided on the row this store's claim (or renewal) wrote
/// (see [`crate::ops::claims::claimed`]), in one round trip: `BEGIN`, the
/// cursor's lock, the guard that the row and the session's clear index are
/// still the ones remembered, then what [`record_quietly`] sends, and
/// `COMMIT`. `None` (nothing sent) when the remembered row does not decide
/// `Apply`: the caller reads the row as usual. A stale row aborts the
/// transaction at the guard; `transact!` then runs the call again, which
/// finds nothing remembered.
async fn complete_known(
    tx: &Tx<'_>,
    inner: &Inner,
    request: &CompleteRequest,
    known: Known,
) -> TxResult<Option<(CompleteResult, Wrote)>> {
    let session_id = request.session_id.as_str();
    let Ok(index) = i64::try_from(request.index) else {
        return Ok(None);
    };
    if !known.current(request.incarnation) || cleared(request.index, index_of(known.clear)?) {
        return Ok(None);
    }
    let on_head = known.cursor.head == Some(index);
    if !matches!(
        known
            .cursor
            .dispatch
            .complete_verdict(on_head, request.attempt),
        CompleteVerdict::Apply
    ) {
        return Ok(None);
    }
    let Some(guard) = Guard::new(session_id, &known) else {
        return Ok(None);
    };
    let (lock, Some(unchanged)) = (guard.lock_params(), guard.unchanged_params()) else {
        return Ok(None);
    };
    let prefix = [
        Stmt::new(claimed::LOCK, &lock),
        Stmt::new(claimed::UNCHANGED, &unchanged),
    ];
    let touched = Touched::new(inner.clock.now_ms());
    let cursor = known.cursor.clone();
    let done = record_quietly(tx, request, cursor, index, touched, None, &prefix).await?;
    Ok(Some(done))
}

/// The end of a completion without events once its verdict is `Apply`:
/// the cursor moved past its head (a lane's with its next queued index
/// already read, `queued`, when given), then `prefix`, the completion
/// record, the pin release, the lane's trim, the cursor's write, its
/// consumer's work row and `COMMIT` sent together.
async fn record_quietly(
    tx: &Tx<'_>,
    request: &CompleteRequest,
    mut cursor: CursorRow,
    index: i64,
    mut touched: Touched,
    queued: Option<Option<tokio_postgres::Row>>,
    prefix: &[Stmt<'_>],
) -> TxResult<(CompleteResult, Wrote)> {
    let session_id = request.session_id.as_str();
    let lane = request.lane.as_deref();
    // The pins of the head completed, released before the cursor moves on.
    let (pin_consumer, pin_lane, pin_slot) = cursor.key();
    let queued = queued.as_ref().map(Option::as_ref);
    let trim = advance_in_memory(tx, session_id, &mut cursor, queued).await?;
    touched.cursor(&cursor);
    let lane_stored = lane_key(lane);
    let returned: Vec<Option<&str>> = Vec::new();
    let returned = Json(&returned);
    let attempt = count_to_sql(request.attempt);
    let forget: [&(dyn ToSql + Sync); 3] = [&session_id, &request.consumer, &lane_stored];
    let record: [&(dyn ToSql + Sync); 6] = [
        &session_id,
        &request.consumer,
        &lane_stored,
        &index,
        &attempt,
        &returned,
    ];
    let pins: [&(dyn ToSql + Sync); 4] = [&session_id, &pin_consumer, &pin_lane, &pin_slot];
    let writes = CursorWrites::new(session_id, [&cursor]);
    let write_params = writes.as_ref().map(CursorWrites::params);
    let plan = touched.plan(session_id);
    let work = plan.params();
    let mut statements = Vec::with_capacity(prefix.len() + 6);
    statements.extend(prefix.iter().map(|s| Stmt::new(s.sql, s.params)));
    if cursor.kind == CursorKind::Log {
        statements.push(Stmt::new(FORGET_LOG, &forget));
    }
    statements.push(Stmt::new(RECORD, &record));
    statements.push(Stmt::new(RELEASE_PINS, &pins));
    let trim_params: [&(dyn ToSql + Sync); 4] = [&session_id, &pin_consumer, &pin_lane, &index];
    if trim {
        statements.push(Stmt::new(TRIM_LANE, &trim_params));
    }
    if let Some(params) = &write_params {
        statements.push(Stmt::new(PUT_ALL, params));
    }
    TouchedPlan::push(&work, &mut statements);
    let mut answers = tx.commit_with(&statements).await?;
    answers.drain(..prefix.len().min(answers.len()));
    let work = plan.finish(&mut answers, &work)?;
    Ok((
        CompleteResult::Completed { events: Vec::new() },
        Wrote {
            events: false,
            work,
        },
    ))
}

/// A completion of a head the cursor already moved past (`clear`: the
/// session's clear index): a replay when that attempt completed it with the
/// same returned events, else superseded.
async fn replay(
    tx: &Tx<'_>,
    clear: i64,
    request: &CompleteRequest,
    index: i64,
) -> TxResult<(CompleteResult, Wrote)> {
    let session_id = request.session_id.as_str();
    let row = query_opt(
        tx,
        "SELECT attempt, returned_ids FROM completions WHERE session_id = $1 AND consumer = $2 \
         AND lane = $3 AND idx = $4",
        &[
            &session_id,
            &request.consumer,
            &lane_key(request.lane.as_deref()),
            &index,
        ],
    )
    .await?;
    let Some(row) = row else {
        return Ok((CompleteResult::Superseded, Wrote::default()));
    };
    let attempt = from_sql_count("completion attempt", row.try_get(0)?)?;
    let Json(recorded): Json<Vec<Option<String>>> = row.try_get(1)?;
    if !replay::completion_record(request, Some((attempt, &recorded)))? {
        return Ok((CompleteResult::Superseded, Wrote::default()));
    }
    let supplied: Vec<&str> = request
        .events
        .iter()
        .filter_map(|e| e.id.as_deref())
        .collect();
    let mut owners = stored_ids(tx, session_id, clear, &supplied).await?;
    let rows = request
        .events
        .iter()
        .filter_map(|event| owners.remove(event.id.as_deref()?))
        .collect();
    let events = replay::completed_events(request, rows)?;
    Ok((CompleteResult::Completed { events }, Wrote::default()))
}
