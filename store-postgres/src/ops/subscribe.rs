//! Live subscriptions across processes: a stream registers its session in
//! `subscribers` (under the session's writer lock); every commit that grows
//! a registered session sends `NOTIFY` on the schema's channel (sessions
//! nobody follows skip it: PostgreSQL serializes notifying commits
//! cluster-wide); one dedicated connection per store
//! `LISTEN`s and fans the session ids out to the streams of this process,
//! which then read what is new from the table. After (re)connecting, the
//! listener wakes every stream for a catch-up read, so nothing is missed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{EventStream, Result, StoredEvent};
use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::db::{execute, lock_exclusive, Tx};
use crate::error::{db_error, pool_error, TxResult};
use crate::rows::{decode_event, EVENT_COLUMNS};

/// The message that wakes every stream (after a reconnect, or for a session
/// id too long for a `NOTIFY` payload).
pub(crate) const EVERYONE: &str = "";

/// Longest session id sent as is in a `NOTIFY` payload (the limit is 8000 bytes).
const MAX_PAYLOAD: usize = 7_000;

/// How many rows a stream reads per query.
const PAGE: i64 = 256;

/// The `NOTIFY` payload for a session: its id, or [`EVERYONE`] when too long.
pub(crate) fn notification_payload(session_id: &str) -> &str {
    if session_id.len() > MAX_PAYLOAD {
        EVERYONE
    } else {
        session_id
    }
}

/// The background task holding the `LISTEN` connection; stopped on drop.
#[derive(Debug)]
pub(crate) struct Listener {
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Starts listening on `channel`, forwarding payloads to `sender`, and
    /// reconnecting (with a catch-up wake of every stream) when the
    /// connection drops.
    pub(crate) fn start(
        config: tokio_postgres::Config,
        channel: String,
        sender: broadcast::Sender<Arc<str>>,
    ) -> Self {
        let task = tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            loop {
                if listen_once(&config, &channel, &sender).await {
                    delay = Duration::from_millis(50);
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        });
        Self { task }
    }
}

/// One connection's life: `LISTEN`, wake everyone, forward notifications
/// until the connection ends. Returns whether it got as far as listening.
async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    sender: &broadcast::Sender<Arc<str>>,
) -> bool {
    let Ok((client, mut connection)) = config.connect(NoTls).await else {
        return false;
    };
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    // The channel is built from the validated schema name (an identifier).
    let listen_sql = format!("LISTEN \"{channel}\"");
    let listen = client.batch_execute(&listen_sql);
    tokio::pin!(listen);
    let mut listening = false;
    loop {
        tokio::select! {
            done = &mut listen, if !listening => {
                if done.is_err() {
                    return false;
                }
                listening = true;
                let _ = sender.send(Arc::from(EVERYONE));
            }
            message = messages.next() => match message {
                Some(Ok(AsyncMessage::Notification(note))) => {
                    let _ = sender.send(Arc::from(note.payload()));
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return listening,
            }
        }
    }
}

/// Registers a subscription of `session_id` under the session's writer
/// lock: every append either committed before (its rows are in the backlog
/// the stream reads next) or sees the registration and notifies.
pub(crate) async fn register(tx: &Tx<'_>, session_id: &str, token: &str) -> TxResult<()> {
    lock_exclusive(tx, session_id).await?;
    execute(
        tx,
        "INSERT INTO subscribers (session_id, token) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[&session_id, &token],
    )
    .await?;
    Ok(())
}

struct Follow {
    pool: Pool,
    session_id: String,
    /// This stream's registration in `subscribers`, removed when it ends.
    token: String,
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
        runtime.spawn(async move {
            if let Ok(client) = pool.get().await {
                let _ = client
                    .execute(
                        "DELETE FROM subscribers WHERE session_id = $1 AND token = $2",
                        &[&session_id, &token],
                    )
                    .await;
            }
        });
    }
}

impl Follow {
    async fn read_more(&mut self) -> Result<usize> {
        let what = "reading a subscribed session";
        let client = self.pool.get().await.map_err(|e| pool_error(what, e))?;
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events e WHERE e.session_id = $1 AND e.idx > $2 \
             ORDER BY e.idx LIMIT $3"
        );
        let statement = client
            .prepare_cached(&sql)
            .await
            .map_err(|e| db_error(what, e))?;
        let after = crate::db::bound(self.last);
        let rows = client
            .query(&statement, &[&self.session_id, &after, &PAGE])
            .await
            .map_err(|e| db_error(what, e))?;
        for row in &rows {
            let event = decode_event(row, 0, &self.session_id).map_err(|e| e.into_store(what))?;
            if event.index > self.last {
                self.last = event.index;
                self.buffer.push_back(event);
            }
        }
        Ok(rows.len())
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

/// A stream of the session's rows after `after`, then live appends. The
/// wake receiver is taken before the first read, so no append is missed.
pub(crate) fn follow(
    pool: Pool,
    session_id: &str,
    token: String,
    after: u64,
    wakes: broadcast::Receiver<Arc<str>>,
) -> EventStream {
    let state = Follow {
        pool,
        session_id: session_id.to_owned(),
        token,
        last: after,
        buffer: VecDeque::new(),
        wakes,
        stale: true,
        ended: false,
    };
    Box::pin(futures::stream::unfold(state, Follow::next))
}
