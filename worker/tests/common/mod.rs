//! Scenarios every backend's worker tests run: a store in, assertions out.
#![allow(dead_code)]

pub mod cluster;
pub mod flaky;
pub mod processes;
pub mod proxy;
pub mod watched;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2_store_api::{
    ConsumerDeclaration, Cursor, NewEvent, ReadOptions, Store, StoredEvent, Target,
};
use a2_worker::{handler_fn, HandlerError, Job, RetryPolicy, Worker, WorkerHandle};
use serde_json::json;

pub const CONSUMER: &str = "agent";
pub const DONE: &str = "done";

/// Appends `per_lane` messages on each of `lanes` lanes of each session, in
/// small batches mixing the lanes, and returns how many were appended.
pub async fn produce(
    store: &dyn Store,
    sessions: &[String],
    lanes: usize,
    per_lane: usize,
) -> usize {
    let mut appended = 0;
    for session in sessions {
        for seq in 0..per_lane {
            let batch: Vec<NewEvent> = (0..lanes)
                .map(|lane| {
                    NewEvent::new("msg", json!({"lane": lane, "seq": seq}))
                        .with_target(Target::lane(CONSUMER, format!("L{lane}")))
                })
                .collect();
            appended += batch.len();
            store
                .append(session, batch, Default::default())
                .await
                .expect("append");
        }
    }
    appended
}

/// The whole log of a session.
pub async fn log(store: &dyn Store, session: &str) -> Vec<StoredEvent> {
    store
        .read(session, ReadOptions::default())
        .await
        .expect("read")
}

/// Counts the `done` events stored in `sessions`.
pub async fn done_count(store: &dyn Store, sessions: &[String]) -> usize {
    let mut count = 0;
    for session in sessions {
        count += log(store, session)
            .await
            .iter()
            .filter(|event| event.event_type == DONE)
            .count();
    }
    count
}

/// Polls until `sessions` hold `expected` done events or `limit` passes.
pub async fn wait_for_done(
    store: &dyn Store,
    sessions: &[String],
    expected: usize,
    limit: Duration,
) {
    let start = Instant::now();
    loop {
        let count = done_count(store, sessions).await;
        if count >= expected {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "only {count} of {expected} messages done after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every message processed exactly once (one `done` caused by it), lanes in
/// order (done events of a lane in increasing message index), nothing
/// dead-lettered, no cursor with work left.
pub async fn assert_exactly_once_in_order(
    store: &dyn Store,
    sessions: &[String],
    per_session: usize,
) {
    for session in sessions {
        let rows = log(store, session).await;
        let messages: Vec<&StoredEvent> = rows.iter().filter(|e| e.event_type == "msg").collect();
        assert_eq!(messages.len(), per_session, "session {session}");
        let mut done_by_source: HashMap<u64, usize> = HashMap::new();
        let mut last_by_lane: BTreeMap<String, u64> = BTreeMap::new();
        for event in rows.iter().filter(|e| e.event_type == DONE) {
            let cause = event.cause.as_ref().expect("done events carry their cause");
            *done_by_source.entry(cause.index).or_default() += 1;
            let lane = cause.lane.clone().expect("lane work");
            let last = last_by_lane.entry(lane.clone()).or_default();
            assert!(
                cause.index > *last,
                "session {session} lane {lane}: {} completed after {}",
                cause.index,
                *last
            );
            *last = cause.index;
            assert_eq!(event.payload.as_value()["source"], json!(cause.index));
        }
        for message in &messages {
            assert_eq!(
                done_by_source.get(&message.index).copied().unwrap_or(0),
                1,
                "session {session}: message {} done once",
                message.index
            );
        }
        let dead = store.dead_letters(session).await.expect("dead letters");
        assert!(dead.is_empty(), "session {session} dead-lettered {dead:?}");
        let open: Vec<Cursor> = store
            .cursors(session)
            .await
            .expect("cursors")
            .into_iter()
            .filter(|cursor| cursor.head.is_some())
            .collect();
        assert!(open.is_empty(), "session {session} has work left: {open:?}");
    }
}

/// What the misbehaving handler of [`unruly_worker`] does on attempt 1,
/// chosen by the message's number in its session (`2 × seq + lane`, as
/// [`produce`] writes them; log indexes interleave with `done` events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    None,
    Fail,
    Panic,
    Hang,
}

pub fn trouble(number: u64) -> Trouble {
    match number % 10 {
        3 => Trouble::Fail,
        5 => Trouble::Panic,
        7 => Trouble::Hang,
        _ => Trouble::None,
    }
}

/// Calls made to handlers, by trouble kind, across every worker sharing it.
#[derive(Debug, Default)]
pub struct Calls {
    pub total: AtomicU64,
    pub by_kind: Mutex<HashMap<&'static str, u64>>,
}

/// A worker whose handler answers a `done` event with the message's index,
/// after failing, panicking or hanging (past its lease, until the handler
/// timeout stops it) on the first attempt of some messages.
pub fn unruly_worker(
    store: Arc<dyn Store>,
    holder: &str,
    calls: Arc<Calls>,
    spawn_handlers: bool,
) -> Worker {
    let handler = handler_fn(move |job: Job| {
        let calls = Arc::clone(&calls);
        async move {
            calls.total.fetch_add(1, Ordering::Relaxed);
            let payload = job.event().payload.as_value();
            let number =
                payload["seq"].as_u64().unwrap_or(0) * 2 + payload["lane"].as_u64().unwrap_or(0);
            let kind = if job.attempt() == 1 {
                trouble(number)
            } else {
                Trouble::None
            };
            let name = match kind {
                Trouble::None => "ok",
                Trouble::Fail => "fail",
                Trouble::Panic => "panic",
                Trouble::Hang => "hang",
            };
            *calls.by_kind.lock().unwrap().entry(name).or_default() += 1;
            match kind {
                Trouble::None => {}
                Trouble::Fail => return Err(HandlerError::retryable("first attempts fail")),
                Trouble::Panic => panic!("first attempts panic"),
                Trouble::Hang => tokio::time::sleep(Duration::from_secs(3600)).await,
            }
            Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
        }
    });
    Worker::builder(store)
        .holder(holder)
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        // Hangs outlast the lease (kept renewed) until the timeout stops them.
        // The lease leaves a loaded machine 2 s for each renewal (sent every
        // 2/3 s) to land.
        .lease_ttl(Duration::from_millis(2_000))
        .handler_timeout(Some(Duration::from_millis(2_300)))
        .retry(RetryPolicy::fixed(Duration::from_millis(10), 5))
        .claim_wait(Duration::from_millis(500))
        .max_in_flight(8)
        .spawn_handlers(spawn_handlers)
        .build()
        .expect("worker")
}

pub fn session_ids(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}-{n:03}")).collect()
}

/// Three workers over one store, handlers that fail, panic and hang:
/// every message is done exactly once, in lane order, nothing dead-lettered.
pub async fn three_unruly_workers(store: Arc<dyn Store>, prefix: &str, spawn_handlers: bool) {
    let sessions = session_ids(prefix, 6);
    let calls = Arc::new(Calls::default());
    let workers: Vec<WorkerHandle> = (0..3)
        .map(|n| {
            unruly_worker(
                Arc::clone(&store),
                &format!("{prefix}-w{n}"),
                Arc::clone(&calls),
                spawn_handlers,
            )
            .spawn()
            .expect("spawn")
        })
        .collect();
    let expected = produce(store.as_ref(), &sessions, 2, 10).await;
    wait_for_done(store.as_ref(), &sessions, expected, Duration::from_secs(60)).await;
    let mut total = a2_worker::WorkerStats::default();
    for worker in workers {
        let summary = worker.shutdown().await;
        assert_eq!(summary.error, None);
        let stats = summary.stats;
        total.completed += stats.completed;
        total.failed += stats.failed;
        total.panicked += stats.panicked;
        total.timed_out += stats.timed_out;
        total.dead_lettered += stats.dead_lettered;
        total.released += stats.released;
        total.superseded += stats.superseded;
        assert_eq!(stats.in_flight, 0);
    }
    assert_exactly_once_in_order(store.as_ref(), &sessions, 20).await;
    let troubled = |kind| {
        sessions.len() as u64 * (0..20u64).filter(|number| trouble(*number) == kind).count() as u64
    };
    assert_eq!(total.completed, expected as u64);
    assert_eq!(total.panicked, troubled(Trouble::Panic));
    assert_eq!(total.timed_out, troubled(Trouble::Hang));
    // Every troubled first attempt is recorded as a failure, unless its
    // lease ran out first (a renewal late on a loaded machine): then the
    // store counted the expiry, another attempt ran, and the late failure
    // was superseded, never applied.
    let troubled_attempts =
        troubled(Trouble::Fail) + troubled(Trouble::Panic) + troubled(Trouble::Hang);
    assert!(
        total.failed <= troubled_attempts && total.failed + total.superseded >= troubled_attempts,
        "{troubled_attempts} troubled attempts, but {total:?}"
    );
    assert_eq!(total.dead_lettered, 0);
    assert_eq!(total.released, 0);
}

/// A worker shut down in the middle of slow work gives the unfinished heads
/// back (no dead letter, nothing lost); a second worker finishes them.
pub async fn shutdown_mid_work(store: Arc<dyn Store>, prefix: &str) {
    let sessions = session_ids(prefix, 4);
    let slow = handler_fn(|job: Job| async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
    });
    let first = Worker::builder(Arc::clone(&store))
        .holder(format!("{prefix}-first"))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), slow)
        .max_in_flight(6)
        .shutdown_grace(Duration::from_millis(100))
        // One failure allowed: a release that counted towards dead letters would show.
        .retry(RetryPolicy::fixed(Duration::from_millis(10), 1))
        .build()
        .expect("worker")
        .spawn()
        .expect("spawn");
    let expected = produce(store.as_ref(), &sessions, 2, 5).await;
    let start = Instant::now();
    while first.stats().in_flight == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "nothing started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let summary = first.shutdown().await;
    assert_eq!(summary.error, None);
    assert!(summary.stats.released > 0, "{summary:?}");
    assert_eq!(summary.stats.dead_lettered, 0, "{summary:?}");
    assert_eq!(summary.stats.in_flight, 0);
    for session in &sessions {
        assert!(store.dead_letters(session).await.unwrap().is_empty());
    }
    let quick = handler_fn(|job: Job| async move {
        Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
    });
    let second = Worker::builder(Arc::clone(&store))
        .holder(format!("{prefix}-second"))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), quick)
        .retry(RetryPolicy::fixed(Duration::from_millis(10), 3))
        .build()
        .expect("worker")
        .spawn()
        .expect("spawn");
    wait_for_done(store.as_ref(), &sessions, expected, Duration::from_secs(30)).await;
    let summary = second.shutdown().await;
    assert_eq!(summary.stats.dead_lettered, 0);
    assert_exactly_once_in_order(store.as_ref(), &sessions, 10).await;
}

/// A worker with 16 slots over a backlog (64 messages, 32 lane heads ready
/// at once): its handlers wait until 16 of them run at once, so the work is
/// only done if the worker fills every slot. Its first claim asks for all
/// 16 free slots; its claims never ask, with the heads it holds, for more
/// than its 16 slots; at most one of them waits in the store; and every
/// message is done exactly once, in lane order.
pub async fn backlog_fills_every_slot(store: Arc<dyn Store>, prefix: &str) {
    const SLOTS: usize = 16;
    let sessions = session_ids(prefix, 16);
    let expected = produce(store.as_ref(), &sessions, 2, 2).await;
    let watched = watched::Watched::new(store);
    let running = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let (open, opened) = tokio::sync::watch::channel(false);
    let open = Arc::new(open);
    let handler = {
        let (running, most) = (Arc::clone(&running), Arc::clone(&most));
        handler_fn(move |job: Job| {
            let (running, most, open) =
                (Arc::clone(&running), Arc::clone(&most), Arc::clone(&open));
            let mut opened = opened.clone();
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if now == SLOTS as u64 {
                    open.send_replace(true);
                }
                let _ = opened.wait_for(|open| *open).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
            }
        })
    };
    let worker = Worker::builder(Arc::clone(&watched) as Arc<dyn Store>)
        .holder(format!("{prefix}-w"))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .max_in_flight(SLOTS)
        .build()
        .expect("worker")
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while most.load(Ordering::SeqCst) < SLOTS as u64 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never {SLOTS} handlers at once, at most {}: {:?}",
            most.load(Ordering::SeqCst),
            watched.log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    wait_for_done(
        watched.as_ref(),
        &sessions,
        expected,
        Duration::from_secs(60),
    )
    .await;
    let log = watched.log();
    let summary = worker.shutdown().await;
    assert_eq!(summary.error, None);
    assert_eq!(summary.stats.claimed, expected as u64, "{summary:?}");
    assert_eq!(most.load(Ordering::SeqCst), SLOTS as u64);
    assert_eq!(
        log.asked.first(),
        Some(&SLOTS),
        "the first claim asks for every slot: {log:?}"
    );
    assert!(
        log.most_committed <= SLOTS,
        "claims asked for more than the free slots: {log:?}"
    );
    // A store that claims a batch in one step gets one claim at a time,
    // for every free slot (another one may get several at once).
    if watched.claims_in_one_step() {
        assert_eq!(log.most_in_flight, 1, "claims at once: {log:?}");
    }
    assert!(
        log.most_waiting <= 1,
        "more than one claim waited at once: {log:?}"
    );
    assert!(
        log.most_in_flight <= a2_worker::DEFAULT_CLAIMS_IN_FLIGHT,
        "more claims at once than allowed: {log:?}"
    );
    assert_exactly_once_in_order(watched.as_ref(), &sessions, 4).await;
}
