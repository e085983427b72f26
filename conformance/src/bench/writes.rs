//! Bodies that write rows: append batches, append with targets, and clear +
//! reclaim of a 10,000-row session.

use std::time::{Duration, Instant};

use a2_store_api::{AppendOptions, ClearRequest, ClearResult, Target};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use tokio::runtime::Runtime;

use super::fixture::{append_all, must, work_events, BenchSession};
use crate::StoreFactory;

/// Appends one batch of `batch` events (~200-byte payloads, no targets) per
/// iteration; throughput counts events. Id `(backend, batch)`.
pub fn append_batch(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    batch: usize,
) {
    group.throughput(Throughput::Elements(batch as u64));
    let mut state: Option<BenchSession<'_>> = None;
    let mut seq = 0_u64;
    group.bench_function(BenchmarkId::new(factory.name(), batch), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let bench = match &mut state {
                    Some(bench) => bench,
                    None => state.insert(BenchSession::open(factory, "append").await),
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    bench.room(batch as u64).await;
                    let events = work_events("msg", batch, seq, &[]);
                    seq += batch as u64;
                    let start = Instant::now();
                    let result = bench
                        .store
                        .append(bench.session(), events, AppendOptions::default())
                        .await;
                    total += start.elapsed();
                    must("append", result);
                }
                total
            })
        })
    });
}

/// Which cursor the targets of [`append_with_targets`] create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// Each event targets `(notifier, no lane)`: one event cursor per event.
    Event,
    /// Each event targets `(agent, L1)`: all queued on one lane cursor.
    Lane,
}

impl TargetKind {
    /// The benchmark parameter naming the kind.
    pub fn label(self) -> &'static str {
        match self {
            Self::Event => "event",
            Self::Lane => "lane",
        }
    }

    fn target(self) -> Target {
        match self {
            Self::Event => Target::event("notifier"),
            Self::Lane => Target::lane("agent", "L1"),
        }
    }
}

/// Appends a batch of 10 targeted events per iteration (nothing claims them;
/// sessions move on every 2,000 rows so open cursors stay few); throughput
/// counts events. Id `(backend, kind)`.
pub fn append_with_targets(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
    kind: TargetKind,
) {
    const BATCH: usize = 10;
    group.throughput(Throughput::Elements(BATCH as u64));
    let targets = [kind.target()];
    let mut state: Option<BenchSession<'_>> = None;
    let mut seq = 0_u64;
    group.bench_function(BenchmarkId::new(factory.name(), kind.label()), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let bench = match &mut state {
                    Some(bench) => bench,
                    None => state.insert(
                        BenchSession::open(factory, "targets")
                            .await
                            .with_session_limit(2_000),
                    ),
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    bench.room(BATCH as u64).await;
                    let events = work_events("msg", BATCH, seq, &targets);
                    seq += BATCH as u64;
                    let start = Instant::now();
                    let result = bench
                        .store
                        .append(bench.session(), events, AppendOptions::default())
                        .await;
                    total += start.elapsed();
                    must("append with targets", result);
                }
                total
            })
        })
    });
}

/// Rows a session holds before [`clear_reclaim`] clears it.
const RECLAIM_ROWS: usize = 10_000;

/// Per iteration: a fresh session of 10,000 rows is filled (untimed), then
/// cleared and reclaimed until `done` (timed); throughput counts rows.
/// Id `(backend)`.
pub fn clear_reclaim(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
) {
    group.throughput(Throughput::Elements(RECLAIM_ROWS as u64));
    let mut state: Option<BenchSession<'_>> = None;
    let mut seq = 0_u64;
    group.bench_function(factory.name(), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let bench = match &mut state {
                    Some(bench) => bench,
                    None => state.insert(
                        BenchSession::open(factory, "reclaim")
                            .await
                            .with_session_limit(RECLAIM_ROWS as u64 + 1),
                    ),
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    bench.room(RECLAIM_ROWS as u64 + 1).await;
                    let session = bench.session().to_owned();
                    let events = work_events("msg", RECLAIM_ROWS, seq, &[]);
                    seq += RECLAIM_ROWS as u64;
                    append_all(bench.store.as_ref(), &session, events, None).await;
                    let start = Instant::now();
                    let cleared = must(
                        "clear",
                        bench
                            .store
                            .clear(ClearRequest {
                                session_id: session.clone(),
                                ..ClearRequest::default()
                            })
                            .await,
                    );
                    let mut reclaimed = 0_u64;
                    loop {
                        let step = must("reclaim", bench.store.reclaim(&session).await);
                        reclaimed += step.reclaimed;
                        if step.done {
                            break;
                        }
                    }
                    total += start.elapsed();
                    assert!(
                        matches!(cleared, ClearResult::Cleared { .. }),
                        "clear of '{session}' did not clear: {cleared:?}"
                    );
                    assert_eq!(
                        reclaimed, RECLAIM_ROWS as u64,
                        "reclaim of '{session}' deleted {reclaimed} rows"
                    );
                }
                total
            })
        })
    });
}
