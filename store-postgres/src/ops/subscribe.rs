//! `subscribe`: a stream registers its session in `subscribers` (under the
//! session's writer lock, so every later commit growing the session
//! notifies it; see `notify.rs`), then reads what is new from the table
//! after the last index it delivered, in pages, whenever it is woken. So
//! delivery is in order with no gap and no duplicate, whatever wake-ups are
//! lost or repeated. Each read also reads the session's incarnation: a
//! stream whose session was deleted (its row gone, or made again with
//! another incarnation) ends with `SessionDeleted`.

use std::collections::VecDeque;
use std::sync::Arc;

use a2_store_api::{EventStream, Result, StoreError, StoredEvent};
use deadpool_postgres::Pool;
use tokio::sync::broadcast;

use crate::db::{bound, execute, lock_session, Tx};
use crate::error::{db_error, pool_error, TxResult};
use crate::notify::EVERYONE;
use crate::rows::{decode_event, EVENT_COLUMNS};

/// How many rows a stream reads per query.
const PAGE: i64 = 256;

/// Registers a subscription of `session_id` under the session's writer
/// lock (creating its row when new): every append
/// either committed before (its rows are in the backlog the stream reads
/// next) or sees the registration and notifies. Returns the session's
/// incarnation, the one the stream follows.
pub(crate) async fn register(tx: &Tx<'_>, session_id: &str, token: &str) -> TxResult<i64> {
    let state = lock_session(tx, session_id).await?;
    execute(
        tx,
        "INSERT INTO subscribers (session_id, token) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[&session_id, &token],
    )
    .await?;
    Ok(state.incarnation)
}

struct Follow {
    pool: Pool,
    /// The store's call bound: each read answers within it.
    bound: std::time::Duration,
    session_id: String,
    /// This stream's registration in `subscribers`, removed when it ends.
    token: String,
    /// The incarnation of the session followed: once the session row is
    /// gone or has another, the session was deleted and the stream ends
    /// with `SessionDeleted`.
    incarnation: i64,
    last: u64,
    buffer: VecDeque<StoredEvent>,
    wakes: broadcast::Receiver<Arc<str>>,
    stale: bool,
    ended: bool,
}

impl Drop for Follow {
    /// Removes the registration, best effort (a leftover one only costs its
    /// session needless notifications).
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.pool.clone();
        let session_id = std::mem::take(&mut self.session_id);
        let token = std::mem::take(&mut self.token);
        let bound = self.bound;
        let remove = async move {
            if let Ok(client) = pool.get().await {
                let _ = client
                    .execute(
                        "DELETE FROM subscribers WHERE session_id = $1 AND token = $2",
                        &[&session_id, &token],
                    )
                    .await;
            }
        };
        runtime.spawn(async move {
            let _ = tokio::time::timeout(bound, remove).await;
        });
    }
}

impl Follow {
    /// Reads the next page, within the store's call bound (past it the
    /// stream ends with `Unavailable`, its connection closed).
    async fn read_more(&mut self) -> Result<usize> {
        let what = "reading a subscribed session";
        let deadline = tokio::time::Instant::now() + self.bound;
        let client = tokio::time::timeout_at(deadline, self.pool.get())
            .await
            .map_err(|_| crate::deadline::no_answer(what, self.bound))?
            .map_err(|e| pool_error(what, e))?;
        let bound = self.bound;
        match tokio::time::timeout_at(deadline, self.read_page(&client)).await {
            Ok(read) => read,
            Err(_) => {
                crate::deadline::discard(client);
                Err(crate::deadline::no_answer(what, bound))
            }
        }
    }

    /// One page after `last` on `client`.
    async fn read_page(&mut self, client: &deadpool_postgres::Object) -> Result<usize> {
        let what = "reading a subscribed session";
        // The session's incarnation and the page in one statement (one
        // snapshot): a delete committed before it shows as no session row
        // (or another incarnation), never as a log that starts over.
        let sql = format!(
            "SELECT s.incarnation, {EVENT_COLUMNS} FROM sessions s LEFT JOIN LATERAL \
               (SELECT {EVENT_COLUMNS} FROM events e WHERE e.session_id = s.session_id \
                 AND e.idx > $2 ORDER BY e.idx LIMIT $3) e ON true \
             WHERE s.session_id = $1"
        );
        let statement = client
            .prepare_cached(&sql)
            .await
            .map_err(|e| db_error(what, e))?;
        let after = bound(self.last);
        let rows = client
            .query(&statement, &[&self.session_id, &after, &PAGE])
            .await
            .map_err(|e| db_error(what, e))?;
        let followed = match rows.first() {
            Some(row) => row.try_get::<_, i64>(0).map_err(|e| db_error(what, e))?,
            None => 0,
        };
        if followed != self.incarnation {
            return Err(StoreError::session_deleted(&self.session_id));
        }
        let mut count = 0;
        for row in &rows {
            let index: Option<i64> = row.try_get(1).map_err(|e| db_error(what, e))?;
            if index.is_none() {
                continue;
            }
            count += 1;
            let event = decode_event(row, 1, &self.session_id).map_err(|e| e.into_store(what))?;
            if event.index > self.last {
                self.last = event.index;
                self.buffer.push_back(event);
            }
        }
        Ok(count)
    }

    async fn next(mut self) -> Option<(Result<StoredEvent>, Self)> {
        loop {
            if let Some(event) = self.buffer.pop_front() {
                return Some((Ok(event), self));
            }
            if self.ended {
                return None;
            }
            if self.stale {
                match self.read_more().await {
                    Ok(count) => {
                        self.stale = count == usize::try_from(PAGE).unwrap_or(usize::MAX);
                        continue;
                    }
                    Err(error) => {
                        self.ended = true;
                        return Some((Err(error), self));
                    }
                }
            }
            match self.wakes.recv().await {
                Ok(session) => {
                    if &*session == EVERYONE || *session == *self.session_id {
                        self.stale = true;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => self.stale = true,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// A stream of the session's rows after `after`, then live appends, of
/// the session's `incarnation` (registered by [`register`]); it ends with
/// `SessionDeleted` once the session is deleted. The wake receiver is
/// taken before the first read, so no append (and no delete) is missed.
pub(crate) fn follow(
    pool: Pool,
    bound: std::time::Duration,
    session_id: &str,
    token: String,
    incarnation: i64,
    after: u64,
    wakes: broadcast::Receiver<Arc<str>>,
) -> EventStream {
    let state = Follow {
        pool,
        bound,
        session_id: session_id.to_owned(),
        token,
        incarnation,
        last: after,
        buffer: VecDeque::new(),
        wakes,
        stale: true,
        ended: false,
    };
    Box::pin(futures::stream::unfold(state, Follow::next))
}
