//! Wake-ups across processes: a commit that grows a session with a
//! registered subscriber sends `NOTIFY` on the schema's channel (sessions
//! nobody follows skip it: PostgreSQL serializes notifying commits
//! cluster-wide), and one dedicated connection per store `LISTEN`s and fans
//! the session ids out to the streams of this process. After (re)connecting,
//! the listener wakes every stream for a catch-up read, so nothing is missed.
//!
//! The same connection listens on the schema's work channel (see
//! `ops::work`): a notification there, or a (re)connect, fires the store's
//! `WorkSignal`, so waiting claimers claim again.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::work::WorkSignal;
use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_postgres::AsyncMessage;

use crate::options::MAX_SCHEMA_NAME_LEN;

/// The `NOTIFY` channel of a schema: `a2_store_<schema>`, cut to the 63
/// bytes PostgreSQL allows (schema names are ASCII). Two long names sharing
/// a prefix share a channel, which only wakes streams for a needless re-read.
pub(crate) fn notify_channel(schema: &str) -> String {
    let mut channel = format!("a2_store_{schema}");
    channel.truncate(MAX_SCHEMA_NAME_LEN);
    channel
}

/// Tells listeners in every process (on commit) that the session grew,
/// when the session has a registered subscriber (the caller holds the
/// session's writer lock, which registration also takes): `$1` channel,
/// `$2` payload, `$3` session.
pub(crate) const NOTIFY: &str = "SELECT pg_notify($1, $2) \
    WHERE EXISTS (SELECT 1 FROM subscribers WHERE session_id = $3)";

/// The message that wakes every stream (after a reconnect, or for a session
/// id too long for a `NOTIFY` payload).
pub(crate) const EVERYONE: &str = "";

/// Longest session id sent as is in a `NOTIFY` payload (the limit is 8000 bytes).
const MAX_PAYLOAD: usize = 7_000;

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
    /// Starts listening on `channels` (subscriptions, work), forwarding
    /// the first's payloads to `sender` and firing `signal` for the second,
    /// and reconnecting (with a catch-up wake of every stream and waiter)
    /// when the connection drops.
    pub(crate) fn start(
        config: tokio_postgres::Config,
        tls: crate::tls::Connector,
        channels: [String; 2],
        sender: broadcast::Sender<Arc<str>>,
        signal: WorkSignal,
    ) -> Self {
        let task = tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            loop {
                if listen_once(&config, &tls, &channels, &sender, &signal).await {
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
    tls: &crate::tls::Connector,
    [channel, work_channel]: &[String; 2],
    sender: &broadcast::Sender<Arc<str>>,
    signal: &WorkSignal,
) -> bool {
    let Ok((client, mut connection)) = config.connect(tls.clone()).await else {
        return false;
    };
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    // The channels are built from the validated schema name (an identifier).
    // Two statements, the subscriptions' last, so the connection shows as
    // listening on it (`pg_stat_activity.query`).
    let listen_work = format!("LISTEN \"{work_channel}\"");
    let listen_sessions = format!("LISTEN \"{channel}\"");
    let listen = async {
        client.batch_execute(&listen_work).await?;
        client.batch_execute(&listen_sessions).await
    };
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
                signal.notify();
            }
            message = messages.next() => match message {
                Some(Ok(AsyncMessage::Notification(note))) if note.channel() == work_channel => {
                    signal.notify();
                }
                Some(Ok(AsyncMessage::Notification(note))) => {
                    let _ = sender.send(Arc::from(note.payload()));
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return listening,
            }
        }
    }
}

/// Starts the task that tells other processes work was made ready: after
/// each commit that made a work row ready the store bumps the returned
/// sender, and the task sends `NOTIFY` on `channel` in a transaction of its
/// own with `synchronous_commit = off`.
///
/// Why not in the writer's transaction: PostgreSQL holds one cluster-wide
/// lock from a notifying transaction's pre-commit to its end, WAL flush
/// included, so every notifying write would wait for the others' fsyncs
/// (measured: append→claim p99 of 90 ms at 200 appends/s, commits waiting
/// on `Lock:object` and `WALSync`). Here writers never take that lock, and
/// bursts coalesce into one `NOTIFY` per round trip. A `NOTIFY` lost to a
/// crash between commit and notice, or to a failed connection, only delays
/// waiters elsewhere until their fallback poll. The task ends when the
/// store (the sender) is dropped.
pub(crate) fn work_notifier(pool: Pool, channel: String) -> watch::Sender<u64> {
    let (notices, mut pending) = watch::channel(0u64);
    tokio::spawn(async move {
        while pending.changed().await.is_ok() {
            pending.borrow_and_update();
            // Best effort: an error only delays other processes' waiters.
            let _ = send_work_notice(&pool, &channel).await;
        }
    });
    notices
}

/// One `NOTIFY` on `channel`, in a transaction that does not wait for its
/// WAL flush (a notice need not survive a crash): `BEGIN` with `SET LOCAL
/// synchronous_commit = off`, the `pg_notify` and `COMMIT` pipelined, one
/// round trip. A failed `pg_notify` aborts the transaction, whose `COMMIT`
/// then rolls back: nothing is sent, which only delays waiters elsewhere.
async fn send_work_notice(
    pool: &Pool,
    channel: &str,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client = pool.get().await?;
    let notify = client.prepare_cached("SELECT pg_notify($1, '')").await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&channel];
    futures::try_join!(
        client.batch_execute("BEGIN; SET LOCAL synchronous_commit = off"),
        client.execute(&notify, &params),
        client.batch_execute("COMMIT"),
    )?;
    Ok(())
}
