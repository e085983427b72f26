//! The transaction every store call runs in ([`Tx`]: `BEGIN` sent with the
//! first statement, `COMMIT` with the last ones, so neither costs a round
//! trip of its own), statement helpers (cached prepared statements, every
//! value bound) and the per-session row lock that serializes writers of one
//! session.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Poll;

use a2_store_api::retention::{fence_incarnation, incarnation_current};
use a2_store_api::sql::to_sql_int;
use deadpool_postgres::ClientWrapper;
use futures::future::{maybe_done, MaybeDone};
use futures::FutureExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::error::TxResult;

/// Bound parameters of one statement.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// Nothing sent yet: no transaction open on the server.
const IDLE: u8 = 0;
/// `BEGIN` was sent: the transaction is open.
const OPEN: u8 = 1;
/// `COMMIT` was sent (or the transaction was never opened and is over).
const DONE: u8 = 2;

/// One statement of a pipeline: its text and bound parameters.
pub(crate) struct Stmt<'s> {
    /// The statement (prepared once per connection, then cached).
    pub sql: &'s str,
    /// Its parameters.
    pub params: &'s Params<'s>,
}

impl<'s> Stmt<'s> {
    /// The statement `sql` with `params`.
    pub(crate) fn new(sql: &'s str, params: &'s Params<'s>) -> Self {
        Self { sql, params }
    }
}

/// One store call's transaction (READ COMMITTED) on a pooled connection.
///
/// Nothing is sent when it is made: `BEGIN` goes out in the same write as
/// the first statement, and [`commit_with`](Self::commit_with) sends the
/// last statements and `COMMIT` together, so a call costs as many round
/// trips as it has dependent steps, not two more. tokio-postgres pipelines
/// requests issued before their answers arrive, and the server runs them in
/// order. A call that fails, or that ends without writing, waits for its
/// `ROLLBACK` ([`end`](Self::end)) before it answers, so no lock it took is
/// still held when its caller acts again; only a transaction dropped open
/// (a cancelled call) sends `ROLLBACK` without waiting for it.
pub(crate) struct Tx<'a> {
    client: &'a ClientWrapper,
    state: AtomicU8,
}

impl<'a> Tx<'a> {
    /// A transaction on `client`, not begun yet.
    pub(crate) fn new(client: &'a ClientWrapper) -> Self {
        Self {
            client,
            state: AtomicU8::new(IDLE),
        }
    }

    /// The statement `sql`, prepared on this connection once and cached.
    pub(crate) async fn prepare_cached(&self, sql: &str) -> TxResult<Statement> {
        Ok(self.client.prepare_cached(sql).await?)
    }

    /// Whether this statement must open the transaction (it is the first);
    /// an error once `COMMIT` was sent, as nothing may run after it.
    fn opens(&self) -> TxResult<bool> {
        match self
            .state
            .compare_exchange(IDLE, OPEN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(true),
            Err(OPEN) => Ok(false),
            Err(_) => Err(a2_store_api::StoreError::Backend {
                message: "internal error: a statement after the transaction's COMMIT".into(),
                source: None,
            }
            .into()),
        }
    }

    /// Runs a prepared statement, sending `BEGIN` with it when it is the
    /// transaction's first.
    pub(crate) async fn query_prepared(
        &self,
        statement: &Statement,
        params: &Params<'_>,
    ) -> TxResult<Vec<Row>> {
        if self.opens()? {
            let (_, rows) = futures::try_join!(
                self.client.batch_execute("BEGIN"),
                self.client.query(statement, params)
            )?;
            Ok(rows)
        } else {
            Ok(self.client.query(statement, params).await?)
        }
    }

    /// Runs a prepared statement returning how many rows it touched,
    /// sending `BEGIN` with it when it is the transaction's first.
    pub(crate) async fn execute_prepared(
        &self,
        statement: &Statement,
        params: &Params<'_>,
    ) -> TxResult<u64> {
        if self.opens()? {
            let (_, count) = futures::try_join!(
                self.client.batch_execute("BEGIN"),
                self.client.execute(statement, params)
            )?;
            Ok(count)
        } else {
            Ok(self.client.execute(statement, params).await?)
        }
    }

    /// Sends `statements` in one write (after `BEGIN` when none ran yet) and
    /// returns each one's rows: one round trip for all of them. The server
    /// runs them in order, each with its own snapshot, so a later statement
    /// sees what an earlier one wrote and waited for.
    pub(crate) async fn pipeline(&self, statements: &[Stmt<'_>]) -> TxResult<Vec<Vec<Row>>> {
        self.send(statements, false).await
    }

    /// Sends `statements` and `COMMIT` in one write (after `BEGIN` when none
    /// ran yet) and returns each one's rows. Every statement is prepared
    /// before anything is sent, and `COMMIT` is sent only once every
    /// statement is: a statement that fails on the client (a value it cannot
    /// encode) sends no `COMMIT`, and one that fails on the server aborts
    /// the transaction, whose `COMMIT` then rolls back. Either way the call
    /// fails having changed nothing. A transaction that ran nothing commits
    /// without a round trip.
    pub(crate) async fn commit_with(&self, statements: &[Stmt<'_>]) -> TxResult<Vec<Vec<Row>>> {
        self.send(statements, true).await
    }

    /// Commits what ran (no round trip when nothing did, or when
    /// [`commit_with`](Self::commit_with) already committed).
    pub(crate) async fn commit(&self) -> TxResult<()> {
        if self.state.load(Ordering::Acquire) == DONE {
            return Ok(());
        }
        self.send(&[], true).await.map(drop)
    }

    /// Runs a read-only statement on its own, outside the transaction
    /// (autocommit: no `BEGIN`, no `COMMIT`); only before the transaction's
    /// first statement, which then opens it as usual.
    pub(crate) async fn query_alone(&self, sql: &str, params: &Params<'_>) -> TxResult<Vec<Row>> {
        let mut answers = self.pipeline_alone(&[Stmt::new(sql, params)]).await?;
        Ok(answers.pop().unwrap_or_default())
    }

    /// Ends the transaction with `ROLLBACK` and waits for the server's
    /// answer, so every row lock it took is released before the caller is
    /// answered: a claim on another pooled connection that runs next must
    /// not skip (`SKIP LOCKED`) a row this one only looked at. Nothing is
    /// sent when the transaction never opened or already ended; a later
    /// [`commit`](Self::commit) does nothing.
    pub(crate) async fn end(&self) -> TxResult<()> {
        if self.state.swap(DONE, Ordering::AcqRel) == OPEN {
            self.client.batch_execute("ROLLBACK").await?;
        }
        Ok(())
    }

    /// Sends `statements` in one write outside any transaction (each one
    /// commits on its own, so no lock outlives its statement) and returns
    /// each one's rows; only before the transaction's first statement,
    /// which then opens it as usual. For reads whose answer may end the
    /// call: nothing is left to end on the server when they are all it ran.
    pub(crate) async fn pipeline_alone(&self, statements: &[Stmt<'_>]) -> TxResult<Vec<Vec<Row>>> {
        if self.state.load(Ordering::Acquire) != IDLE {
            return Err(a2_store_api::StoreError::Backend {
                message: "internal error: statements alone inside a transaction".into(),
                source: None,
            }
            .into());
        }
        let prepared =
            futures::future::try_join_all(statements.iter().map(|s| self.prepare_cached(s.sql)))
                .await?;
        let answers = futures::future::try_join_all(
            prepared
                .iter()
                .zip(statements)
                .map(|(statement, s)| self.client.query(statement, s.params)),
        )
        .await?;
        Ok(answers)
    }

    async fn send(&self, statements: &[Stmt<'_>], commit: bool) -> TxResult<Vec<Vec<Row>>> {
        // Prepared first (a cache miss costs one round trip per connection
        // and statement, once), so everything below is sent on first poll.
        let prepared =
            futures::future::try_join_all(statements.iter().map(|s| self.prepare_cached(s.sql)))
                .await?;
        let opens = if statements.is_empty() {
            // A bare commit: nothing to open, and nothing to end if never opened.
            if self.state.swap(DONE, Ordering::AcqRel) != OPEN {
                return Ok(Vec::new());
            }
            false
        } else {
            self.opens()?
        };
        type Pending<'f> =
            Pin<Box<dyn Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'f>>;
        let mut queries: Vec<MaybeDone<Pending<'_>>> = prepared
            .iter()
            .zip(statements)
            .map(|(statement, s)| maybe_done(self.client.query(statement, s.params).boxed()))
            .collect();
        let mut begin = opens.then(|| maybe_done(self.client.batch_execute("BEGIN").boxed()));
        // One poll of each, in order: `BEGIN` and every statement are sent.
        futures::future::poll_fn(|cx| {
            if let Some(begin) = begin.as_mut() {
                let _ = Pin::new(begin).poll(cx);
            }
            for query in &mut queries {
                let _ = Pin::new(query).poll(cx);
            }
            Poll::Ready(())
        })
        .await;
        let failed_early = begin
            .as_ref()
            .is_some_and(|b| matches!(b, MaybeDone::Done(Err(_))))
            || queries.iter().any(|q| matches!(q, MaybeDone::Done(Err(_))));
        let mut end = None;
        if commit && !failed_early {
            self.state.store(DONE, Ordering::Release);
            end = Some(self.client.batch_execute("COMMIT"));
        }
        let (begun, ended) = futures::join!(
            async {
                if let Some(begin) = begin.as_mut() {
                    begin.await;
                }
                for query in &mut queries {
                    query.await;
                }
                begin.as_mut().and_then(|b| Pin::new(b).take_output())
            },
            async {
                match end {
                    Some(end) => Some(end.await),
                    None => None,
                }
            }
        );
        if let Some(Err(error)) = begun {
            return Err(error.into());
        }
        let mut rows = Vec::with_capacity(queries.len());
        for query in &mut queries {
            match Pin::new(query).take_output() {
                Some(Ok(found)) => rows.push(found),
                Some(Err(error)) => return Err(error.into()),
                None => rows.push(Vec::new()),
            }
        }
        if let Some(Err(error)) = ended {
            return Err(error.into());
        }
        Ok(rows)
    }
}

impl Drop for Tx<'_> {
    /// Only a call whose future was dropped mid-way (cancelled) gets here
    /// with its transaction open: every call that returns ends it first
    /// ([`Tx::end`] or a commit). `ROLLBACK` is then queued without waiting;
    /// the connection sends it before any later request, so the next call
    /// on it finds no transaction open, and nobody is answered meanwhile.
    fn drop(&mut self) {
        if self.state.swap(DONE, Ordering::AcqRel) == OPEN {
            // Sent on this first poll; the connection discards the answer.
            let _ = self.client.batch_execute("ROLLBACK").now_or_never();
        }
    }
}

/// Runs `sql` (prepared once per connection) and returns its rows.
pub(crate) async fn query(tx: &Tx<'_>, sql: &str, params: &Params<'_>) -> TxResult<Vec<Row>> {
    let statement = tx.prepare_cached(sql).await?;
    tx.query_prepared(&statement, params).await
}

/// Runs `sql` and returns its first row, if any.
pub(crate) async fn query_opt(
    tx: &Tx<'_>,
    sql: &str,
    params: &Params<'_>,
) -> TxResult<Option<Row>> {
    Ok(query(tx, sql, params).await?.into_iter().next())
}

/// Runs `sql` and returns how many rows it touched.
pub(crate) async fn execute(tx: &Tx<'_>, sql: &str, params: &Params<'_>) -> TxResult<u64> {
    let statement = tx.prepare_cached(sql).await?;
    tx.execute_prepared(&statement, params).await
}

/// A session's log head, clear index, reclaimed offset, incarnation and
/// whether it exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SessionState {
    pub head: i64,
    pub clear: i64,
    pub reclaimed: i64,
    /// The session's incarnation; 0 when no session row was found (the
    /// sequence starts at 1).
    pub incarnation: i64,
    /// Something was ever stored in the session (rows, a fork's copy,
    /// presence): its `last_activity` is set. A row made only to be locked
    /// (a subscription, a call on a session never written) is not a
    /// session yet: it cannot be deleted and its requests are not fenced.
    pub exists: bool,
}

impl SessionState {
    /// The incarnation as the API counts it (0: no session row).
    pub(crate) fn incarnation(&self) -> u64 {
        u64::try_from(self.incarnation).unwrap_or(0)
    }

    /// Whether a request naming incarnation `requested` may act on this
    /// session (`retention::incarnation_current`); a session that does not
    /// exist is not fenced (it behaves as before incarnations existed).
    pub(crate) fn current(&self, requested: Option<u64>) -> bool {
        incarnation_current(requested, self.exists.then(|| self.incarnation()))
    }

    /// [`retention::fence_incarnation`](a2_store_api::retention::fence_incarnation)
    /// for a session that exists: `SessionDeleted` when `requested` names
    /// another incarnation.
    pub(crate) fn fence(&self, session_id: &str, requested: Option<u64>) -> TxResult<()> {
        Ok(fence_incarnation(
            session_id,
            requested,
            self.exists.then(|| self.incarnation()),
        )?)
    }
}

/// How many columns [`decode_state`] reads: `head, clear_index,
/// reclaimed_through, incarnation, last_activity IS NOT NULL`.
pub(crate) const STATE_WIDTH: usize = 5;

/// Decodes a row of [`READ_SESSION`] (or the lock's).
pub(crate) fn decode_state(row: &Row) -> TxResult<SessionState> {
    Ok(SessionState {
        head: row.try_get(0)?,
        clear: row.try_get(1)?,
        reclaimed: row.try_get(2)?,
        incarnation: row.try_get(3)?,
        exists: row.try_get(4)?,
    })
}

/// The session row's lock: `$1` the session.
pub(crate) const LOCK_SESSION: &str = "SELECT head, clear_index, reclaimed_through, incarnation, \
    last_activity IS NOT NULL FROM sessions WHERE session_id = $1 FOR UPDATE";

/// Locks the session row exclusively (creating it when the session was never
/// written: its incarnation drawn, no activity yet), so writers of one
/// session run one at a time and see each other's commits. Claimers take no
/// session lock; writers lock every cursor row they read before writing it,
/// so the two meet only on cursor rows.
pub(crate) async fn lock_session(tx: &Tx<'_>, session_id: &str) -> TxResult<SessionState> {
    const LOCK: &str = LOCK_SESSION;
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

/// The session row's read without a lock: `$1` the session.
pub(crate) const READ_SESSION: &str = "SELECT head, clear_index, reclaimed_through, incarnation, \
    last_activity IS NOT NULL FROM sessions WHERE session_id = $1";

/// Reads the session row without locking it (zeros when never written).
pub(crate) async fn read_session(tx: &Tx<'_>, session_id: &str) -> TxResult<SessionState> {
    let row = query_opt(tx, READ_SESSION, &[&session_id]).await?;
    Ok(row
        .as_ref()
        .map(decode_state)
        .transpose()?
        .unwrap_or_default())
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
