//! The collections baseline: a `BTreeMap` log with a `HashMap` id index, and
//! a lane as a `VecDeque` of queued indexes with its completion records in a
//! `HashMap` — the least work an in-memory store can do for the same calls.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use a2_conformance::bench::{payload, LEASE_MS, START_MS};
use a2_store_api::{IdGenerator, Payload, RandomIds};
use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup, BenchmarkId, Throughput};

use super::CHUNK;

/// The function id of this baseline in every group.
pub const NAME: &str = "baseline-collections";

/// A stored row.
#[derive(Debug, Clone)]
pub struct Row {
    /// The event id.
    pub id: String,
    /// The event type.
    pub event_type: String,
    /// The payload, shared as the store types share it (a copy of the row
    /// shares it too).
    pub payload: Payload,
    /// Its index.
    pub index: u64,
    /// Creation time, ms.
    pub created_at: i64,
}

/// A session log: rows by index and the id index.
#[derive(Debug, Default)]
pub struct Log {
    rows: BTreeMap<u64, Row>,
    ids: HashMap<String, u64>,
    head: u64,
}

impl Log {
    /// Appends rows with generated ids; returns copies of the stored rows,
    /// as a store's append does.
    pub fn append(&mut self, ids: &dyn IdGenerator, events: Vec<(String, Payload)>) -> Vec<Row> {
        let mut stored = Vec::with_capacity(events.len());
        for (event_type, payload) in events {
            self.head += 1;
            let row = Row {
                id: ids.next_id(),
                event_type,
                payload,
                index: self.head,
                created_at: START_MS,
            };
            self.ids.insert(row.id.clone(), row.index);
            stored.push(row.clone());
            self.rows.insert(row.index, row);
        }
        stored
    }

    /// The row at `index`.
    pub fn get(&self, index: u64) -> Option<&Row> {
        self.rows.get(&index)
    }
}

/// A FIFO lane: queued indexes, the head's dispatch state and completions.
#[derive(Debug, Default)]
pub struct Lane {
    queue: VecDeque<u64>,
    attempt: u32,
    holder: Option<String>,
    expires_at: i64,
    completions: HashMap<u64, u32>,
}

impl Lane {
    /// Queues `index`.
    pub fn push(&mut self, index: u64) {
        self.queue.push_back(index);
    }

    /// Claims the head for `holder` when it is free; returns a copy of its
    /// row and the attempt.
    pub fn claim(&mut self, log: &Log, holder: &str, now: i64) -> Option<(Row, u32)> {
        let index = *self.queue.front()?;
        if self.holder.is_some() && self.expires_at > now {
            return None;
        }
        self.attempt += 1;
        self.holder = Some(holder.to_owned());
        self.expires_at = now + LEASE_MS;
        log.get(index).map(|row| (row.clone(), self.attempt))
    }

    /// Completes the head when `attempt` is current: records the completion
    /// and moves to the next queued index.
    pub fn complete(&mut self, index: u64, attempt: u32) -> bool {
        if self.queue.front() != Some(&index) || self.attempt != attempt {
            return false;
        }
        self.queue.pop_front();
        self.completions.insert(index, attempt);
        self.attempt = 0;
        self.holder = None;
        self.expires_at = 0;
        true
    }
}

/// Rows one baseline log holds before it starts over (as the bodies rotate sessions).
const LOG_ROWS: u64 = 20_000;

/// Appends a batch of `batch` rows per iteration. Id `(baseline-collections, batch)`.
pub fn append(group: &mut BenchmarkGroup<'_, WallTime>, batch: usize) {
    group.throughput(Throughput::Elements(batch as u64));
    let ids = RandomIds;
    let mut log = Log::default();
    let mut seq = 0_u64;
    group.bench_function(BenchmarkId::new(NAME, batch), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if log.head + batch as u64 > LOG_ROWS {
                    log = Log::default();
                }
                let events = (0..batch as u64)
                    .map(|offset| ("msg".to_owned(), payload(seq + offset).into()))
                    .collect::<Vec<_>>();
                seq += batch as u64;
                let start = Instant::now();
                let stored = log.append(&ids, events);
                total += start.elapsed();
                black_box(stored);
            }
            total
        })
    });
}

/// One lane claim + complete per iteration. Id `(baseline-collections, lane)`.
pub fn claim_complete(group: &mut BenchmarkGroup<'_, WallTime>) {
    group.throughput(Throughput::Elements(1));
    let ids = RandomIds;
    let mut log = Log::default();
    let mut lane = Lane::default();
    let mut seq = 0_u64;
    group.bench_function(BenchmarkId::new(NAME, "lane"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if lane.queue.is_empty() {
                    if log.head + CHUNK > LOG_ROWS {
                        log = Log::default();
                        lane = Lane::default();
                    }
                    let events = (0..CHUNK)
                        .map(|offset| ("work".to_owned(), payload(seq + offset).into()))
                        .collect::<Vec<_>>();
                    seq += CHUNK;
                    for row in log.append(&ids, events) {
                        lane.push(row.index);
                    }
                }
                let cycles = left.min(lane.queue.len() as u64);
                let start = Instant::now();
                for _ in 0..cycles {
                    let claimed = lane.claim(&log, "w1", START_MS);
                    let Some((row, attempt)) = black_box(claimed) else {
                        panic!("baseline lane had no claimable head");
                    };
                    assert!(lane.complete(row.index, attempt), "baseline completion");
                }
                total += start.elapsed();
                left -= cycles;
            }
            total
        })
    });
}
