//! Statement helpers (cached prepared statements, every value bound) and the
//! per-session row lock that serializes writers of one session.

use a2_store_api::sql::to_sql_int;
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::error::TxResult;

/// The transaction every store call runs in.
pub(crate) type Tx<'a> = Transaction<'a>;

/// Bound parameters of one statement.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// Runs `sql` (prepared once per connection) and returns its rows.
pub(crate) async fn query(tx: &Tx<'_>, sql: &str, params: &Params<'_>) -> TxResult<Vec<Row>> {
    let statement = tx.prepare_cached(sql).await?;
    Ok(tx.query(&statement, params).await?)
}

/// Runs `sql` and returns its first row, if any.
pub(crate) async fn query_opt(
    tx: &Tx<'_>,
    sql: &str,
    params: &Params<'_>,
) -> TxResult<Option<Row>> {
    let statement = tx.prepare_cached(sql).await?;
    Ok(tx.query_opt(&statement, params).await?)
}

/// Runs `sql` and returns how many rows it touched.
pub(crate) async fn execute(tx: &Tx<'_>, sql: &str, params: &Params<'_>) -> TxResult<u64> {
    let statement = tx.prepare_cached(sql).await?;
    Ok(tx.execute(&statement, params).await?)
}

/// A session's log head, clear index and reclaimed offset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SessionState {
    pub head: i64,
    pub clear: i64,
    pub reclaimed: i64,
}

fn decode_state(row: &Row) -> TxResult<SessionState> {
    Ok(SessionState {
        head: row.try_get(0)?,
        clear: row.try_get(1)?,
        reclaimed: row.try_get(2)?,
    })
}

/// Locks the session row exclusively (creating it when the session was never
/// written), so writers of one session run one at a time and see each
/// other's commits. Claimers take no session lock; writers lock every cursor
/// row they read before writing it, so the two meet only on cursor rows.
pub(crate) async fn lock_session(tx: &Tx<'_>, session_id: &str) -> TxResult<SessionState> {
    const LOCK: &str = "SELECT head, clear_index, reclaimed_through FROM sessions \
                        WHERE session_id = $1 FOR UPDATE";
    if let Some(row) = query_opt(tx, LOCK, &[&session_id]).await? {
        return decode_state(&row);
    }
    execute(
        tx,
        "INSERT INTO sessions (session_id) VALUES ($1) ON CONFLICT DO NOTHING",
        &[&session_id],
    )
    .await?;
    match query_opt(tx, LOCK, &[&session_id]).await? {
        Some(row) => decode_state(&row),
        None => Ok(SessionState::default()),
    }
}

/// Reads the session row without locking it (zeros when never written).
pub(crate) async fn read_session(tx: &Tx<'_>, session_id: &str) -> TxResult<SessionState> {
    let row = query_opt(
        tx,
        "SELECT head, clear_index, reclaimed_through FROM sessions WHERE session_id = $1",
        &[&session_id],
    )
    .await?;
    Ok(row
        .as_ref()
        .map(decode_state)
        .transpose()?
        .unwrap_or_default())
}

/// Sets the session's head after an insert.
pub(crate) async fn set_head(tx: &Tx<'_>, session_id: &str, head: i64) -> TxResult<()> {
    execute(
        tx,
        "UPDATE sessions SET head = $2 WHERE session_id = $1",
        &[&session_id, &head],
    )
    .await?;
    Ok(())
}

/// A `u64` index bound as `BIGINT`, saturating at `i64::MAX` (an upper bound
/// beyond any stored index means "no bound").
pub(crate) fn bound(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A `u64` index bound as `BIGINT`; beyond `i64::MAX` it is invalid input.
pub(crate) fn sql_index(what: &str, value: u64) -> TxResult<i64> {
    Ok(to_sql_int(what, value)?)
}
