//! The optional retention task ([`WorkerBuilder::retention`](crate::WorkerBuilder::retention)):
//! while the worker runs, prune the sessions idle for a while that have
//! nothing left to do, a bounded number of pages per round.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{PruneFrom, PruneRequest, Store, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::worker::TARGET;

/// Idle sessions one `Store::prune` call of the retention task examines.
pub const RETENTION_PAGE_LIMIT: usize = 100;

/// The most `Store::prune` pages one retention round asks for; a round that
/// stops there continues where it stopped at the next round.
pub const RETENTION_PAGES_PER_ROUND: usize = 10;

/// What the retention task does: prune sessions idle for `idle_for`, a
/// round every `every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    pub(crate) idle_for: Duration,
    pub(crate) every: Duration,
}

impl Retention {
    /// `InvalidInput` when either duration is below a millisecond.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.idle_for < Duration::from_millis(1) {
            return Err(StoreError::invalid_input(
                "retention idle_for must be at least 1 ms (e.g. 30 days)",
            ));
        }
        if self.every < Duration::from_millis(1) {
            return Err(StoreError::invalid_input(
                "retention every must be at least 1 ms (e.g. an hour)",
            ));
        }
        Ok(())
    }
}

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Round {
    deleted: u64,
    examined: u64,
    pages: u64,
}

/// The retention task; aborted when dropped, so it never outlives the
/// worker that started it.
pub(crate) struct RetentionTask(JoinHandle<()>);

impl Drop for RetentionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the task reports to the worker's counts.
pub(crate) trait Tally: Send + Sync + 'static {
    /// `sessions` were deleted.
    fn pruned(&self, sessions: u64);
    /// A prune call failed.
    fn prune_failed(&self);
}

/// Starts the retention task of the worker `holder`: a round at once, then
/// one every `retention.every`, until `stop` is raised (or the task is dropped).
pub(crate) fn spawn(
    store: Arc<dyn Store>,
    retention: Retention,
    holder: &str,
    tally: Arc<dyn Tally>,
    mut stop: watch::Receiver<bool>,
) -> RetentionTask {
    let span = tracing::info_span!(
        target: TARGET,
        "a2_worker.retention",
        holder = %holder,
        idle_for_ms = millis(retention.idle_for),
        every_ms = millis(retention.every),
    );
    let task = async move {
        let mut ticks = tokio::time::interval(retention.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Where the last round stopped at its page cap, if it did.
        let mut after: Option<PruneFrom> = None;
        loop {
            tokio::select! {
                _ = stop.wait_for(|set| *set) => break,
                _ = ticks.tick() => {}
            }
            tokio::select! {
                _ = stop.wait_for(|set| *set) => break,
                () = round(store.as_ref(), retention, &mut after, tally.as_ref()) => {}
            }
        }
        tracing::debug!(target: TARGET, "retention stopped");
    };
    RetentionTask(tokio::spawn(task.instrument(span)))
}

/// One round: pages until no idle session is left or the page cap is
/// reached (then `after` says where the next round continues). An error
/// ends the round; the next one tries again from the same place.
async fn round(
    store: &dyn Store,
    retention: Retention,
    after: &mut Option<PruneFrom>,
    tally: &dyn Tally,
) {
    let mut done = Round::default();
    for _ in 0..RETENTION_PAGES_PER_ROUND {
        let request = PruneRequest::idle_for(retention.idle_for)
            .with_limit(RETENTION_PAGE_LIMIT)
            .after(after.clone());
        let page = match store.prune(request).await {
            Ok(page) => page,
            Err(error) => {
                tally.prune_failed();
                tracing::warn!(
                    target: TARGET,
                    error = %error,
                    code = error.code().as_str(),
                    deleted = done.deleted,
                    "prune failed; trying again next round"
                );
                return;
            }
        };
        let deleted = u64::try_from(page.sessions.len()).unwrap_or(u64::MAX);
        for session in &page.sessions {
            tracing::debug!(target: TARGET, session = %session, "pruned idle session");
        }
        tally.pruned(deleted);
        done.deleted += deleted;
        done.examined += u64::try_from(page.examined).unwrap_or(u64::MAX);
        done.pages += 1;
        *after = page.next;
        if after.is_none() {
            break;
        }
    }
    if done.deleted > 0 {
        tracing::info!(
            target: TARGET,
            deleted = done.deleted,
            examined = done.examined,
            pages = done.pages,
            more = after.is_some(),
            "pruned idle sessions"
        );
    } else {
        tracing::debug!(target: TARGET, examined = done.examined, pages = done.pages, "nothing to prune");
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
