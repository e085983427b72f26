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

use std::future::Future;
use std::pin::Pin;
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

/// How long a store's first wait (a waiting `claim_work`, a `subscribe`)
/// waits for the listener's first connection to listen before going on
/// without it. A wake-up it misses meanwhile costs at most the fallback
/// poll's delay, so waiting longer than that poll buys nothing.
pub(crate) const FIRST_LISTEN_WAIT: Duration = FALLBACK_POLL;

/// How often a waiting claimer claims again without a wake-up: a lost
/// notification (the listener reconnecting) only delays work this long.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// What the listener's connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenState {
    /// The first connection is being opened: a change committed now may be
    /// noticed only by the catch-up wake once it listens.
    Connecting,
    /// Listening: every later commit's notification arrives.
    Listening,
    /// Not listening (the connection failed or dropped); the task reconnects
    /// with a backoff and wakes everyone once it listens again.
    Down,
}

/// The background task holding the `LISTEN` connection; stopped on drop.
#[derive(Debug)]
pub(crate) struct Listener {
    task: JoinHandle<()>,
    state: watch::Receiver<ListenState>,
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
        network_timeout: Duration,
    ) -> Self {
        let (state, watched) = watch::channel(ListenState::Connecting);
        let task = tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            let links = Links {
                sender: &sender,
                signal: &signal,
                state: &state,
            };
            loop {
                if listen_once(&config, &tls, &channels, &links, network_timeout).await {
                    delay = Duration::from_millis(50);
                }
                state.send_replace(ListenState::Down);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        });
        Self {
            task,
            state: watched,
        }
    }

    /// Resolves once the first connection listens or has failed, or after
    /// `bound`, whichever comes first; at once after that. A caller that
    /// reads the store after it misses no notification of a later commit
    /// (unless the connection failed: then the fallback poll covers it).
    pub(crate) async fn first_connected(&self, bound: Duration) {
        let mut state = self.state.clone();
        let connected = state.wait_for(|state| *state != ListenState::Connecting);
        // Elapsed, or the task gone (aborted with the store): go on either way.
        let _ = tokio::time::timeout(bound, connected).await;
    }
}

/// How often a listening connection with nothing to say is probed
/// (its `LISTEN` repeated) to find out that it still carries packets: half the network
/// timeout, between 100 ms and 5 s.
pub(crate) fn probe_interval(network_timeout: Duration) -> Duration {
    (network_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// Where a listening connection sends what it hears.
struct Links<'a> {
    /// The session ids of subscription notifications.
    sender: &'a broadcast::Sender<Arc<str>>,
    /// Fired for work notifications.
    signal: &'a WorkSignal,
    /// The listener's state.
    state: &'a watch::Sender<ListenState>,
}

/// One connection's life: `LISTEN`, wake everyone, forward notifications
/// until the connection ends, or until a liveness probe (sent every
/// [`probe_interval`]) goes unanswered for `network_timeout`: a connection
/// cut silently (a partition, a proxy that stalled) carries no error, and
/// would otherwise stay deaf until TCP gives up. Returns whether it got as
/// far as listening.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: &crate::tls::Connector,
    [channel, work_channel]: &[String; 2],
    links: &Links<'_>,
    network_timeout: Duration,
) -> bool {
    let Links {
        sender,
        signal,
        state,
    } = links;
    let connect = tokio::time::timeout(
        network_timeout.saturating_mul(2),
        config.connect(tls.clone()),
    );
    let Ok(Ok((client, mut connection))) = connect.await else {
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
    // The `LISTEN` itself is bounded like a probe.
    let mut answer_by = Some(tokio::time::Instant::now() + network_timeout.saturating_mul(2));
    let every = probe_interval(network_timeout);
    let mut probes = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    probes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probe: Option<Pin<Box<dyn Future<Output = bool> + Send + '_>>> = None;
    loop {
        tokio::select! {
            done = &mut listen, if !listening => {
                if done.is_err() {
                    return false;
                }
                listening = true;
                answer_by = None;
                state.send_replace(ListenState::Listening);
                let _ = sender.send(Arc::from(EVERYONE));
                signal.notify();
            }
            _ = probes.tick(), if listening && probe.is_none() => {
                // The probe repeats the subscriptions' `LISTEN` (a no-op on a
                // channel already listened to), so `pg_stat_activity.query`
                // keeps showing the connection as the listener.
                let (client, listen) = (&client, &listen_sessions);
                probe = Some(Box::pin(async move { client.batch_execute(listen).await.is_ok() }));
                answer_by = Some(tokio::time::Instant::now() + network_timeout);
            }
            answered = async {
                match probe.as_mut() {
                    Some(probe) => probe.await,
                    None => std::future::pending().await,
                }
            }, if probe.is_some() => {
                if !answered {
                    return listening;
                }
                probe = None;
                answer_by = None;
            }
            () = async {
                match answer_by {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                // No answer in time: reconnect (dropping the client closes it).
                return listening;
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
/// own with `synchronous_commit = off` ([`NOTICE`]: one statement).
///
/// Why not in the writer's transaction: PostgreSQL holds one cluster-wide
/// lock from a notifying transaction's pre-commit to its end, WAL flush
/// included, so every notifying write would wait for the others' fsyncs
/// (measured: append→claim p99 of 90 ms at 200 appends/s, commits waiting
/// on `Lock:object` and `WALSync`). Here writers never take that lock, and
/// bursts coalesce into one `NOTIFY` per round trip. A `NOTIFY` lost to a
/// crash between commit and notice, or to a failed connection, only delays
/// waiters elsewhere until their fallback poll. Notices are at least
/// [`NOTICE_GAP`] apart. The task ends when the store (the sender) is
/// dropped.
///
/// Each notice is bounded by `bound` (the store's call bound): a notice
/// nobody answers is given up, so a silent network cannot stall later ones.
pub(crate) fn work_notifier(pool: Pool, channel: String, bound: Duration) -> watch::Sender<u64> {
    let (notices, mut pending) = watch::channel(0u64);
    tokio::spawn(async move {
        while pending.changed().await.is_ok() {
            pending.borrow_and_update();
            // Best effort: an error only delays other processes' waiters.
            let _ = send_work_notice(&pool, &channel, bound).await;
            // What is made ready meanwhile goes out in one notice after it.
            tokio::time::sleep(NOTICE_GAP).await;
        }
    });
    notices
}

/// A work notice on the channel `$1`, in a transaction of its own that
/// does not wait for a WAL flush (see `send_work_notice`).
pub(crate) const NOTICE: &str =
    "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, '')";

/// The least time between two work notices of one store: work made ready
/// within it of a notice is told in one more notice at its end. A lone
/// notice goes out at once; over a steady stream of completions that each
/// make a lane's next head ready (one notice a round trip: 0.21 per job in
/// the peer bench's lanes) notices are at most 200 a second, and a waiter
/// in another process learns of work at most this much later (this
/// process's waiters are woken directly). Each notice costs a transaction
/// twice: the sender's, and one in every listening connection, which
/// PostgreSQL reads incoming notifications in (50 notifications to one
/// listener: about 45 more commits in its database than with none).
pub(crate) const NOTICE_GAP: Duration = Duration::from_millis(5);

/// One `NOTIFY` on `channel` as one statement in a transaction of its own
/// (the implicit one of the statement), which does not wait for a WAL
/// flush: the statement sets `synchronous_commit = off` for its own
/// transaction (`set_config(…, true)`), read when that transaction commits
/// right after it (a notice need not survive a crash; and a transaction
/// that only notifies writes no commit record anyway). One round trip,
/// one statement, where `BEGIN`, `SET LOCAL`, the `pg_notify` and `COMMIT`
/// were four statements. A failed `pg_notify` fails the statement and
/// nothing is sent, which only delays waiters elsewhere.
async fn send_work_notice(
    pool: &Pool,
    channel: &str,
    bound: Duration,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let deadline = tokio::time::Instant::now() + bound;
    let client = tokio::time::timeout_at(deadline, pool.get()).await??;
    let sent = tokio::time::timeout_at(deadline, async {
        let notify = client.prepare_cached(NOTICE).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&channel];
        client.execute(&notify, &params).await?;
        Ok::<_, tokio_postgres::Error>(())
    })
    .await;
    match sent {
        Ok(outcome) => Ok(outcome?),
        Err(elapsed) => {
            crate::deadline::discard(client);
            Err(elapsed.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener on a server at `port` of this machine.
    fn listener_on(port: u16) -> Listener {
        listener_within(port, Duration::from_secs(10))
    }

    /// A listener on a server at `port` that waits `network` for answers.
    fn listener_within(port: u16, network: Duration) -> Listener {
        let url = format!("postgres://nobody@127.0.0.1:{port}/none?sslmode=disable");
        let (config, tls) = crate::tls::prepare(&url).expect("a valid URL");
        let (sender, _) = broadcast::channel(4);
        Listener::start(
            config,
            tls,
            ["a".to_owned(), "b".to_owned()],
            sender,
            WorkSignal::new(),
            network,
        )
    }

    /// A server that accepts the connection and then says nothing is given
    /// up after twice the network timeout (the listener is `Down` and
    /// tries again), not waited for forever.
    #[tokio::test]
    async fn a_silent_server_is_given_up_after_the_network_timeout() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
        let port = silent.local_addr().expect("its address").port();
        let listener = listener_within(port, Duration::from_millis(200));
        let mut state = listener.state.clone();
        let started = std::time::Instant::now();
        let down = state.wait_for(|s| *s == ListenState::Down);
        tokio::time::timeout(Duration::from_secs(5), down)
            .await
            .expect("the listener gives up on a silent server")
            .expect("the listener task runs");
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
        drop(silent);
    }

    #[test]
    fn probes_run_at_half_the_network_timeout_within_limits() {
        assert_eq!(
            probe_interval(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
        assert_eq!(
            probe_interval(Duration::from_secs(60)),
            Duration::from_secs(5)
        );
        assert_eq!(
            probe_interval(Duration::from_millis(10)),
            Duration::from_millis(100)
        );
    }

    /// A listener whose server accepts the connection but never answers
    /// stays `Connecting`; waiting for it ends at the bound, never later.
    #[tokio::test]
    async fn waiting_for_a_listener_that_never_connects_is_bounded() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
        let listener = listener_on(silent.local_addr().expect("its address").port());
        let started = std::time::Instant::now();
        listener.first_connected(Duration::from_millis(200)).await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(2),
            "waited {waited:?}"
        );
        assert_eq!(*listener.state.borrow(), ListenState::Connecting);
        // A second wait starts over, bounded the same way.
        let started = std::time::Instant::now();
        listener.first_connected(Duration::from_millis(50)).await;
        assert!(started.elapsed() < Duration::from_secs(1));
        drop(silent);
    }

    /// A listener whose server refuses the connection is `Down` at once:
    /// the first wait does not wait for the bound.
    #[tokio::test]
    async fn a_refused_listener_ends_the_first_wait_at_once() {
        // A port nobody listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a local port")
            .port();
        let listener = listener_on(port);
        let started = std::time::Instant::now();
        listener.first_connected(Duration::from_secs(10)).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a refused connection ended the wait after {:?}",
            started.elapsed()
        );
        assert_eq!(*listener.state.borrow(), ListenState::Down);
    }
}
