//! The outcomes of a claimed head: `complete_attempt`, `fail_attempt`, and
//! the dead-letter queue (`dead_letters`, `redrive`).

use a2_store_api::order::compare_heads;
use a2_store_api::sql::{count_to_sql, from_sql_count};
use a2_store_api::{
    replay, CompleteRequest, CompleteResult, CompleteVerdict, ConsumerDeclaration, CursorKind,
    FailOutcome, FailRequest, FailResult, Head, RedriveAction, RedriveRequest, RedriveResult,
    StoreError,
};
use tokio_postgres::types::Json;

use crate::batch::{insert, lane_cursors, notify, stored_ids, InsertContext};
use crate::cursor_table::{advance, has_pending, load_ref, put, refresh_log_types, release_pins};
use crate::db::{execute, lock_exclusive, query, query_opt, read_state, Tx};
use crate::error::TxResult;
use crate::rows::{decode_event, lane_key, CursorRow, CURSOR_COLUMNS, CURSOR_WIDTH, EVENT_COLUMNS};
use crate::store::Inner;

/// Whether a row exists at `index` (not reclaimed).
async fn row_exists(tx: &Tx<'_>, session_id: &str, index: i64) -> TxResult<bool> {
    let row = query_opt(
        tx,
        "SELECT 1 FROM events WHERE session_id = $1 AND idx = $2",
        &[&session_id, &index],
    )
    .await?;
    Ok(row.is_some())
}

/// The body of [`Store::complete_attempt`](a2_store_api::Store::complete_attempt)
/// for a validated request. Returns the result and whether rows were written.
pub(crate) async fn complete(
    tx: &Tx<'_>,
    inner: &Inner,
    request: &CompleteRequest,
) -> TxResult<(CompleteResult, bool)> {
    let session_id = request.session_id.as_str();
    let lane = request.lane.as_deref();
    let Ok(index) = i64::try_from(request.index) else {
        return Err(StoreError::no_such_event(session_id, request.index).into());
    };
    // Returned events are an append: they need the session's writer lock
    // (taken first, like every writer). A completion without events changes
    // only its own cursor, so it locks just that row and completions of one
    // session commit side by side.
    let appends = !request.events.is_empty();
    let locked = if appends {
        Some(lock_exclusive(tx, session_id).await?)
    } else {
        None
    };
    let found = load_ref(tx, session_id, &request.consumer, lane, request.index, true).await?;
    // Without the session lock the clear is read after the cursor row is
    // locked: a clear that touched it has committed, none can start.
    let mut state = match locked {
        Some(state) => state,
        None => read_state(tx, session_id).await?,
    };
    let consumers = request.consumers.as_deref();
    if index <= state.clear {
        refresh_log_types(tx, session_id, consumers).await?;
        return Ok((CompleteResult::Superseded, false));
    }
    let Some(mut cursor) = found else {
        if row_exists(tx, session_id, index).await? {
            refresh_log_types(tx, session_id, consumers).await?;
            return Ok((CompleteResult::Superseded, false));
        }
        return Err(StoreError::no_such_event(session_id, request.index).into());
    };
    refresh_log_types(tx, session_id, consumers).await?;
    if let Some(log) = consumers
        .unwrap_or_default()
        .iter()
        .find(|c| {
            c.name == cursor.consumer && c.log.as_ref().is_some_and(|l| l.lane == cursor.lane)
        })
        .and_then(|c| c.log.as_ref())
    {
        cursor.types = log.types.clone();
    }
    match cursor
        .dispatch
        .complete_verdict(cursor.head == Some(index), request.attempt)
    {
        CompleteVerdict::Apply => {}
        CompleteVerdict::Replay => return replay(tx, session_id, &state, request, index).await,
        CompleteVerdict::Superseded => return Ok((CompleteResult::Superseded, false)),
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
    let lanes = lane_cursors(tx, session_id, &request.events, consumers).await?;
    let cause = a2_store_api::Cause {
        consumer: request.consumer.clone(),
        lane: request.lane.clone(),
        index: request.index,
        attempt: request.attempt,
    };
    let cx = InsertContext {
        session_id,
        now: inner.clock.now_ms(),
        ids: inner.ids.as_ref(),
        cause: Some(&cause),
        consumers,
    };
    let stored = if request.events.is_empty() {
        Vec::new()
    } else {
        insert(tx, &cx, &mut state, &request.events, lanes).await?
    };
    // The insert left our cursor's head and bookkeeping as loaded (it may
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
    // Independent statements under the session lock: pipelined.
    futures::try_join!(record, advance(tx, session_id, &mut cursor))?;
    let wrote = !stored.is_empty();
    if wrote {
        notify(tx, &inner.channel, session_id).await?;
    }
    Ok((CompleteResult::Completed { events: stored }, wrote))
}

/// A completion of a head the cursor already moved past: a replay when that
/// attempt completed it with the same returned ids.
async fn replay(
    tx: &Tx<'_>,
    session_id: &str,
    state: &crate::db::SessionState,
    request: &CompleteRequest,
    index: i64,
) -> TxResult<(CompleteResult, bool)> {
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
        return Ok((CompleteResult::Superseded, false));
    };
    let attempt = from_sql_count("completion attempt", row.try_get(0)?)?;
    let Json(recorded): Json<Vec<Option<String>>> = row.try_get(1)?;
    if !replay::completion_record(request, Some((attempt, &recorded)))? {
        return Ok((CompleteResult::Superseded, false));
    }
    let supplied: Vec<&str> = request
        .events
        .iter()
        .filter_map(|e| e.id.as_deref())
        .collect();
    let mut owners = stored_ids(tx, session_id, state.clear, &supplied).await?;
    let rows = request
        .events
        .iter()
        .filter_map(|event| owners.remove(event.id.as_deref()?))
        .collect();
    let events = replay::completed_events(request, rows)?;
    Ok((CompleteResult::Completed { events }, false))
}

/// The body of [`Store::fail_attempt`](a2_store_api::Store::fail_attempt)
/// for a validated request. Holds the session row shared and the cursor row
/// exclusively.
pub(crate) async fn fail(tx: &Tx<'_>, request: &FailRequest, now: i64) -> TxResult<FailResult> {
    let session_id = request.session_id.as_str();
    let superseded = |failure_count| FailResult {
        outcome: FailOutcome::Superseded,
        failure_count,
    };
    let Ok(index) = i64::try_from(request.index) else {
        return Err(StoreError::no_such_event(session_id, request.index).into());
    };
    // Lock the cursor row first, then read the clear: a clear that touched
    // the row has committed by then, and no clear can start touching it.
    let lane = request.lane.as_deref();
    let cursor = load_ref(tx, session_id, &request.consumer, lane, request.index, true).await?;
    let clear = read_state(tx, session_id).await?.clear;
    if index <= clear {
        return Ok(superseded(0));
    }
    let Some(mut cursor) = cursor else {
        if row_exists(tx, session_id, index).await? {
            return Ok(superseded(0));
        }
        return Err(StoreError::no_such_event(session_id, request.index).into());
    };
    let on_head = cursor.head == Some(index);
    if let Some(result) = cursor.dispatch.fail_verdict(on_head, request.attempt) {
        return Ok(result);
    }
    let result = cursor.dispatch.record_failure(request, now);
    if result.outcome == FailOutcome::DeadLettered {
        release_pins(tx, session_id, &cursor).await?;
    }
    put(tx, session_id, &cursor).await?;
    Ok(result)
}

/// The body of [`Store::dead_letters`](a2_store_api::Store::dead_letters).
pub(crate) async fn dead_letters(tx: &Tx<'_>, session_id: &str) -> TxResult<Vec<Head>> {
    let state = read_state(tx, session_id).await?;
    let sql = format!(
        "SELECT {CURSOR_COLUMNS}, {EVENT_COLUMNS} FROM cursors c \
         JOIN events e ON e.session_id = c.session_id AND e.idx = c.head \
         WHERE c.session_id = $1 AND c.head IS NOT NULL AND c.head > $2 \
           AND c.failed_at IS NOT NULL \
         ORDER BY c.head, c.consumer, c.lane"
    );
    let rows = query(tx, &sql, &[&session_id, &state.clear]).await?;
    let mut heads = Vec::with_capacity(rows.len());
    for row in &rows {
        let cursor = CursorRow::decode(row, 0)?;
        let event = decode_event(row, CURSOR_WIDTH, session_id)?;
        heads.push(cursor.to_head(event, state.clear)?);
    }
    heads.sort_by(compare_heads);
    Ok(heads)
}

/// The body of [`Store::redrive`](a2_store_api::Store::redrive) for a
/// validated request.
pub(crate) async fn redrive(tx: &Tx<'_>, request: &RedriveRequest) -> TxResult<RedriveResult> {
    let session_id = request.session_id.as_str();
    let consumers: Option<&[ConsumerDeclaration]> = request.consumers.as_deref();
    let state = lock_exclusive(tx, session_id).await?;
    let index = i64::try_from(request.index)
        .ok()
        .filter(|i| *i > state.clear);
    let mut found = None;
    if let Some(index) = index {
        let sql = format!(
            "SELECT {CURSOR_COLUMNS} FROM cursors c WHERE c.session_id = $1 AND c.consumer = $2 \
             AND c.head = $3 AND c.failed_at IS NOT NULL ORDER BY c.lane, c.slot LIMIT 1 \
             FOR UPDATE OF c"
        );
        if let Some(row) = query_opt(tx, &sql, &[&session_id, &request.consumer, &index]).await? {
            found = Some(CursorRow::decode(&row, 0)?);
        }
    }
    refresh_log_types(tx, session_id, consumers).await?;
    let Some(mut cursor) = found else {
        return Ok(RedriveResult {
            redriven: false,
            has_pending: has_pending(tx, session_id, consumers).await?,
        });
    };
    if let Some(log) = consumers
        .unwrap_or_default()
        .iter()
        .filter(|c| c.name == cursor.consumer)
        .find_map(|c| c.log.as_ref().filter(|l| l.lane == cursor.lane))
    {
        if cursor.kind == CursorKind::Log {
            cursor.types = log.types.clone();
        }
    }
    match request.action {
        RedriveAction::Skip => advance(tx, session_id, &mut cursor).await?,
        RedriveAction::Retry => {
            cursor.dispatch.retry();
            put(tx, session_id, &cursor).await?;
        }
    }
    Ok(RedriveResult {
        redriven: true,
        has_pending: has_pending(tx, session_id, consumers).await?,
    })
}
