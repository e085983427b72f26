//! `subscribe`: the backlog, then live appends, in index order with no gap
//! and no duplicate, of one incarnation of the session: a stream whose
//! session is deleted ends with `SessionDeleted`.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use a2_store_api::{EventStream, StoreError, StoredEvent};
use futures::stream;
use tokio::sync::watch;

use crate::events::read_range;
use crate::pool::{Access, Pool};
use crate::session;
use crate::wake::{WorkWake, FALLBACK_POLL};

/// How many rows one read of a subscription fetches.
const CHUNK: usize = 256;

struct Follow {
    pool: Weak<Pool>,
    session_id: String,
    /// The incarnation followed (`None` until the session exists).
    incarnation: Option<u64>,
    last: u64,
    buffer: VecDeque<StoredEvent>,
    /// Commits of this process on the file.
    commits: watch::Receiver<u64>,
    /// Fails once the stream's store is dropped.
    closed: watch::Receiver<()>,
    /// The file's watcher of other processes' commits.
    wake: Arc<WorkWake>,
    failed: bool,
}

/// A stream of the session's rows after `after`: it reads the database in
/// chunks, and when caught up waits for a commit of this process, or for
/// the file's watcher to see another connection's commit (`PRAGMA
/// data_version`, one check per file while anyone waits, see
/// [`crate::wake`]); no per-session polling. Follows `incarnation` of the
/// session (`None`: it did not exist yet, the first one seen is followed).
/// Ends when the store is dropped; yields one error and ends if the
/// database can no longer be read, or once the session followed is
/// deleted (`SessionDeleted`: gone, or another incarnation in its place).
pub(crate) fn follow(
    pool: &Arc<Pool>,
    commits: watch::Receiver<u64>,
    wake: &Arc<WorkWake>,
    session_id: &str,
    incarnation: Option<u64>,
    after: u64,
) -> EventStream {
    let state = Follow {
        pool: Arc::downgrade(pool),
        session_id: session_id.to_owned(),
        incarnation,
        last: after,
        buffer: VecDeque::new(),
        commits,
        closed: pool.closed(),
        wake: Arc::clone(wake),
        failed: false,
    };
    Box::pin(stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.buffer.pop_front() {
                return Some((Ok(event), state));
            }
            if state.failed {
                return None;
            }
            // Mark commits seen before reading, so none is missed while
            // reading; the receiver of other connections' commits is taken
            // before the read for the same reason, and held (counted as a
            // waiter, so the watcher runs) until the wait ends.
            state.commits.borrow_and_update();
            let mut elsewhere = state
                .wake
                .shared()
                .then(|| state.wake.elsewhere().subscribe());
            if elsewhere.is_some() {
                state.wake.watch_other_processes();
            }
            let pool = state.pool.upgrade()?;
            let read = fetch(&pool, &state.session_id, state.incarnation, state.last).await;
            drop(pool);
            match read {
                Err(error) => {
                    state.failed = true;
                    return Some((Err(error), state));
                }
                Ok((incarnation, rows)) if !rows.is_empty() => {
                    state.incarnation = incarnation;
                    if let Some(last) = rows.last() {
                        state.last = last.index;
                    }
                    state.buffer.extend(rows);
                }
                Ok((incarnation, _)) => {
                    state.incarnation = incarnation;
                    // Another process's commit: the watcher's signal; if
                    // the watcher could not start, a slow re-read instead.
                    let other = async {
                        match elsewhere.as_mut() {
                            Some(receiver) if state.wake.is_watching() => {
                                // Only a dropped notifier ends it, and the
                                // commit signal reports that first.
                                if receiver.changed().await.is_err() {
                                    std::future::pending::<()>().await;
                                }
                            }
                            Some(_) => tokio::time::sleep(FALLBACK_POLL).await,
                            None => std::future::pending::<()>().await,
                        }
                    };
                    tokio::select! {
                        changed = state.commits.changed() => {
                            if changed.is_err() {
                                return None;
                            }
                        }
                        // Only ever fails: the store was dropped.
                        _ = state.closed.changed() => return None,
                        () = other => {}
                    }
                }
            }
        }
    }))
}

/// The incarnation of the session now (`None`: it does not exist), which a
/// stream opened now follows.
pub(crate) async fn incarnation(
    pool: &Arc<Pool>,
    session_id: &str,
) -> Result<Option<u64>, StoreError> {
    let session_id = session_id.to_owned();
    pool.run(Access::Read, move |tx, _| {
        Ok(session::find(tx, &session_id)?.map(|session| session.incarnation))
    })
    .await
}

/// The next chunk of rows after `last` of incarnation `followed` of the
/// session (`None`: any), with the incarnation read; `SessionDeleted` when
/// the followed incarnation is gone.
async fn fetch(
    pool: &Arc<Pool>,
    session_id: &str,
    followed: Option<u64>,
    last: u64,
) -> Result<(Option<u64>, Vec<StoredEvent>), StoreError> {
    let session_id = session_id.to_owned();
    pool.run(Access::Read, move |tx, _| {
        let found = session::find(tx, &session_id)?;
        let current = found.as_ref().map(|session| session.incarnation);
        if followed.is_some() && current != followed {
            return Err(StoreError::session_deleted(&session_id));
        }
        let Some(session) = found else {
            return Ok((None, Vec::new()));
        };
        if session.head <= last {
            return Ok((current, Vec::new()));
        }
        let rows = read_range(tx, &session, last, session.head, Some(CHUNK))?;
        Ok((current, rows))
    })
    .await
}
