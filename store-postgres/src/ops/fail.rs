//! The failures of a head: `fail_attempt`, and the dead-letter queue
//! (`dead_letters`, `redrive`, `redrive_all`).

mod sql;

use a2_store_api::dispatch::cleared;
use std::collections::BTreeMap;

use a2_store_api::order::{compare_heads, compare_redriven};
use a2_store_api::{
    BulkRedrive, BulkRedriveResult, CursorRef, FailOutcome, FailRequest, FailResult, Head,
    RedriveAction, RedriveRequest, RedriveResult, RedrivenHead,
};

use tokio_postgres::types::ToSql;

use crate::cursor_table::{
    advance, attempted_pipelined, has_pending, put, refresh_loaded_types, refresh_log_types,
    CursorWrites, Named, TypeRefresh, PUT_ALL, RELEASE_PINS,
};
use crate::db::{lock_session, query, query_opt, read_session, Stmt, Tx};
use crate::error::TxResult;
use crate::ops::claims::claimed::{self, Claimed, Guard, Known};
use crate::ops::work::{Touched, TouchedPlan};
use crate::rows::{decode_event, index_of, CursorRow, CURSOR_COLUMNS, CURSOR_WIDTH, EVENT_COLUMNS};

/// The body of [`Store::fail_attempt`](a2_store_api::Store::fail_attempt)
/// for a validated request. Takes no session lock: it locks the cursor row,
/// then reads the clear (one round trip), then writes (one more, with
/// `COMMIT`). The consumer's work row is rewritten from its
/// heads (ready at once, or when the retry delay ends; a dead letter's row
/// is kept); returns whether a row was made ready. An event head whose row
/// `claimed` remembers is failed in one round trip, decided on that row
/// behind the guard (as [`crate::ops::complete`] does); the row is
/// forgotten either way.
pub(crate) async fn fail(
    tx: &Tx<'_>,
    request: &FailRequest,
    now: i64,
    claimed: &Claimed,
) -> TxResult<(FailResult, bool)> {
    let session_id = request.session_id.as_str();
    let (consumer, lane) = (request.consumer.as_str(), request.lane.as_deref());
    if let Some(known) = claimed.take_event(session_id, consumer, lane, request.index) {
        if let Some(done) = fail_known(tx, request, now, known).await? {
            return Ok(done);
        }
    }
    let refresh = TypeRefresh::new(session_id, None);
    let named = Named {
        consumer,
        lane,
        index: request.index,
        incarnation: request.incarnation,
    };
    let named = attempted_pipelined(tx, session_id, named, &refresh, false).await?;
    let Some(mut cursor) = named.cursor else {
        return Ok((FailResult::superseded(), false));
    };
    let on_head = cursor.head == Some(named.index);
    if let Some(result) = cursor.dispatch.fail_verdict(on_head, request.attempt) {
        return Ok((result, false));
    }
    let result = cursor.dispatch.record_failure(request, now);
    let ready = write_failure(tx, session_id, &cursor, &result, now, &[]).await?;
    Ok((result, ready))
}

/// A failure decided on the row this store's claim (or renewal) wrote, in
/// one round trip: `BEGIN`, the cursor's lock, the guard, the writes of
/// [`write_failure`] and `COMMIT`. `None` (nothing sent) when that row does
/// not decide to record the failure: the caller reads the row as usual.
async fn fail_known(
    tx: &Tx<'_>,
    request: &FailRequest,
    now: i64,
    known: Known,
) -> TxResult<Option<(FailResult, bool)>> {
    let session_id = request.session_id.as_str();
    let Ok(index) = i64::try_from(request.index) else {
        return Ok(None);
    };
    if !known.current(request.incarnation) || cleared(request.index, index_of(known.clear)?) {
        return Ok(None);
    }
    let on_head = known.cursor.head == Some(index);
    if known
        .cursor
        .dispatch
        .fail_verdict(on_head, request.attempt)
        .is_some()
    {
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
    let mut cursor = known.cursor.clone();
    let result = cursor.dispatch.record_failure(request, now);
    let ready = write_failure(tx, session_id, &cursor, &result, now, &prefix).await?;
    Ok(Some((result, ready)))
}

/// The writes of a failure recorded on `cursor`, after `prefix`, with
/// `COMMIT`: the pins released (a dead letter's), the cursor written, its
/// consumer's work row rewritten. Returns whether a row was made ready.
async fn write_failure(
    tx: &Tx<'_>,
    session_id: &str,
    cursor: &CursorRow,
    result: &FailResult,
    now: i64,
    prefix: &[Stmt<'_>],
) -> TxResult<bool> {
    let (pin_consumer, pin_lane, pin_slot) = cursor.key();
    let pins: [&(dyn ToSql + Sync); 4] = [&session_id, &pin_consumer, &pin_lane, &pin_slot];
    let writes = CursorWrites::new(session_id, [cursor]);
    let write_params = writes.as_ref().map(CursorWrites::params);
    let mut touched = Touched::new(now);
    touched.rewrite(cursor);
    let plan = touched.plan(session_id);
    let work = plan.params();
    let mut statements = Vec::with_capacity(prefix.len() + 4);
    statements.extend(prefix.iter().map(|s| Stmt::new(s.sql, s.params)));
    if result.outcome == FailOutcome::DeadLettered {
        statements.push(Stmt::new(RELEASE_PINS, &pins));
    }
    if let Some(params) = &write_params {
        statements.push(Stmt::new(PUT_ALL, params));
    }
    TouchedPlan::push(&work, &mut statements);
    let mut answers = tx.commit_with(&statements).await?;
    answers.drain(..prefix.len().min(answers.len()));
    plan.finish(&mut answers, &work)
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
        heads.push(
            cursor
                .to_head(event, state.clear)?
                .with_incarnation(state.incarnation()),
        );
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
    let state = lock_session(tx, session_id).await?;
    state.fence(session_id, request.incarnation)?;
    let clear = index_of(state.clear)?;
    // Only a head above the clear (and storable) can be a dead letter.
    let index = i64::try_from(request.index)
        .ok()
        .filter(|_| !cleared(request.index, clear));
    let mut found = None;
    if let Some(index) = index {
        // The lane named, or the first dead letter at the index in lane
        // order (the event cursor's `''` first): `RedriveRequest::picks`.
        let sql = format!(
            "SELECT {CURSOR_COLUMNS} FROM cursors c WHERE c.session_id = $1 AND c.consumer = $2 \
             AND c.head = $3 AND c.failed_at IS NOT NULL AND ($4::text IS NULL OR c.lane = $4) \
             ORDER BY c.lane, c.slot LIMIT 1 FOR UPDATE OF c"
        );
        let params: [&(dyn ToSql + Sync); 4] =
            [&session_id, &request.consumer, &index, &request.lane];
        if let Some(row) = query_opt(tx, &sql, &params).await? {
            let cursor = CursorRow::decode(&row, 0)?;
            let lane = cursor.lane();
            if request.picks(&cursor.consumer, lane.as_deref(), request.index) {
                found = Some(cursor);
            }
        }
    }
    refresh_log_types(tx, session_id, consumers).await?;
    let Some(mut cursor) = found else {
        let result = RedriveResult::new(false, has_pending(tx, session_id, consumers, now).await?);
        return Ok((result, false));
    };
    refresh_loaded_types(&mut cursor, consumers);
    let mut touched = Touched::new(now);
    redrive_cursor(tx, session_id, &mut cursor, request.action, &mut touched).await?;
    let ready = touched.flush(tx, session_id).await?;
    let result = RedriveResult::new(true, has_pending(tx, session_id, consumers, now).await?);
    Ok((result, ready))
}

/// Redrives one dead-lettered cursor (locked, its session's writer lock
/// held) by `action`: a skip moves it past its head, a retry gives the head
/// a fresh try (`Dispatch::retry`). Notes it in `touched`, whose row the
/// caller rewrites.
async fn redrive_cursor(
    tx: &Tx<'_>,
    session_id: &str,
    cursor: &mut CursorRow,
    action: RedriveAction,
    touched: &mut Touched,
) -> TxResult<()> {
    match action {
        RedriveAction::Skip => advance(tx, session_id, cursor).await?,
        RedriveAction::Retry => {
            cursor.dispatch.retry();
            put(tx, session_id, cursor).await?;
        }
    }
    touched.rewrite(cursor);
    Ok(())
}

/// The columns of [`sql::bulk`]'s rows: the session id, its clear index,
/// then the cursor's columns.
fn bulk_columns() -> String {
    format!("c.session_id, s.clear_index, {CURSOR_COLUMNS}")
}

/// The body of [`Store::redrive_all`](a2_store_api::Store::redrive_all)
/// for a validated request at `now`, in one transaction: the matching dead
/// letters are found (one more than the page, for `more`), their sessions'
/// writer locks taken in id order (as every writer takes its one), the dead
/// letters found again under those locks and locked, then each is redriven
/// as a lane-exact `redrive` would and each session's work rows rewritten.
/// Also returns whether a work row was made ready.
pub(crate) async fn redrive_all(
    tx: &Tx<'_>,
    request: &BulkRedrive,
    now: i64,
) -> TxResult<(BulkRedriveResult, bool)> {
    let page = request.page_size();
    let fetch = i64::try_from(page.saturating_add(1)).unwrap_or(i64::MAX);
    let no_sessions: Option<Vec<String>> = None;
    let found = query(
        tx,
        &sql::bulk(&bulk_columns(), false),
        &[
            &request.consumer,
            &request.session_id,
            &request.lane,
            &request.dead_since_ms,
            &request.dead_before_ms,
            &no_sessions,
            &fetch,
        ],
    )
    .await?;
    let mut sessions: Vec<String> = Vec::new();
    for row in found.iter().take(page) {
        let session_id: String = row.try_get(0)?;
        if sessions.last() != Some(&session_id) {
            sessions.push(session_id);
        }
    }
    if sessions.is_empty() {
        return Ok((BulkRedriveResult::default(), false));
    }
    query(
        tx,
        "SELECT 1 FROM sessions WHERE session_id = ANY($1) ORDER BY session_id FOR UPDATE",
        &[&sessions],
    )
    .await?;
    let locked = query(
        tx,
        &sql::bulk(&bulk_columns(), true),
        &[
            &request.consumer,
            &request.session_id,
            &request.lane,
            &request.dead_since_ms,
            &request.dead_before_ms,
            &Some(&sessions),
            &fetch,
        ],
    )
    .await?;
    let mut redriven = Vec::with_capacity(locked.len().min(page));
    let mut by_session: BTreeMap<String, Touched> = BTreeMap::new();
    for row in locked.iter().take(page) {
        let session_id: String = row.try_get(0)?;
        let clear = index_of(row.try_get(1)?)?;
        let mut cursor = CursorRow::decode(row, 2)?;
        let lane = cursor.lane();
        let Some(failed_at) = cursor.dispatch.failed_at else {
            continue;
        };
        let index = cursor.head_index()?.unwrap_or_default();
        if cleared(index, clear)
            || !request.matches(&session_id, &cursor.consumer, lane.as_deref(), failed_at)
        {
            continue;
        }
        let touched = by_session
            .entry(session_id.clone())
            .or_insert_with(|| Touched::new(now));
        redrive_cursor(tx, &session_id, &mut cursor, request.action, touched).await?;
        redriven.push(RedrivenHead::new(
            session_id,
            CursorRef {
                consumer: cursor.consumer.clone(),
                lane,
                index,
            },
            failed_at,
        ));
    }
    let mut ready = false;
    for (session_id, touched) in by_session {
        ready |= touched.flush(tx, &session_id).await?;
    }
    redriven.sort_by(compare_redriven);
    let more = locked.len() > page || found.len() > page;
    Ok((BulkRedriveResult::new(redriven, more), ready))
}
