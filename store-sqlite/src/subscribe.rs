//! `subscribe`: the backlog, then live appends, in index order with no gap
//! and no duplicate.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use a2_store_api::{EventStream, StoreError, StoredEvent};
use futures::stream;
use tokio::sync::watch;

use crate::events::read_range;
use crate::pool::{Access, Pool};
use crate::session;

/// How many rows one read of a subscription fetches.
const CHUNK: usize = 256;

struct Follow {
    pool: Weak<Pool>,
    session_id: String,
    last: u64,
    buffer: VecDeque<StoredEvent>,
    commits: watch::Receiver<u64>,
    poll: Duration,
    failed: bool,
}

/// A stream of the session's rows after `after`: it reads the database in
/// chunks, and when caught up waits for a commit of this process or the poll
/// interval (appends of other processes). Ends when the store is dropped;
/// yields one error and ends if the database can no longer be read.
pub(crate) fn follow(
    pool: &Arc<Pool>,
    commits: watch::Receiver<u64>,
    session_id: &str,
    after: u64,
) -> EventStream {
    let state = Follow {
        pool: Arc::downgrade(pool),
        session_id: session_id.to_owned(),
        last: after,
        buffer: VecDeque::new(),
        commits,
        poll: pool.poll_interval(),
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
            // Mark commits seen before reading, so none is missed while reading.
            state.commits.borrow_and_update();
            let pool = state.pool.upgrade()?;
            let read = fetch(&pool, &state.session_id, state.last).await;
            drop(pool);
            match read {
                Err(error) => {
                    state.failed = true;
                    return Some((Err(error), state));
                }
                Ok(rows) if !rows.is_empty() => {
                    if let Some(last) = rows.last() {
                        state.last = last.index;
                    }
                    state.buffer.extend(rows);
                }
                Ok(_) => {
                    tokio::select! {
                        changed = state.commits.changed() => {
                            if changed.is_err() {
                                return None;
                            }
                        }
                        () = tokio::time::sleep(state.poll) => {}
                    }
                }
            }
        }
    }))
}

/// The next chunk of rows after `last`.
async fn fetch(
    pool: &Arc<Pool>,
    session_id: &str,
    last: u64,
) -> Result<Vec<StoredEvent>, StoreError> {
    let session_id = session_id.to_owned();
    pool.run(Access::Read, move |tx, _| {
        let Some(session) = session::find(tx, &session_id)? else {
            return Ok(Vec::new());
        };
        if session.head <= last {
            return Ok(Vec::new());
        }
        read_range(tx, &session, last, session.head, Some(CHUNK))
    })
    .await
}
