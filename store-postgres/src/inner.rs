//! [`Inner`]: what every call of a store shares (the pool, the clock, the id
//! source) and the wake-up plumbing of its subscriptions. Operations take it
//! from here; the store that owns it depends on them, never the reverse.

use std::sync::Arc;

use a2_store_api::work::WorkSignal;
use a2_store_api::{Clock, IdGenerator};
use deadpool_postgres::Pool;
use tokio::sync::{broadcast, OnceCell};

use crate::notify::{Listener, FIRST_LISTEN_WAIT};

/// State shared by the store's calls.
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdGenerator>,
    /// The `NOTIFY` channel of this schema's subscriptions.
    pub(crate) channel: String,
    /// The `NOTIFY` channel of this schema's work wake-ups.
    pub(crate) work_channel: String,
    /// Asks the work notifier to send `NOTIFY` on `work_channel` (see
    /// [`crate::notify::work_notifier`]).
    pub(crate) work_notices: tokio::sync::watch::Sender<u64>,
    /// Wakes this store's waiting `claim_work` calls (shared by clones).
    pub(crate) signal: WorkSignal,
    pub(crate) schema: String,
    /// How to open the listener's own connection.
    pub(crate) config: tokio_postgres::Config,
    /// The TLS connector of every connection, the listener's included.
    pub(crate) tls: crate::tls::Connector,
    /// Wakes this store's streams with a session id (or every stream).
    pub(crate) wakes: broadcast::Sender<Arc<str>>,
    /// Started by the first `subscribe`.
    pub(crate) listener: OnceCell<Listener>,
    /// What this store's last claims of each session found (see
    /// [`crate::ops::claims::Hints`]).
    pub(crate) claim_hints: crate::ops::claims::Hints,
    /// The cursor rows this store's claims and renewals last wrote (see
    /// [`crate::ops::claims::claimed`]).
    pub(crate) claimed: crate::ops::claims::claimed::Claimed,
    /// When the state tables are rotated (see [`crate::rotate`]).
    pub(crate) rotation: crate::options::Rotation,
    /// The longest a call waits ([`crate::PostgresOptions::call_bound`]).
    pub(crate) call_bound: std::time::Duration,
    /// How long the network may stay silent
    /// ([`crate::PostgresOptions::network_timeout`]).
    pub(crate) network_timeout: std::time::Duration,
}

impl Inner {
    /// Starts the listener on first use, waits (at most
    /// [`FIRST_LISTEN_WAIT`]) until its first connection listens, and
    /// returns a receiver of wake-ups; take it before a stream's first read,
    /// so no append slips between. Waiting makes a process's first wait
    /// miss nothing committed after its first read: without it, work made
    /// ready while the listener connects would wait for the listener's
    /// catch-up wake (measured: the first messages of a fresh worker
    /// process waited 40 to 60 ms on a loaded machine).
    pub(crate) async fn listen(&self) -> broadcast::Receiver<Arc<str>> {
        let listener = self
            .listener
            .get_or_init(|| async {
                Listener::start(
                    self.config.clone(),
                    self.tls.clone(),
                    [self.channel.clone(), self.work_channel.clone()],
                    self.wakes.clone(),
                    self.signal.clone(),
                    self.network_timeout,
                )
            })
            .await;
        listener.first_connected(FIRST_LISTEN_WAIT).await;
        self.wakes.subscribe()
    }

    /// Wakes this store's streams of `session_id` after a commit that grew
    /// it (other processes learn of it through `NOTIFY`).
    pub(crate) fn wake(&self, session_id: &str) {
        let _ = self.wakes.send(Arc::from(session_id));
    }

    /// After a commit: wakes the streams of `session_id` when rows were
    /// appended, and this store's waiting claimers when work was made ready;
    /// other processes learn of the first through `NOTIFY` in the commit,
    /// of the second through the work notifier's `NOTIFY` after it.
    pub(crate) fn committed(&self, session_id: &str, wrote: Wrote) {
        if wrote.events {
            self.wake(session_id);
        }
        if wrote.work {
            self.wake_claimers();
        }
    }

    /// After a commit that may make work claimable sooner: wakes this
    /// store's waiting claimers, and other processes' through the work
    /// notifier's `NOTIFY`.
    pub(crate) fn wake_claimers(&self) {
        self.signal.notify();
        self.work_notices
            .send_modify(|count| *count = count.wrapping_add(1));
    }
}

/// What a committed write changed that someone may wait for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wrote {
    /// Rows were appended to the session.
    pub events: bool,
    /// A work row was made ready (inserted or moved earlier).
    pub work: bool,
}
