//! `fork`: a session's rows after its clear, through an index, copied into
//! a session never written to (`ForkRequest::plan` decides what), in one
//! transaction that holds both sessions' writer locks.

use a2_store_api::{ForkOrigin, ForkRequest, ForkResult, SessionInfo};
use tokio_postgres::types::ToSql;

use crate::db::{lock_session, query_opt, sql_index, SessionState, Stmt, Tx};
use crate::error::TxResult;
use crate::inner::{Inner, Wrote};
use crate::notify::{notification_payload, NOTIFY};
use crate::rows::index_of;

/// The source session's row, locked: `$1` session.
const LOCK_SOURCE: &str = "SELECT head, clear_index, reclaimed_through, forked_session, \
    forked_index, incarnation FROM sessions WHERE session_id = $1 FOR UPDATE";

/// The copy: `$1` the fork, `$2` the source, `$3`..`$4` the indexes copied.
const COPY_ROWS: &str = "INSERT INTO events (session_id, idx, id, type, payload, created_at, \
      cause_consumer, cause_lane, cause_index, cause_attempt) \
    SELECT $1, e.idx, e.id, e.type, e.payload, e.created_at, e.cause_consumer, e.cause_lane, \
      e.cause_index, e.cause_attempt \
    FROM events e WHERE e.session_id = $2 AND e.idx >= $3 AND e.idx <= $4 ORDER BY e.idx";

/// The fork's session row as the plan lists it: `$1` the fork, `$2` head,
/// `$3` clear, `$4` reclaimed through, `$5`..`$6` its origin, `$7` its last
/// activity (the fork's creation).
const SET_FORK: &str = "UPDATE sessions SET head = $2, clear_index = $3, reclaimed_through = $4, \
    forked_session = $5, forked_index = $6, last_activity = $7 WHERE session_id = $1";

/// The body of [`Store::fork`](a2_store_api::Store::fork) for a validated
/// request. Both session rows are locked in id order (every other writer
/// locks one), the source's without creating it, the fork's created when
/// new, so no append to either interleaves. Then the plan's rows, the
/// fork's row and its subscribers' `NOTIFY` go in one round trip with
/// `COMMIT`.
pub(crate) async fn fork(
    tx: &Tx<'_>,
    inner: &Inner,
    request: &ForkRequest,
) -> TxResult<(ForkResult, Wrote)> {
    let now = inner.clock.now_ms();
    let (source, into) = if request.session_id < request.into {
        let source = lock_source(tx, &request.session_id).await?;
        (source, lock_into(tx, request).await?)
    } else {
        let into = lock_into(tx, request).await?;
        (lock_source(tx, &request.session_id).await?, into)
    };
    let plan = request.plan(source.as_ref(), index_of(into.head)?)?;
    let first = sql_index("fork start", plan.first)?;
    let through = sql_index("fork end", plan.through)?;
    let session = &plan.session;
    let clear = sql_index("clear index", session.clear_index)?;
    let reclaimed = sql_index("reclaimed index", session.reclaimed_through)?;
    let origin = session.forked_from.as_ref();
    let origin_session = origin.map(|origin| origin.session_id.as_str());
    let origin_index = origin
        .map(|origin| sql_index("fork origin", origin.index))
        .transpose()?;
    let payload = notification_payload(&request.into);
    let copy: [&(dyn ToSql + Sync); 4] = [&request.into, &request.session_id, &first, &through];
    let set: [&(dyn ToSql + Sync); 7] = [
        &request.into,
        &through,
        &clear,
        &reclaimed,
        &origin_session,
        &origin_index,
        &now,
    ];
    let notify: [&(dyn ToSql + Sync); 3] = [&inner.channel, &payload, &request.into];
    tx.commit_with(&[
        Stmt::new(COPY_ROWS, &copy),
        Stmt::new(SET_FORK, &set),
        Stmt::new(NOTIFY, &notify),
    ])
    .await?;
    let copied = plan.rows();
    let session = plan.session.with_incarnation(into.incarnation());
    Ok((
        ForkResult::new(session, copied),
        Wrote {
            events: true,
            work: false,
        },
    ))
}

/// Locks the source's row; `None` when no session has that id.
async fn lock_source(tx: &Tx<'_>, session_id: &str) -> TxResult<Option<SessionInfo>> {
    let Some(row) = query_opt(tx, LOCK_SOURCE, &[&session_id]).await? else {
        return Ok(None);
    };
    Ok(Some(session_info(session_id.to_owned(), &row, 0)?))
}

/// Locks the fork's row, creating it when new (the failed fork's rollback
/// removes it again).
async fn lock_into(tx: &Tx<'_>, request: &ForkRequest) -> TxResult<SessionState> {
    lock_session(tx, &request.into).await
}

/// A session row's `head, clear_index, reclaimed_through, forked_session,
/// forked_index, incarnation` from column `at`, as `sessions()` lists it.
pub(crate) fn session_info(
    session_id: String,
    row: &tokio_postgres::Row,
    at: usize,
) -> TxResult<SessionInfo> {
    let origin: Option<String> = row.try_get(at + 3)?;
    let origin_index: Option<i64> = row.try_get(at + 4)?;
    let forked_from = match (origin, origin_index) {
        (Some(session_id), Some(index)) => Some(ForkOrigin::new(session_id, index_of(index)?)),
        _ => None,
    };
    Ok(SessionInfo::new(
        session_id,
        index_of(row.try_get(at)?)?,
        index_of(row.try_get(at + 1)?)?,
        index_of(row.try_get(at + 2)?)?,
    )
    .with_forked_from(forked_from)
    .with_incarnation(index_of(row.try_get(at + 5)?)?))
}
