//! Retention: the cost of one `prune` page as the store grows, and of one
//! `delete_session` of a long session.
//!
//! - [`PruneScaling`]: a store of `sessions` recent sessions (one message
//!   each); every iteration adds [`PRUNE_PAGE`] sessions last active a day
//!   earlier (untimed) and times one `prune` deleting exactly them. A
//!   backend meets the contract when the figure stays flat (within 2x) from
//!   10k to 1M sessions: a page costs what it deletes, not what the store
//!   holds.
//! - [`delete_session_events`]: one `delete_session` of a session of
//!   `events` messages (built untimed, a fresh session per iteration).

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, DeleteSessionRequest, DeleteSessionResult, ManualClock, NewEvent, PruneRequest,
    Store,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use futures::StreamExt;
use tokio::runtime::Runtime;

use super::fixture::{append_all, must, open_store, payload, START_MS};
use crate::StoreFactory;

/// Idle sessions each timed `prune` deletes (its page size).
pub const PRUNE_PAGE: usize = 1_000;

/// Calls the fixtures build with at once.
const BUILD_CALLS: usize = 16;

/// A day, ms: the idle sessions are last active this long before the rest.
const DAY_MS: i64 = 86_400_000;

/// When the store's recent sessions were appended to; idle ones are a day
/// older, and prunes run an hour after.
const RECENT_MS: i64 = START_MS + 10 * DAY_MS;

/// One message event with the bench payload.
fn message(seq: u64) -> NewEvent {
    NewEvent::new("msg", payload(seq))
}

/// Appends one message to each of `ids`, `BUILD_CALLS` at a time.
async fn fill(store: &dyn Store, ids: impl Iterator<Item = String>) {
    futures::stream::iter(ids)
        .map(|session| async move {
            must(
                "append to a retention fixture session",
                store
                    .append(&session, vec![message(0)], AppendOptions::default())
                    .await,
            );
        })
        .buffer_unordered(BUILD_CALLS)
        .collect::<Vec<()>>()
        .await;
}

/// A store of `sessions` recent sessions and a counter of idle batches.
struct PruneFixture {
    sessions: u64,
    clock: ManualClock,
    store: Arc<dyn Store>,
    batches: u64,
}

impl PruneFixture {
    async fn build(factory: &dyn StoreFactory, sessions: u64) -> Self {
        let clock = ManualClock::new(RECENT_MS);
        let store = open_store(factory, &clock).await;
        fill(
            store.as_ref(),
            (0..sessions).map(|index| format!("keep-{index:08}")),
        )
        .await;
        Self {
            sessions,
            clock,
            store,
            batches: 0,
        }
    }

    /// Adds [`PRUNE_PAGE`] sessions last active a day before the recent
    /// ones (untimed), then times one prune that must delete exactly them.
    async fn prune_once(&mut self) -> Duration {
        self.clock.set(RECENT_MS - DAY_MS);
        let batch = self.batches;
        self.batches += 1;
        fill(
            self.store.as_ref(),
            (0..PRUNE_PAGE).map(|index| format!("idle-{batch:06}-{index:05}")),
        )
        .await;
        self.clock.set(RECENT_MS + DAY_MS / 24);
        let request =
            PruneRequest::idle_for(Duration::from_millis(DAY_MS as u64 / 2)).with_limit(PRUNE_PAGE);
        let start = Instant::now();
        let pruned = must("prune", self.store.prune(request).await);
        let took = start.elapsed();
        assert_eq!(
            pruned.sessions.len(),
            PRUNE_PAGE,
            "the prune deleted {} of the {PRUNE_PAGE} idle sessions",
            pruned.sessions.len()
        );
        took
    }
}

/// The prune series of one backend: one fixture at a time (built the first
/// time a size runs; the store keeps its size since every iteration deletes
/// what it added).
pub struct PruneScaling<'f> {
    factory: &'f dyn StoreFactory,
    fixture: Option<PruneFixture>,
}

impl<'f> PruneScaling<'f> {
    /// A series of `factory`'s backend with no fixture built yet.
    pub fn new(factory: &'f dyn StoreFactory) -> Self {
        Self {
            factory,
            fixture: None,
        }
    }

    /// Registers one `prune` deleting [`PRUNE_PAGE`] idle sessions among
    /// `sessions` recent ones; throughput counts sessions deleted. Id
    /// `(backend, sessions)`. A fixture of another size is dropped first.
    pub fn bench(&mut self, group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, sessions: u64) {
        let factory = self.factory;
        let slot = &mut self.fixture;
        group.throughput(Throughput::Elements(PRUNE_PAGE as u64));
        group.bench_function(BenchmarkId::new(factory.name(), sessions), |b| {
            if slot
                .as_ref()
                .is_some_and(|fixture| fixture.sessions != sessions)
            {
                *slot = None;
            }
            if slot.is_none() {
                *slot = Some(rt.block_on(PruneFixture::build(factory, sessions)));
            }
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        if let Some(fixture) = slot.as_mut() {
                            total += fixture.prune_once().await;
                        }
                    }
                    total
                })
            });
        });
    }

    /// Drops the fixture (and its store).
    pub fn release(&mut self) {
        self.fixture = None;
    }
}

/// One `delete_session` of a session of `events` messages, built untimed in
/// batches; throughput counts events deleted. Id `(backend, events)`.
pub fn delete_session_events(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    events: u64,
) {
    group.throughput(Throughput::Elements(events));
    let mut state: Option<(ManualClock, Arc<dyn Store>, u64)> = None;
    group.bench_function(BenchmarkId::new(factory.name(), events), |b| {
        let (_, store, built) = state.get_or_insert_with(|| {
            let clock = ManualClock::new(START_MS);
            let store = rt.block_on(open_store(factory, &clock));
            (clock, store, 0)
        });
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let session = format!("long-{built:06}");
                    *built += 1;
                    append_all(
                        store.as_ref(),
                        &session,
                        (0..events).map(message).collect(),
                        None,
                    )
                    .await;
                    let start = Instant::now();
                    let result = store
                        .delete_session(DeleteSessionRequest::new(&session))
                        .await;
                    total += start.elapsed();
                    match must("delete_session", result) {
                        DeleteSessionResult::Deleted { removed } => assert_eq!(
                            removed.events, events,
                            "the delete removed {} of {events} events",
                            removed.events
                        ),
                        other => panic!("benchmark expected Deleted, got {other:?}"),
                    }
                }
                total
            })
        });
    });
}
