//! The failures of a head: `fail_attempt`, and the dead-letter queue
//! (`dead_letters`, `redrive`).

use a2_store_api::dispatch::cleared;
use a2_store_api::order::compare_heads;
use a2_store_api::{
    FailOutcome, FailRequest, FailResult, Head, RedriveAction, RedriveRequest, RedriveResult,
};

use tokio_postgres::types::ToSql;

use crate::cursor_table::{
    advance, attempted_pipelined, has_pending, put, refresh_loaded_types, refresh_log_types,
    CursorWrites, TypeRefresh, PUT_ALL, RELEASE_PINS,
};
use crate::db::{lock_session, query, query_opt, read_session, Stmt, Tx};
use crate::error::TxResult;
use crate::ops::work::{Touched, TouchedPlan};
use crate::rows::{decode_event, index_of, CursorRow, CURSOR_COLUMNS, CURSOR_WIDTH, EVENT_COLUMNS};

/// The body of [`Store::fail_attempt`](a2_store_api::Store::fail_attempt)
/// for a validated request. Takes no session lock: it locks the cursor row,
/// then reads the clear (one round trip), then writes (one more, with
/// `COMMIT`). The consumer's work row is rewritten from its
/// heads (ready at once, or when the retry delay ends; a dead letter's row
/// is kept); returns whether a row was made ready.
pub(crate) async fn fail(
    tx: &Tx<'_>,
    request: &FailRequest,
    now: i64,
) -> TxResult<(FailResult, bool)> {
    let session_id = request.session_id.as_str();
    let (consumer, lane) = (request.consumer.as_str(), request.lane.as_deref());
    let refresh = TypeRefresh::new(session_id, None);
    let named =
        attempted_pipelined(tx, session_id, consumer, lane, request.index, &refresh).await?;
    let Some(mut cursor) = named.cursor else {
        return Ok((FailResult::superseded(), false));
    };
    let on_head = cursor.head == Some(named.index);
    if let Some(result) = cursor.dispatch.fail_verdict(on_head, request.attempt) {
        return Ok((result, false));
    }
    let result = cursor.dispatch.record_failure(request, now);
    // One more round trip: the pins released (a dead letter's), the
    // cursor written, its consumer's work row rewritten, and `COMMIT`.
    let (pin_consumer, pin_lane, pin_slot) = cursor.key();
    let pins: [&(dyn ToSql + Sync); 4] = [&session_id, &pin_consumer, &pin_lane, &pin_slot];
    let writes = CursorWrites::new(session_id, [&cursor]);
    let write_params = writes.as_ref().map(CursorWrites::params);
    let mut touched = Touched::new(now);
    touched.rewrite(&cursor);
    let plan = touched.plan(session_id);
    let work = plan.params();
    let mut statements = Vec::with_capacity(4);
    if result.outcome == FailOutcome::DeadLettered {
        statements.push(Stmt::new(RELEASE_PINS, &pins));
    }
    if let Some(params) = &write_params {
        statements.push(Stmt::new(PUT_ALL, params));
    }
    TouchedPlan::push(&work, &mut statements);
    let mut answers = tx.commit_with(&statements).await?;
    let ready = plan.finish(&mut answers, &work)?;
    Ok((result, ready))
}

/// The body of [`Store::dead_letters`](a2_store_api::Store::dead_letters).
pub(crate) async fn dead_letters(tx: &Tx<'_>, session_id: &str) -> TxResult<Vec<Head>> {
    let state = read_session(tx, session_id).await?;
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
/// validated request at `now`; also returns whether a work row was made
/// ready.
pub(crate) async fn redrive(
    tx: &Tx<'_>,
    request: &RedriveRequest,
    now: i64,
) -> TxResult<(RedriveResult, bool)> {
    let session_id = request.session_id.as_str();
    let consumers = request.consumers.as_deref();
    let clear = index_of(lock_session(tx, session_id).await?.clear)?;
    // Only a head above the clear (and storable) can be a dead letter.
    let index = i64::try_from(request.index)
        .ok()
        .filter(|_| !cleared(request.index, clear));
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
        let result = RedriveResult {
            redriven: false,
            has_pending: has_pending(tx, session_id, consumers).await?,
        };
        return Ok((result, false));
    };
    refresh_loaded_types(&mut cursor, consumers);
    match request.action {
        RedriveAction::Skip => advance(tx, session_id, &mut cursor).await?,
        RedriveAction::Retry => {
            cursor.dispatch.retry();
            put(tx, session_id, &cursor).await?;
        }
    }
    let mut touched = Touched::new(now);
    touched.rewrite(&cursor);
    let ready = touched.flush(tx, session_id).await?;
    let result = RedriveResult {
        redriven: true,
        has_pending: has_pending(tx, session_id, consumers).await?,
    };
    Ok((result, ready))
}
