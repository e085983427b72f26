//! The batching writer of completions: group commit for `complete_attempt`.
//!
//! A completion that returns no events (see
//! [`batchable`](crate::ops::complete::batch::batchable)) asks the store's
//! [`Completer`] for its turn. While no write is in flight ([`MOST_RUNNING`])
//! and nothing waits, it runs alone on the single path at once
//! (one round trip for a head this store claimed), so a lone caller pays
//! nothing for batching. Otherwise it joins the queue, and the flush loop
//! takes everything queued (up to [`MOST_IN_BATCH`]) into one transaction
//! (`ops::complete::batch`: two round trips for the whole batch); what
//! arrives meanwhile waits for the next flush. No timer: a batch is what
//! arrived while the previous write was in flight.
//!
//! Every caller is answered only after its own commit, with its own
//! verdict: an item the batch applied answers `Completed` once the batch's
//! `COMMIT` returned; an item the batch did not decide `Apply` (a replay, a
//! superseded attempt, a missing or log cursor, a second completion of a
//! cursor already in the batch) runs alone on the single path, which reads
//! its rows again. A batch that fails on the server (a deadlock, a broken
//! connection, a timeout, even at `COMMIT`) ends its transaction and runs
//! every item alone: each is then applied once or replayed from its
//! completion record, never applied twice.

use std::sync::{Arc, Mutex, MutexGuard};

use a2_store_api::{CompleteRequest, CompleteResult};
use tokio::sync::oneshot;

use crate::db::Tx;
use crate::inner::Inner;
use crate::ops::complete::batch::{self, Flushed};

/// Most writes (lone completions and flushes) in flight at once; past it a
/// completion queues for the next flush. One: while a write is in flight
/// every completion waits for the next flush. Measured against two, same
/// runs alternating (`benches/peer/run --private-cluster --sides
/// a2-worker,a2-hand`): 9.46 and 10.35 statements per job instead of 10.80
/// and 12.43, 1.18 and 1.45 transactions instead of 1.34 and 1.85
/// (independent jobs, lanes), and no fewer jobs per second.
pub(crate) const MOST_RUNNING: usize = 1;

/// Most completions one flush takes.
pub(crate) const MOST_IN_BATCH: usize = 512;

/// A completion waiting for a flush, and where its answer goes.
struct Pending {
    request: CompleteRequest,
    reply: oneshot::Sender<Reply>,
}

/// What a flush answers a queued completion.
enum Reply {
    /// Completed in the flush's committed transaction (no returned events).
    Completed,
    /// Not decided by the flush: run it alone.
    Alone(CompleteRequest),
}

/// The queue of completions and the count of writes in flight.
#[derive(Default)]
struct State {
    queue: Vec<Pending>,
    running: usize,
}

/// A store's batching writer of completions (see the module docs).
#[derive(Default)]
pub(crate) struct Completer {
    state: Mutex<State>,
}

impl Completer {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a completion goes: answered by a flush, or alone on the single path
/// (holding a [`Turn`] while it runs, when it took one).
pub(crate) enum Route {
    /// Completed by a batch: the answer.
    Done(CompleteResult),
    /// Run on the single path; the turn (if any) is held until it ends.
    Alone(CompleteRequest, Option<Turn>),
    /// The call's bound passed while it waited for its batch.
    Late,
}

/// A lone write's place among the writes in flight; given back when
/// dropped (when the call ends, or is cancelled), which starts a flush of
/// what queued meanwhile.
pub(crate) struct Turn {
    completer: Arc<Completer>,
    inner: Arc<Inner>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = self.completer.state();
        if state.queue.is_empty() {
            state.running = state.running.saturating_sub(1);
            return;
        }
        // The turn passes to a flush of the queue.
        drop(state);
        start_flush(&self.completer, &self.inner, false);
    }
}

/// Routes a validated completion: at once alone when nothing waits and a
/// write slot is free; through a batch otherwise. A caller still waiting
/// for its batch at `deadline` (its call's bound) is answered
/// [`Route::Late`]: the batch may yet commit it, which is what
/// `Unavailable` says.
pub(crate) async fn complete(
    completer: &Arc<Completer>,
    inner: &Arc<Inner>,
    request: CompleteRequest,
    deadline: tokio::time::Instant,
) -> Route {
    if !batch::batchable(&request) {
        return Route::Alone(request, None);
    }
    let receiver = {
        let mut state = completer.state();
        if state.queue.is_empty() && state.running < MOST_RUNNING {
            state.running += 1;
            return Route::Alone(
                request,
                Some(Turn {
                    completer: Arc::clone(completer),
                    inner: Arc::clone(inner),
                }),
            );
        }
        let (reply, receiver) = oneshot::channel();
        let request_copy = request.clone();
        state.queue.push(Pending { request, reply });
        let start = state.running < MOST_RUNNING;
        drop(state);
        if start {
            start_flush(completer, inner, true);
        }
        (receiver, request_copy)
    };
    let Ok(reply) = tokio::time::timeout_at(deadline, receiver.0).await else {
        return Route::Late;
    };
    match reply {
        Ok(Reply::Completed) => Route::Done(CompleteResult::Completed { events: Vec::new() }),
        Ok(Reply::Alone(request)) => Route::Alone(request, None),
        // The flush ended without answering (its task stopped): the single
        // path decides, replaying the completion if the flush committed it.
        Err(_) => Route::Alone(receiver.1, None),
    }
}

/// Starts the flush loop on its own task; `take_slot`: it takes a write
/// slot of its own (else it inherits a finishing lone write's).
fn start_flush(completer: &Arc<Completer>, inner: &Arc<Inner>, take_slot: bool) {
    if take_slot {
        completer.state().running += 1;
    }
    let running = Running {
        completer: Arc::clone(completer),
        armed: true,
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // No runtime to flush on: dropping `running` answers every queued
        // caller with "alone".
        return;
    };
    runtime.spawn(flush_loop(running, Arc::clone(inner)));
}

/// Gives the flush loop's write slot back if the loop stops early (its
/// task cancelled or stopped), answering every queued caller.
struct Running {
    completer: Arc<Completer>,
    /// Whether the slot is still this loop's to give back.
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.completer.state();
        state.running = state.running.saturating_sub(1);
        // Callers still queued are answered by running alone.
        for pending in state.queue.drain(..) {
            let _ = pending.reply.send(Reply::Alone(pending.request));
        }
    }
}

/// Flushes the queue until it is empty, then gives its slot back.
async fn flush_loop(mut running: Running, inner: Arc<Inner>) {
    loop {
        let batch: Vec<Pending> = {
            let mut state = running.completer.state();
            if state.queue.is_empty() {
                // The slot is given back under the same lock that saw the
                // queue empty, so no caller queues behind a loop that ends.
                state.running = state.running.saturating_sub(1);
                drop(state);
                running.armed = false;
                return;
            }
            let take = state.queue.len().min(MOST_IN_BATCH);
            state.queue.drain(..take).collect()
        };
        flush(&inner, batch).await;
    }
}

/// One batch: the completions of distinct cursors in one transaction, the
/// others (and all of them when the transaction fails) alone.
async fn flush(inner: &Inner, batch: Vec<Pending>) {
    let mut seen = std::collections::BTreeSet::new();
    let (mut distinct, repeated): (Vec<Pending>, Vec<Pending>) = batch.into_iter().partition(|p| {
        seen.insert((
            p.request.session_id.clone(),
            p.request.consumer.clone(),
            p.request.lane.clone(),
            p.request.index,
        ))
    });
    for pending in repeated {
        let _ = pending.reply.send(Reply::Alone(pending.request));
    }
    if distinct.len() == 1 {
        // A batch of one gains nothing: the single path takes it.
        for pending in distinct.drain(..) {
            let _ = pending.reply.send(Reply::Alone(pending.request));
        }
        return;
    }
    let requests: Vec<&CompleteRequest> = distinct.iter().map(|p| &p.request).collect();
    let flushed = run(inner, &requests).await;
    let flushed = flushed.unwrap_or_default();
    if flushed.work {
        inner.wake_claimers();
    }
    for (at, pending) in distinct.into_iter().enumerate() {
        let reply = if flushed.done.get(at).copied().unwrap_or(false) {
            Reply::Completed
        } else {
            Reply::Alone(pending.request)
        };
        let _ = pending.reply.send(reply);
    }
}

/// The batch's transaction on a pooled connection; `None` when it failed
/// (it ended, every item runs alone).
async fn run(inner: &Inner, requests: &[&CompleteRequest]) -> Option<Flushed> {
    // Bounded as a call is: a flush nobody answers must not hold its
    // callers (they then run alone, each under its own bound).
    let deadline = tokio::time::Instant::now() + inner.call_bound;
    let client = tokio::time::timeout_at(deadline, inner.pool.get())
        .await
        .ok()?
        .ok()?;
    let flushed = tokio::time::timeout_at(deadline, async {
        let tx = Tx::new(&client);
        let now = inner.clock.now_ms();
        match batch::flush(&tx, requests, now, &inner.claimed).await {
            Ok(flushed) => Some(flushed),
            // Not an error of any call: each item runs alone and reports its
            // own. Ended before anyone is answered: no lock outlives the batch.
            Err(_) => {
                let _ = tx.end().await;
                None
            }
        }
    })
    .await;
    match flushed {
        Ok(flushed) => flushed,
        Err(_) => {
            // Its transaction ends on the server when the connection closes
            // (or when idle_in_transaction_session_timeout ends it); an item
            // whose COMMIT did get through replays when it runs alone.
            crate::deadline::discard(client);
            None
        }
    }
}
