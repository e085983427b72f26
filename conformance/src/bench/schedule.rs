//! Scheduled work: what one `claim_work` costs at a head's due time while
//! many more heads are scheduled for later, next to the same claim of an
//! unscheduled head on a store holding none.
//!
//! The fixture spreads `scheduled` heads over one hour of the manual clock,
//! ten per session (event cursors of one consumer). Each iteration of
//! [`ScheduledOp::Due`] moves the clock to the next head's time (untimed),
//! claims across sessions (timed: the head just due is the only claimable
//! one) and completes it (untimed). [`ScheduledOp::Unscheduled`] runs on a
//! fixture with the same sessions and nothing scheduled: each iteration
//! appends one unscheduled head (untimed) and claims it (timed). The
//! contract asks the first to stay within 2x of the second, and flat as the
//! number of scheduled heads grows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{ClaimWorkRequest, ConsumerDeclaration, ManualClock, NewEvent, Store, Target};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use futures::StreamExt;
use tokio::runtime::Runtime;

use super::fixture::{complete, must, open_store, payload, LEASE_MS, START_MS};
use crate::StoreFactory;

/// The consumer every scheduled head targets.
const CONSUMER: &str = "reminder";

/// Scheduled heads per session.
const PER_SESSION: u64 = 10;

/// The span the scheduled heads are spread over, ms.
pub const SCHEDULE_SPAN_MS: i64 = 3_600_000;

/// Store calls the fixture builder keeps in flight at once.
const BUILD_CALLS: usize = 8;

/// What one iteration of [`scheduled_claim`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduledOp {
    /// The claim of the head whose time just came, among `scheduled` heads
    /// spread over the hour.
    Due,
    /// The claim of a head appended unscheduled, on a store with the same
    /// sessions and nothing scheduled.
    Unscheduled,
}

impl ScheduledOp {
    /// The function id of `backend`'s figure: `<backend>-due` or
    /// `<backend>-unscheduled`.
    pub fn function_id(self, backend: &str) -> String {
        match self {
            Self::Due => format!("{backend}-due"),
            Self::Unscheduled => format!("{backend}-unscheduled"),
        }
    }
}

/// A store holding the scheduled heads, and where the next iteration starts.
struct Fixture {
    store: Arc<dyn Store>,
    clock: ManualClock,
    sessions: u64,
    /// The due times still to come, in order, with their sessions.
    due: Vec<(i64, String)>,
    next: usize,
    appended: u64,
}

fn session(n: u64) -> String {
    format!("sched-{n:06}")
}

fn served() -> Vec<ConsumerDeclaration> {
    vec![ConsumerDeclaration::targeted(CONSUMER)]
}

impl Fixture {
    /// `scheduled` heads spread over [`SCHEDULE_SPAN_MS`], ten per session,
    /// head `k` due at `START_MS + 1 + k * span / scheduled` in session
    /// `k % sessions`; with `op` [`ScheduledOp::Unscheduled`], the same
    /// sessions hold one finished unscheduled head each instead.
    async fn build(factory: &dyn StoreFactory, scheduled: u64, op: ScheduledOp) -> Self {
        let clock = ManualClock::new(START_MS);
        let store = open_store(factory, &clock).await;
        let scheduled = scheduled.max(1);
        let sessions = scheduled.div_ceil(PER_SESSION);
        let step = (SCHEDULE_SPAN_MS / i64::try_from(scheduled).unwrap_or(i64::MAX)).max(1);
        let mut due = Vec::new();
        let mut batches: Vec<(String, Vec<NewEvent>)> =
            (0..sessions).map(|n| (session(n), Vec::new())).collect();
        match op {
            ScheduledOp::Due => {
                for k in 0..scheduled {
                    let at = START_MS + 1 + i64::try_from(k).unwrap_or(i64::MAX) * step;
                    let (id, events) = &mut batches[(k % sessions) as usize];
                    events.push(
                        NewEvent::new("remind", payload(k))
                            .with_target(Target::event(CONSUMER).not_before_ms(at)),
                    );
                    due.push((at, id.clone()));
                }
            }
            ScheduledOp::Unscheduled => {
                for (n, (_, events)) in batches.iter_mut().enumerate() {
                    events.push(
                        NewEvent::new("remind", payload(n as u64))
                            .with_target(Target::event(CONSUMER)),
                    );
                }
            }
        }
        let builder = Arc::clone(&store);
        let mut appends = futures::stream::iter(batches.into_iter().map(|(id, events)| {
            let store = Arc::clone(&builder);
            async move {
                must(
                    "append scheduled heads",
                    store.append(&id, events, Default::default()).await,
                );
            }
        }))
        .buffer_unordered(BUILD_CALLS);
        while appends.next().await.is_some() {}
        drop(appends);
        let mut fixture = Self {
            store,
            clock,
            sessions,
            due,
            next: 0,
            appended: 0,
        };
        if op == ScheduledOp::Unscheduled {
            // Finish the one head of each session, so the store holds the
            // sessions and nothing claimable.
            while fixture.claim_and_complete().await.is_some() {}
        }
        fixture
    }

    fn request() -> ClaimWorkRequest {
        ClaimWorkRequest {
            limit: Some(1),
            per_session_limit: Some(1),
            ..ClaimWorkRequest::new("bench", served(), LEASE_MS)
        }
    }

    /// Claims one head across sessions and completes it; the claim's time,
    /// or `None` when nothing was claimable.
    async fn claim_and_complete(&mut self) -> Option<Duration> {
        let started = Instant::now();
        let result = must("claim_work", self.store.claim_work(Self::request()).await);
        let elapsed = started.elapsed();
        let (session, head) = result
            .heads()
            .next()
            .map(|(s, h)| (s.to_owned(), h.clone()))?;
        complete(self.store.as_ref(), &session, &head, None).await;
        Some(elapsed)
    }

    /// Whether the next iteration has a head left to claim.
    fn exhausted(&self, op: ScheduledOp) -> bool {
        op == ScheduledOp::Due && self.next >= self.due.len()
    }

    /// One iteration of `op`: the timed claim.
    async fn iteration(&mut self, op: ScheduledOp) -> Duration {
        match op {
            ScheduledOp::Due => {
                let (at, _) = &self.due[self.next];
                self.next += 1;
                self.clock.set(*at);
            }
            ScheduledOp::Unscheduled => {
                let id = session(self.appended % self.sessions);
                let event = NewEvent::new("remind", payload(self.appended))
                    .with_target(Target::event(CONSUMER));
                self.appended += 1;
                must(
                    "append an unscheduled head",
                    self.store
                        .append(&id, vec![event], Default::default())
                        .await,
                );
            }
        }
        match self.claim_and_complete().await {
            Some(elapsed) => elapsed,
            None => panic!(
                "benchmark expected a claimable head at iteration {}",
                self.next
            ),
        }
    }
}

/// Registers `op` on a fixture of `scheduled` heads (see the module docs);
/// id `(op's function id, scheduled)`, throughput one claim. The fixture is
/// built once per benchmark and rebuilt when its heads run out.
pub fn scheduled_claim(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    scheduled: u64,
    op: ScheduledOp,
) {
    group.throughput(Throughput::Elements(1));
    let id = BenchmarkId::new(op.function_id(factory.name()), scheduled);
    let mut slot: Option<Fixture> = None;
    group.bench_function(id, |b| {
        if slot.is_none() {
            slot = Some(rt.block_on(Fixture::build(factory, scheduled, op)));
        }
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if slot.as_ref().is_none_or(|f| f.exhausted(op)) {
                        slot = Some(Fixture::build(factory, scheduled, op).await);
                    }
                    if let Some(fixture) = slot.as_mut() {
                        total += fixture.iteration(op).await;
                    }
                }
                total
            })
        })
    });
}
