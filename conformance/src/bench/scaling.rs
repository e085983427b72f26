//! The scaling series: the cost of one operation on sessions pre-filled with
//! more and more events, in-flight event cursors or finished event cursors.
//! A backend meets the contract when each figure stays flat (within 2x) as
//! the session grows.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, ManualClock, NewEvent, Store, Target,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use tokio::runtime::Runtime;

use super::dispatch::CursorKindBench;
use super::fixture::{
    append_all, claim_one, complete, must, open_store, payload, work_events, LEASE_MS, START_MS,
};
use crate::StoreFactory;

/// Events appended per call while pre-filling a session.
const PREFILL_BATCH: usize = 10_000;

/// Cycles prepared per untimed append in the claim operations.
const CHUNK: u64 = 100;

/// Untimed operations run on a freshly built fixture before any is timed.
const SETTLE_OPS: u64 = 200;

/// The least number of rows a fixture may grow by before it is rebuilt.
const MIN_GROWTH: u64 = 2_000;

/// What the measured session holds before the operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalingShape {
    /// This many untargeted `history` events.
    Events(u64),
    /// This many event cursors claimed by another holder whose lease never
    /// expires (work in flight that every claim must step over).
    InFlight(u64),
    /// This many event cursors claimed and completed (finished work, which
    /// must cost later calls nothing).
    Finished(u64),
}

impl ScalingShape {
    /// The count the shape is built with (the benchmark parameter).
    pub fn size(self) -> u64 {
        match self {
            Self::Events(n) | Self::InFlight(n) | Self::Finished(n) => n,
        }
    }

    /// The family name, for group names: `events`, `inflight` or `finished`.
    pub fn family(self) -> &'static str {
        match self {
            Self::Events(_) => "events",
            Self::InFlight(_) => "inflight",
            Self::Finished(_) => "finished",
        }
    }
}

/// The operation measured on a scaling fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalingOp {
    /// Append one untargeted event.
    Append,
    /// An empty append, which only computes `has_pending` (every cursor served).
    HasPending,
    /// One claim (limit 1, every cursor served) + complete of a head of this kind.
    ClaimComplete(CursorKindBench),
}

impl ScalingOp {
    /// The operation's name, for group names.
    pub fn label(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::HasPending => "has_pending",
            Self::ClaimComplete(CursorKindBench::Event) => "claim_complete_event",
            Self::ClaimComplete(CursorKindBench::Lane) => "claim_complete_lane",
            Self::ClaimComplete(CursorKindBench::Log) => "claim_complete_log",
        }
    }
}

/// One pre-filled session, grown by the operations measured on it and
/// rebuilt once it has grown by its own size (at least 2,000 rows).
struct Fixture {
    shape: ScalingShape,
    store: Arc<dyn Store>,
    added: u64,
    ready: u64,
    last_op: Option<ScalingOp>,
    seq: u64,
}

/// The session every fixture measures.
const SESSION: &str = "scaling";

impl Fixture {
    async fn build(factory: &dyn StoreFactory, shape: ScalingShape) -> Self {
        let clock = ManualClock::new(START_MS);
        let store = open_store(factory, &clock).await;
        let size = shape.size();
        let mut seq = 0_u64;
        while seq < size {
            let count = (size - seq).min(PREFILL_BATCH as u64) as usize;
            let events = match shape {
                ScalingShape::Events(_) => work_events("history", count, seq, &[]),
                ScalingShape::InFlight(_) | ScalingShape::Finished(_) => {
                    work_events("history", count, seq, &[Target::event("notifier")])
                }
            };
            let options = AppendOptions::default();
            must(
                "prefill append",
                store.append(SESSION, events, options).await,
            );
            seq += count as u64;
        }
        match shape {
            ScalingShape::Events(_) => {}
            ScalingShape::InFlight(_) => {
                claim_batches(store.as_ref(), "other", false).await;
            }
            ScalingShape::Finished(_) => {
                claim_batches(store.as_ref(), "other", true).await;
            }
        }
        Self {
            shape,
            store,
            added: 0,
            ready: 0,
            last_op: None,
            seq,
        }
    }

    /// Makes room for `rows` more rows, rebuilding the fixture when it would
    /// grow past its budget.
    async fn room(&mut self, factory: &dyn StoreFactory, rows: u64) {
        let budget = self.shape.size().max(MIN_GROWTH);
        if self.added + rows > budget {
            *self = Self::build(factory, self.shape).await;
        }
        self.added += rows;
    }

    /// Completes every claimable head another operation left behind, so the
    /// next operation's claims take only its own heads.
    async fn switch_to(&mut self, op: ScalingOp) {
        if self.last_op != Some(op) {
            claim_batches(self.store.as_ref(), "drain", true).await;
            self.ready = 0;
            self.last_op = Some(op);
        }
    }

    /// Runs `iters` operations and returns the time they took.
    async fn run(&mut self, factory: &dyn StoreFactory, op: ScalingOp, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        match op {
            ScalingOp::Append => {
                for _ in 0..iters {
                    self.room(factory, 1).await;
                    let event = NewEvent::new("history", payload(self.seq));
                    self.seq += 1;
                    let start = Instant::now();
                    let result = self
                        .store
                        .append(SESSION, vec![event], AppendOptions::default())
                        .await;
                    total += start.elapsed();
                    must("append", result);
                }
            }
            ScalingOp::HasPending => {
                for _ in 0..iters {
                    let start = Instant::now();
                    let result = self
                        .store
                        .append(SESSION, Vec::new(), AppendOptions::default())
                        .await;
                    total += start.elapsed();
                    must("empty append", result);
                }
            }
            ScalingOp::ClaimComplete(kind) => {
                self.switch_to(op).await;
                let mut left = iters;
                while left > 0 {
                    if self.ready == 0 {
                        self.room(factory, kind.rows_for(CHUNK)).await;
                        self.switch_to(op).await;
                        let events = kind.events(CHUNK, self.seq);
                        self.seq += CHUNK;
                        let consumers = kind.consumers();
                        append_all(self.store.as_ref(), SESSION, events, consumers.as_deref())
                            .await;
                        self.ready = CHUNK;
                    }
                    let cycles = left.min(self.ready);
                    let store = self.store.as_ref();
                    let start = Instant::now();
                    for _ in 0..cycles {
                        let head = claim_one(store, SESSION, "w1", None).await;
                        complete(store, SESSION, &head, None).await;
                    }
                    total += start.elapsed();
                    self.ready -= cycles;
                    left -= cycles;
                }
            }
        }
        total
    }
}

/// Claims every claimable head of the session in batches of 10,000 for
/// `holder`, completing each when `finish` (until nothing is claimable).
async fn claim_batches(store: &dyn Store, holder: &str, finish: bool) {
    loop {
        let request = ClaimRequest {
            session_id: SESSION.to_owned(),
            holder: holder.to_owned(),
            ttl_ms: Some(LEASE_MS),
            limit: Some(PREFILL_BATCH),
            ..ClaimRequest::default()
        };
        let heads = match must("claim_available", store.claim_available(request).await) {
            ClaimResult::Claimed { heads, .. } => heads,
            _ => return,
        };
        if heads.is_empty() {
            return;
        }
        if finish {
            for head in &heads {
                complete(store, SESSION, head, None).await;
            }
        }
    }
}

/// The scaling series of one backend: builds each fixture once (lazily, the
/// first time a benchmark of its shape runs) and keeps it for every
/// operation measured on that shape, until [`release`](Self::release).
pub struct ScalingSeries<'f> {
    factory: &'f dyn StoreFactory,
    fixtures: HashMap<ScalingShape, Fixture>,
}

impl<'f> ScalingSeries<'f> {
    /// A series of `factory`'s backend with no fixture built yet.
    pub fn new(factory: &'f dyn StoreFactory) -> Self {
        Self {
            factory,
            fixtures: HashMap::new(),
        }
    }

    /// Registers `op` on a session of `shape`; throughput counts operations.
    /// Id `(backend, shape size)`.
    pub fn bench(
        &mut self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        rt: &Runtime,
        shape: ScalingShape,
        op: ScalingOp,
    ) {
        let factory = self.factory;
        let fixtures = &mut self.fixtures;
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(factory.name(), shape.size()), |b| {
            // Build outside `iter_custom`: criterion's warm-up sizes the
            // measurement by the wall time of those calls, so a build inside
            // one would leave a single iteration per sample.
            let fixture = match fixtures.entry(shape) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => entry.insert(rt.block_on(async {
                    // The first calls after a big build are not
                    // representative: settle the fixture untimed.
                    let mut fixture = Fixture::build(factory, shape).await;
                    fixture.run(factory, op, SETTLE_OPS).await;
                    fixture
                })),
            };
            b.iter_custom(|iters| rt.block_on(fixture.run(factory, op, iters)))
        });
    }

    /// Drops every fixture built so far (frees their memory and files).
    pub fn release(&mut self) {
        self.fixtures.clear();
    }
}
