//! Bodies that dispatch work: claim + complete cycles for each cursor kind,
//! claim + fail + reclaim after the retry delay, and renewal of 100 claims.

use std::time::{Duration, Instant};

use a2_store_api::{
    ConsumerDeclaration, FailOutcome, FailRequest, HeldClaim, NewEvent, RenewRequest, Store, Target,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use tokio::runtime::Runtime;

use super::fixture::{
    append_all, claim_all, claim_one, complete, must, payload, work_events, BenchSession, LEASE_MS,
};
use crate::StoreFactory;

/// Cycles prepared per untimed append in the dispatch bodies.
const CHUNK: u64 = 100;

/// The cursor kind a claim + complete cycle works through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorKindBench {
    /// Each event targets `(notifier, no lane)`; a claim takes the lowest.
    Event,
    /// Every event targets `(agent, L1)`: one FIFO lane.
    Lane,
    /// A log consumer `audit` on lane `log` taking only `work` events, in a
    /// log where every other row is a `note` it skips.
    Log,
}

impl CursorKindBench {
    /// The benchmark parameter naming the kind.
    pub fn label(self) -> &'static str {
        match self {
            Self::Event => "event",
            Self::Lane => "lane",
            Self::Log => "log",
        }
    }

    /// The declarations passed with appends, claims and completions.
    pub(crate) fn consumers(self) -> Option<Vec<ConsumerDeclaration>> {
        match self {
            Self::Log => Some(vec![ConsumerDeclaration::log(
                "audit",
                "log",
                Some(vec!["work".to_owned()]),
                false,
            )]),
            Self::Event | Self::Lane => None,
        }
    }

    /// Rows appended to prepare `cycles` claimable heads.
    pub(crate) fn rows_for(self, cycles: u64) -> u64 {
        match self {
            Self::Log => cycles * 2,
            Self::Event | Self::Lane => cycles,
        }
    }

    /// The events that give `cycles` claimable heads of this kind.
    pub(crate) fn events(self, cycles: u64, first_seq: u64) -> Vec<NewEvent> {
        let count = cycles as usize;
        match self {
            Self::Event => work_events("work", count, first_seq, &[Target::event("notifier")]),
            Self::Lane => work_events("work", count, first_seq, &[Target::lane("agent", "L1")]),
            Self::Log => (0..cycles)
                .flat_map(|offset| {
                    let seq = first_seq + offset;
                    [
                        NewEvent::new("work", payload(seq)),
                        NewEvent::new("note", payload(seq)),
                    ]
                })
                .collect(),
        }
    }
}

/// Heads prepared in a session and not yet claimed.
struct Prepared<'f> {
    bench: BenchSession<'f>,
    ready: u64,
    seq: u64,
}

impl Prepared<'_> {
    /// Makes at least one head claimable, appending a chunk when none is left.
    async fn ensure_ready(&mut self, kind: CursorKindBench) {
        if self.ready > 0 {
            return;
        }
        self.bench.room(kind.rows_for(CHUNK)).await;
        let consumers = kind.consumers();
        let events = kind.events(CHUNK, self.seq);
        self.seq += CHUNK;
        append_all(
            self.bench.store.as_ref(),
            self.bench.session(),
            events,
            consumers.as_deref(),
        )
        .await;
        self.ready = CHUNK;
    }
}

/// One claim (limit 1) + complete (no returned events) per iteration, on
/// heads of `kind` prepared untimed in chunks of 100. Id `(backend, kind)`.
pub fn claim_complete(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    kind: CursorKindBench,
) {
    group.throughput(Throughput::Elements(1));
    let consumers = kind.consumers();
    let mut state: Option<Prepared<'_>> = None;
    group.bench_function(BenchmarkId::new(factory.name(), kind.label()), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let prepared = match &mut state {
                    Some(prepared) => prepared,
                    None => state.insert(Prepared {
                        bench: BenchSession::open(factory, "claim").await,
                        ready: 0,
                        seq: 0,
                    }),
                };
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    prepared.ensure_ready(kind).await;
                    let cycles = left.min(prepared.ready);
                    let store: &dyn Store = prepared.bench.store.as_ref();
                    let session = prepared.bench.session();
                    let start = Instant::now();
                    for _ in 0..cycles {
                        let head = claim_one(store, session, "w1", consumers.as_deref()).await;
                        complete(store, session, &head, consumers.as_deref()).await;
                    }
                    total += start.elapsed();
                    prepared.ready -= cycles;
                    left -= cycles;
                }
                total
            })
        })
    });
}

/// The retry delay of [`claim_fail_reclaim`], ms.
const RETRY_MS: i64 = 1_000;

/// Per iteration on a lane head: claim, fail with a 1 s retry delay, move the
/// manual clock past it, claim again (attempt 2) and complete. Id `(backend)`.
pub fn claim_fail_reclaim(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
) {
    group.throughput(Throughput::Elements(1));
    let kind = CursorKindBench::Lane;
    let mut state: Option<Prepared<'_>> = None;
    group.bench_function(factory.name(), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let prepared = match &mut state {
                    Some(prepared) => prepared,
                    None => state.insert(Prepared {
                        bench: BenchSession::open(factory, "retry").await,
                        ready: 0,
                        seq: 0,
                    }),
                };
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    prepared.ensure_ready(kind).await;
                    let cycles = left.min(prepared.ready);
                    let store: &dyn Store = prepared.bench.store.as_ref();
                    let session = prepared.bench.session();
                    let clock = &prepared.bench.clock;
                    let start = Instant::now();
                    for _ in 0..cycles {
                        let head = claim_one(store, session, "w1", None).await;
                        let failed = must(
                            "fail_attempt",
                            store
                                .fail_attempt(FailRequest {
                                    incarnation: None,
                                    session_id: session.to_owned(),
                                    consumer: head.consumer.clone(),
                                    lane: head.lane.clone(),
                                    index: head.event.index,
                                    attempt: head.dispatch.attempt_count,
                                    error: "bench failure".to_owned(),
                                    max_failures: None,
                                    retry_after_ms: Some(RETRY_MS),
                                })
                                .await,
                        );
                        assert_eq!(failed.outcome, FailOutcome::Failed, "fail_attempt outcome");
                        clock.advance(RETRY_MS);
                        let retry = claim_one(store, session, "w1", None).await;
                        assert_eq!(retry.event.index, head.event.index, "reclaimed head");
                        complete(store, session, &retry, None).await;
                    }
                    total += start.elapsed();
                    prepared.ready -= cycles;
                    left -= cycles;
                }
                total
            })
        })
    });
}

/// Claims renewed together by [`renew_claims`].
const RENEWED: usize = 100;

/// Per iteration: one `renew_claims` of 100 held event-cursor claims;
/// throughput counts claims. Id `(backend)`.
pub fn renew_claims(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
) {
    group.throughput(Throughput::Elements(RENEWED as u64));
    let mut state: Option<(BenchSession<'_>, Vec<HeldClaim>)> = None;
    group.bench_function(factory.name(), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (bench, claims) = match &mut state {
                    Some(state) => state,
                    None => {
                        let bench = BenchSession::open(factory, "renew").await;
                        let session = bench.session().to_owned();
                        let store = bench.store.as_ref();
                        let events = work_events("work", RENEWED, 0, &[Target::event("worker")]);
                        append_all(store, &session, events, None).await;
                        let claims = claim_all(store, &session, "w1")
                            .await
                            .into_iter()
                            .map(|head| HeldClaim {
                                cursor: head.cursor_ref(),
                                attempt: head.dispatch.attempt_count,
                            })
                            .collect::<Vec<_>>();
                        assert_eq!(claims.len(), RENEWED, "claims to renew");
                        state.insert((bench, claims))
                    }
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let request = RenewRequest {
                        incarnation: None,
                        session_id: bench.session().to_owned(),
                        holder: "w1".to_owned(),
                        claims: claims.clone(),
                        ttl_ms: Some(LEASE_MS),
                        expires_at_ms: None,
                    };
                    let start = Instant::now();
                    let result = bench.store.renew_claims(request).await;
                    total += start.elapsed();
                    let renewed = must("renew_claims", result);
                    assert_eq!(renewed.renewed.len(), RENEWED, "renewed claims");
                }
                total
            })
        })
    });
}
