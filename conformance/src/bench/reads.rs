//! Bodies that read the log: a read of 1,000 rows, and the delivery latency
//! of a live subscription.

use std::time::{Duration, Instant};

use a2_store_api::{AppendOptions, EventStream, NewEvent, ReadOptions};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Throughput};
use futures::StreamExt;
use tokio::runtime::Runtime;

use super::fixture::{append_all, must, payload, work_events, BenchSession};
use crate::StoreFactory;

/// Rows returned by one [`read_rows`] call.
const READ_ROWS: usize = 1_000;

/// Per iteration: `read` of 1,000 rows (`limit` 1,000) from a session of
/// 2,000; throughput counts rows. Id `(backend)`.
pub fn read_rows(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
) {
    group.throughput(Throughput::Elements(READ_ROWS as u64));
    let mut state: Option<BenchSession<'_>> = None;
    group.bench_function(factory.name(), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let bench = match &mut state {
                    Some(bench) => bench,
                    None => {
                        let bench = BenchSession::open(factory, "read").await;
                        let events = work_events("msg", READ_ROWS * 2, 0, &[]);
                        append_all(bench.store.as_ref(), bench.session(), events, None).await;
                        state.insert(bench)
                    }
                };
                let options = ReadOptions {
                    after: Some(100),
                    through: None,
                    limit: Some(READ_ROWS),
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let result = bench.store.read(bench.session(), options).await;
                    total += start.elapsed();
                    let rows = must("read", result);
                    assert_eq!(rows.len(), READ_ROWS, "rows read");
                }
                total
            })
        })
    });
}

/// A session with a live subscription from its current head.
struct Subscribed<'f> {
    bench: BenchSession<'f>,
    stream: Option<EventStream>,
    seq: u64,
}

/// Per iteration: append one event and wait until the session's live
/// subscriber receives it; the time runs from the call to `append` to the
/// delivery. Id `(backend)`.
pub fn subscribe_latency(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
) {
    group.throughput(Throughput::Elements(1));
    let mut state: Option<Subscribed<'_>> = None;
    group.bench_function(factory.name(), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let sub = match &mut state {
                    Some(sub) => sub,
                    None => state.insert(Subscribed {
                        bench: BenchSession::open(factory, "subscribe").await,
                        stream: None,
                        seq: 0,
                    }),
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let fresh = sub.bench.room(1).await;
                    let stream = match (&mut sub.stream, fresh) {
                        (Some(stream), false) => stream,
                        _ => {
                            let stream = must(
                                "subscribe",
                                sub.bench.store.subscribe(sub.bench.session(), 0).await,
                            );
                            sub.stream.insert(stream)
                        }
                    };
                    let event = NewEvent::new("msg", payload(sub.seq));
                    sub.seq += 1;
                    let start = Instant::now();
                    let appended = sub
                        .bench
                        .store
                        .append(sub.bench.session(), vec![event], AppendOptions::default())
                        .await;
                    let delivered = stream.next().await;
                    total += start.elapsed();
                    let appended = must("append", appended);
                    let delivered = match delivered {
                        Some(item) => must("subscription item", item),
                        None => panic!("subscription ended before delivering the append"),
                    };
                    assert_eq!(
                        Some(delivered.index),
                        appended.events.first().map(|event| event.index),
                        "delivered index"
                    );
                }
                total
            })
        })
    });
}
