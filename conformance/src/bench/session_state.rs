//! Bodies of the per-session side state: reducer snapshots with pins, and
//! presence fields.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use a2_store_api::{CursorRef, PresenceMeta, ReadStateOptions, StateWrite, Target};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Throughput};
use serde_json::json;
use tokio::runtime::Runtime;

use super::fixture::{
    append_all, claim_one, must, payload, work_events, BenchSession, LEASE_MS, START_MS,
};
use crate::StoreFactory;

/// Per iteration: `write_state` of one ~200-byte snapshot pinned by a held
/// lane head, then `read_state` of it. Id `(backend)`.
pub fn state_with_pins(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
) {
    group.throughput(Throughput::Elements(1));
    let mut state: Option<(BenchSession<'_>, CursorRef)> = None;
    let mut seq = 0_u64;
    group.bench_function(factory.name(), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (bench, pin) = match &mut state {
                    Some(state) => state,
                    None => {
                        let bench = BenchSession::open(factory, "state").await;
                        let store = bench.store.as_ref();
                        let events = work_events("msg", 10, 0, &[Target::lane("agent", "L1")]);
                        append_all(store, bench.session(), events, None).await;
                        let head = claim_one(store, bench.session(), "w1", None).await;
                        let pin = head.cursor_ref();
                        state.insert((bench, pin))
                    }
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let write = StateWrite {
                        index: pin.index,
                        state: payload(seq),
                        pins: vec![pin.clone()],
                    };
                    seq += 1;
                    let session = bench.session();
                    let start = Instant::now();
                    let written = bench
                        .store
                        .write_state(session, "reducer", vec![write])
                        .await;
                    let read = bench
                        .store
                        .read_state(
                            session,
                            "reducer",
                            ReadStateOptions {
                                at: Some(pin.index),
                            },
                        )
                        .await;
                    total += start.elapsed();
                    must("write_state", written);
                    let read = must("read_state", read);
                    assert_eq!(
                        read.snapshot.map(|snapshot| snapshot.index),
                        Some(pin.index),
                        "snapshot read back"
                    );
                }
                total
            })
        })
    });
}

/// Participants whose presence [`presence`] writes in turn.
const PARTICIPANTS: u64 = 8;

/// Per iteration: `set_presence` of two fields for one of 8 participants,
/// then `read_presence` of the session (16 live rows). Id `(backend)`.
pub fn presence(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    factory: &dyn StoreFactory,
) {
    group.throughput(Throughput::Elements(1));
    let mut state: Option<BenchSession<'_>> = None;
    let mut seq = 0_u64;
    group.bench_function(factory.name(), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let bench = match &mut state {
                    Some(bench) => bench,
                    None => state.insert(BenchSession::open(factory, "presence").await),
                };
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let participant = format!("participant-{}", seq % PARTICIPANTS);
                    let values = BTreeMap::from([
                        ("status".to_owned(), json!("typing")),
                        ("cursor".to_owned(), json!({"line": seq, "column": 4})),
                    ]);
                    let meta = PresenceMeta {
                        at: START_MS + seq as i64,
                        seen: Some(seq),
                        ttl_ms: LEASE_MS,
                    };
                    seq += 1;
                    let session = bench.session();
                    let start = Instant::now();
                    let written = bench
                        .store
                        .set_presence(session, &participant, values, meta)
                        .await;
                    let rows = bench.store.read_presence(session).await;
                    total += start.elapsed();
                    let written = must("set_presence", written);
                    assert_eq!(written.applied_count, 2, "presence fields applied");
                    let rows = must("read_presence", rows);
                    assert!(!rows.is_empty(), "presence rows read back");
                }
                total
            })
        })
    });
}
