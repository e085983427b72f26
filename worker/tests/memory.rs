//! The worker on the memory backend: the shared scenarios, each policy on a
//! manual clock, lost leases, replays after lost commits, bounds and options.

mod common;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    ClaimWorkRequest, ClaimWorkResult, CompleteRequest, CompleteResult, ConsumerDeclaration,
    Cursor, ErrorCode, ManualClock, NewEvent, Store, Target,
};
use a2_store_memory::{MemoryOptions, MemoryStore};
use a2_worker::{handler_fn, Backoff, HandlerError, Job, RetryPolicy, Worker, WorkerHandle};
use common::flaky::LostAtCommit;
use common::{CONSUMER, DONE};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

fn manual(start: i64) -> (Arc<dyn Store>, ManualClock) {
    let clock = ManualClock::new(start);
    let store = MemoryStore::with_options(MemoryOptions {
        clock: Arc::new(clock.clone()),
        ..MemoryOptions::default()
    });
    (Arc::new(store), clock)
}

async fn message(store: &dyn Store, session: &str, lane: &str) {
    store
        .append(
            session,
            vec![NewEvent::new("msg", json!({})).with_target(Target::lane(CONSUMER, lane))],
            Default::default(),
        )
        .await
        .unwrap();
}

/// The lane cursor of `lane`.
async fn cursor(store: &dyn Store, session: &str, lane: &str) -> Cursor {
    store
        .cursors(session)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.lane.as_deref() == Some(lane))
        .expect("lane cursor")
}

/// Polls `check` until it holds (10 s at most).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_with_failing_panicking_and_hanging_handlers_do_everything_once_in_order() {
    common::three_unruly_workers(memory(), "unruly", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_with_attempts_run_in_the_workers_task() {
    common::three_unruly_workers(memory(), "in-task", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_in_the_middle_of_work_loses_nothing_and_dead_letters_nothing() {
    common::shutdown_mid_work(memory(), "stop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_within_the_grace_period_lets_handlers_finish() {
    let store = memory();
    let (started, mut starts) = mpsc::unbounded_channel();
    let handler = handler_fn(move |job: Job| {
        let started = started.clone();
        async move {
            let _ = started.send(());
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
        }
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .shutdown_grace(Duration::from_secs(10))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    starts.recv().await.unwrap();
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.completed, 1);
    assert_eq!(summary.stats.released, 0);
    assert_eq!(common::done_count(store.as_ref(), &["s".into()]).await, 1);
}

fn failing_worker(
    store: &Arc<dyn Store>,
    policy: RetryPolicy,
    calls: Arc<AtomicU32>,
) -> WorkerHandle {
    let handler = handler_fn(move |_job: Job| {
        let calls = Arc::clone(&calls);
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<Vec<NewEvent>, _>(HandlerError::retryable("model unavailable"))
        }
    });
    Worker::builder(Arc::clone(store))
        .holder("policy")
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .retry(policy)
        .build()
        .unwrap()
        .spawn()
        .unwrap()
}

/// Runs a handler that always fails under `policy` on a manual clock and
/// returns the retry delays the store recorded, one per failure, until the
/// head is dead-lettered.
async fn recorded_delays(policy: RetryPolicy) -> (Vec<i64>, Cursor) {
    let (store, clock) = manual(1_000_000);
    let calls = Arc::new(AtomicU32::new(0));
    let worker = failing_worker(&store, policy, Arc::clone(&calls));
    message(store.as_ref(), "s", "L").await;
    let mut delays = Vec::new();
    loop {
        let failures = delays.len() as u32 + 1;
        let start = Instant::now();
        let cursor = loop {
            let cursor = cursor(store.as_ref(), "s", "L").await;
            if cursor.dispatch.failure_count == failures && cursor.dispatch.claim_holder.is_none() {
                break cursor;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "failure {failures} never recorded"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        if cursor.dispatch.failed_at.is_some() {
            let summary = worker.shutdown().await;
            assert_eq!(summary.stats.dead_lettered, 1);
            assert_eq!(calls.load(Ordering::SeqCst), failures);
            return (delays, cursor);
        }
        let now = clock.now_ms_value();
        let until = cursor.dispatch.claim_expires_at.expect("retry delay");
        delays.push(until - now);
        // Nothing runs before the delay ends.
        clock.set(until - 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(calls.load(Ordering::SeqCst), failures);
        clock.set(until);
    }
}

trait NowValue {
    fn now_ms_value(&self) -> i64;
}

impl NowValue for ManualClock {
    fn now_ms_value(&self) -> i64 {
        a2_store_api::Clock::now_ms(self)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_policy_waits_the_same_delay_and_dead_letters_at_max_failures() {
    let (delays, cursor) = recorded_delays(RetryPolicy::fixed(Duration::from_secs(5), 4)).await;
    assert_eq!(delays, [5_000, 5_000, 5_000]);
    assert_eq!(cursor.dispatch.failure_count, 4);
    assert_eq!(
        cursor.dispatch.last_error.as_deref(),
        Some("model unavailable")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_policy_doubles_to_its_cap() {
    let policy = RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(5), 6)
        .with_jitter(0.0);
    let (delays, cursor) = recorded_delays(policy).await;
    assert_eq!(delays, [1_000, 2_000, 4_000, 5_000, 5_000]);
    assert_eq!(cursor.dispatch.failure_count, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_jitter_stays_between_half_and_all_of_the_delay() {
    let policy = RetryPolicy {
        backoff: Backoff::exponential(Duration::from_secs(4), Duration::from_secs(60)),
        max_failures: 4,
    };
    let (delays, _) = recorded_delays(policy).await;
    for (n, delay) in delays.iter().enumerate() {
        let base = 4_000 << n;
        assert!(
            *delay >= base / 2 && *delay <= base,
            "failure {}: {delay}",
            n + 1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_dead_letters_at_once_with_its_text() {
    let (store, _clock) = manual(1_000);
    let handler = handler_fn(|_job: Job| async move {
        Err::<Vec<NewEvent>, _>(HandlerError::permanent("malformed message"))
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    eventually("dead-lettered", || {
        let store = Arc::clone(&store);
        async move { !store.dead_letters("s").await.unwrap().is_empty() }
    })
    .await;
    let dead = store.dead_letters("s").await.unwrap();
    assert_eq!(dead[0].dispatch.failure_count, 1);
    assert_eq!(
        dead[0].dispatch.last_error.as_deref(),
        Some("malformed message")
    );
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.dead_lettered, 1);
    assert_eq!(summary.stats.failed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_delay_overrides_the_policy() {
    let (store, clock) = manual(10_000);
    let handler = handler_fn(|job: Job| async move {
        if job.attempt() == 1 {
            return Err(HandlerError::retry_after(
                "rate limited",
                Duration::from_millis(1234),
            ));
        }
        Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .retry(RetryPolicy::fixed(Duration::from_secs(60), 3))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    eventually("failed once", || {
        let store = Arc::clone(&store);
        async move {
            cursor(store.as_ref(), "s", "L")
                .await
                .dispatch
                .failure_count
                == 1
        }
    })
    .await;
    let cursor = cursor(store.as_ref(), "s", "L").await;
    assert_eq!(cursor.dispatch.claim_expires_at, Some(10_000 + 1234));
    clock.set(10_000 + 1234);
    common::wait_for_done(store.as_ref(), &["s".into()], 1, Duration::from_secs(10)).await;
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_a_failed_attempt_and_the_worker_goes_on() {
    let store = memory();
    let handler = handler_fn(|job: Job| async move {
        if job.attempt() == 1 {
            panic!("boom at {}", job.index());
        }
        Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .retry(RetryPolicy::fixed(Duration::from_millis(1), 3))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    common::wait_for_done(store.as_ref(), &["s".into()], 1, Duration::from_secs(10)).await;
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.panicked, 1);
    assert_eq!(summary.stats.failed, 1);
    assert_eq!(summary.stats.completed, 1);
    let rows = common::log(store.as_ref(), "s").await;
    assert_eq!(rows[1].cause.as_ref().unwrap().attempt, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_told_to_the_handler_and_its_late_completion_is_superseded() {
    let (store, clock) = manual(0);
    let (started_tx, started) = oneshot::channel::<()>();
    let (stolen_tx, stolen) = oneshot::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    let stolen = Arc::new(tokio::sync::Mutex::new(Some(stolen)));
    let told = Arc::new(AtomicU32::new(0));
    let handler = {
        let told = Arc::clone(&told);
        handler_fn(move |job: Job| {
            let started = started_tx.lock().unwrap().take();
            let stolen = Arc::clone(&stolen);
            let told = Arc::clone(&told);
            async move {
                if let Some(started) = started {
                    let _ = started.send(());
                }
                job.lease().lost().await;
                told.fetch_add(1, Ordering::SeqCst);
                if let Some(stolen) = stolen.lock().await.take() {
                    let _ = stolen.await;
                }
                Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
            }
        })
    };
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .lease_ttl(Duration::from_millis(300))
        .max_in_flight(1)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    started.await.unwrap();
    // The lease ends on the store's clock; another worker takes the head.
    clock.advance(1_000);
    let thief = ClaimWorkRequest::new(
        "thief",
        vec![ConsumerDeclaration::targeted(CONSUMER)],
        60_000,
    );
    let claimed = store.claim_work(thief).await.unwrap();
    let (_, head) = claimed
        .heads()
        .next()
        .expect("the expired head is claimed again");
    assert_eq!(head.dispatch.attempt_count, 2);
    let head = head.clone();
    let _ = stolen_tx.send(());
    eventually("the late completion is superseded", || {
        let stats = worker.stats();
        async move { stats.superseded == 1 }
    })
    .await;
    assert_eq!(told.load(Ordering::SeqCst), 1);
    assert!(common::log(store.as_ref(), "s")
        .await
        .iter()
        .all(|e| e.event_type != DONE));
    let done = store
        .complete_attempt(CompleteRequest {
            incarnation: None,
            session_id: "s".into(),
            consumer: CONSUMER.into(),
            lane: head.lane.clone(),
            index: head.event.index,
            attempt: 2,
            events: vec![NewEvent::new(DONE, json!({"source": 1}))],
            consumers: None,
        })
        .await
        .unwrap();
    assert!(matches!(done, CompleteResult::Completed { .. }));
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.leases_lost, 1);
    assert_eq!(summary.stats.completed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_renewed_while_a_slow_handler_runs() {
    let store = memory();
    let handler = handler_fn(|job: Job| async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(!job.is_lease_lost());
        Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .lease_ttl(Duration::from_millis(150))
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    common::wait_for_done(store.as_ref(), &["s".into()], 1, Duration::from_secs(10)).await;
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.completed, 1);
    assert_eq!(summary.stats.leases_lost, 0);
    assert_eq!(summary.stats.failed, 0);
    assert_eq!(summary.stats.claimed, 1, "the head was never claimed again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_lost_at_commit_is_replayed_not_duplicated() {
    let inner = memory();
    let store: Arc<dyn Store> = Arc::new(LostAtCommit {
        completions_to_lose: AtomicU32::new(1),
        ..LostAtCommit::new(Arc::clone(&inner))
    });
    let handler = handler_fn(|job: Job| async move {
        Ok(vec![
            NewEvent::new(DONE, json!({"source": job.index()})),
            NewEvent::new("note", json!({"n": 2})),
        ])
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(inner.as_ref(), "s", "L").await;
    common::wait_for_done(inner.as_ref(), &["s".into()], 1, Duration::from_secs(10)).await;
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.completed, 1);
    assert_eq!(summary.stats.failed + summary.stats.dead_lettered, 0);
    let rows = common::log(inner.as_ref(), "s").await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let cause = rows[1].cause.clone().unwrap();
    assert_eq!(
        rows[1].id,
        a2_worker::ids::output_id("s", &cause, a2_worker::ids::OutputKind::Returned, 0)
    );
    assert_eq!(
        rows[2].id,
        a2_worker::ids::output_id("s", &cause, a2_worker::ids::OutputKind::Returned, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_append_lost_at_commit_is_replayed_and_fenced() {
    let inner = memory();
    let store: Arc<dyn Store> = Arc::new(LostAtCommit {
        appends_to_lose: AtomicU32::new(1),
        ..LostAtCommit::new(Arc::clone(&inner))
    });
    let handler = handler_fn(|job: Job| async move {
        let first = job
            .append(vec![NewEvent::new("progress", json!({"step": 1}))])
            .await?;
        assert_eq!(first.events[0].cause.as_ref(), Some(job.cause()));
        job.append(vec![NewEvent::new("progress", json!({"step": 2}))])
            .await?;
        let seen = job.history().await?;
        assert_eq!(seen.len(), job.index() as usize - 1);
        Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    // The producer's own append goes to the inner store, not through the loss.
    message(inner.as_ref(), "s", "L").await;
    common::wait_for_done(inner.as_ref(), &["s".into()], 1, Duration::from_secs(10)).await;
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.completed, 1);
    let types: Vec<String> = common::log(inner.as_ref(), "s")
        .await
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(types, ["msg", "progress", "progress", DONE]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_of_a_superseded_attempt_are_refused() {
    let (store, clock) = manual(0);
    let (go_tx, go) = oneshot::channel::<()>();
    let go = Arc::new(tokio::sync::Mutex::new(Some(go)));
    let (result_tx, mut results) = mpsc::unbounded_channel();
    let handler = handler_fn(move |job: Job| {
        let go = Arc::clone(&go);
        let result_tx = result_tx.clone();
        async move {
            if let Some(go) = go.lock().await.take() {
                let _ = go.await;
            }
            let appended = job.append(vec![NewEvent::new("progress", json!({}))]).await;
            let _ = result_tx.send(appended.map(|_| ()).map_err(|e| e.code()));
            Ok(vec![])
        }
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .lease_ttl(Duration::from_secs(30))
        .max_in_flight(1)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    eventually("claimed", || {
        let stats = worker.stats();
        async move { stats.claimed == 1 }
    })
    .await;
    clock.advance(60_000);
    let thief = ClaimWorkRequest::new(
        "thief",
        vec![ConsumerDeclaration::targeted(CONSUMER)],
        60_000,
    );
    assert!(matches!(
        store.claim_work(thief).await.unwrap(),
        ClaimWorkResult::Claimed { .. }
    ));
    let _ = go_tx.send(());
    assert_eq!(
        results.recv().await.unwrap(),
        Err(ErrorCode::SupersededAttempt)
    );
    worker.shutdown().await;
}

/// The in-flight bound holds, and is reached, whether claims ask for every
/// free slot (the default), for one head or for a batch of up to 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_flight_heads_stay_within_the_bound() {
    for batch in [None, Some(1), Some(3)] {
        let store = memory();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let handler = {
            let (running, most) = (Arc::clone(&running), Arc::clone(&most));
            handler_fn(move |job: Job| {
                let (running, most) = (Arc::clone(&running), Arc::clone(&most));
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
                }
            })
        };
        let mut builder = Worker::builder(Arc::clone(&store))
            .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
            .max_in_flight(3);
        if let Some(batch) = batch {
            builder = builder.claim_batch(batch);
        }
        let worker = builder.build().unwrap().spawn().unwrap();
        let sessions = common::session_ids("bound", 10);
        let expected = common::produce(store.as_ref(), &sessions, 2, 2).await;
        common::wait_for_done(store.as_ref(), &sessions, expected, Duration::from_secs(20)).await;
        let stats = worker.shutdown().await.stats;
        assert_eq!(most.load(Ordering::SeqCst), 3, "claim batch {batch:?}");
        if batch == Some(1) {
            // One head per claim: at least one claim per head.
            assert!(stats.claim_calls >= stats.claimed, "{stats:?}");
        }
        common::assert_exactly_once_in_order(store.as_ref(), &sessions, 4).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_fills_every_slot() {
    common::backlog_fills_every_slot(memory(), "fill").await;
}

/// On a paused clock, so any timer the worker waited for would show as time
/// passed: a head appended to an idle worker starts at once, and so does
/// one appended while 15 of its 16 slots are busy (their handlers blocked).
#[tokio::test(start_paused = true)]
async fn a_head_arriving_starts_at_once_while_slots_are_free() {
    let store = memory();
    let (started, mut starts) = mpsc::unbounded_channel::<(String, tokio::time::Instant)>();
    let (release, released) = tokio::sync::watch::channel(false);
    let handler = handler_fn(move |job: Job| {
        let _ = started.send((job.session_id().to_owned(), tokio::time::Instant::now()));
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|go| *go).await;
            Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
        }
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .max_in_flight(16)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let sessions = common::session_ids("arrive", 16);
    // A waiting claim is in the store before the first head arrives.
    eventually("the worker waits for work", || {
        let claims = worker.stats().claim_calls;
        async move { claims > 0 }
    })
    .await;
    let mut next_start = async || {
        tokio::time::timeout(Duration::from_secs(3600), starts.recv())
            .await
            .expect("a head never started")
            .expect("the handler is gone")
    };
    let appended = tokio::time::Instant::now();
    message(store.as_ref(), &sessions[0], "L").await;
    let (session, at) = next_start().await;
    assert_eq!(session, sessions[0]);
    assert_eq!(at, appended, "the lone head waited for a timer");
    for session in &sessions[1..15] {
        message(store.as_ref(), session, "L").await;
    }
    for _ in 1..15 {
        next_start().await;
    }
    assert_eq!(worker.stats().in_flight, 15);
    let appended = tokio::time::Instant::now();
    message(store.as_ref(), &sessions[15], "L").await;
    let (session, at) = next_start().await;
    assert_eq!(session, sessions[15]);
    assert_eq!(
        at, appended,
        "the head for the last free slot waited for a timer"
    );
    assert_eq!(worker.stats().in_flight, 16);
    release.send_replace(true);
    common::wait_for_done(store.as_ref(), &sessions, 16, Duration::from_secs(60)).await;
    let summary = worker.shutdown().await;
    assert_eq!(summary.stats.completed, 16, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_returned_events_dead_letter_with_the_reason() {
    let store = memory();
    let handler = handler_fn(|_job: Job| async move { Ok(vec![NewEvent::new("", json!({}))]) });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    eventually("dead-lettered", || {
        let store = Arc::clone(&store);
        async move { !store.dead_letters("s").await.unwrap().is_empty() }
    })
    .await;
    let dead = store.dead_letters("s").await.unwrap();
    let error = dead[0].dispatch.last_error.clone().unwrap();
    assert!(
        error.starts_with("completion rejected: invalid input"),
        "{error}"
    );
    worker.shutdown().await;
}

#[tokio::test]
async fn bad_options_are_invalid_input() {
    let noop = || handler_fn(|_job: Job| async move { Ok(vec![]) });
    let code = |built: Result<Worker, a2_store_api::StoreError>| built.unwrap_err().code();
    assert_eq!(
        code(Worker::builder(memory()).build()),
        ErrorCode::InvalidInput
    );
    let twice = Worker::builder(memory())
        .consumer(ConsumerDeclaration::targeted("a"), noop())
        .consumer(ConsumerDeclaration::targeted("a"), noop());
    assert_eq!(code(twice.build()), ErrorCode::InvalidInput);
    let one = || Worker::builder(memory()).consumer(ConsumerDeclaration::targeted("a"), noop());
    assert_eq!(
        code(one().max_in_flight(0).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().max_in_flight(1001).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(code(one().claim_batch(0).build()), ErrorCode::InvalidInput);
    assert_eq!(
        code(one().claims_in_flight(0).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().claim_batch(1001).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().claim_low_water(0).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().max_in_flight(8).claim_low_water(9).build()),
        ErrorCode::InvalidInput
    );
    assert!(one().max_in_flight(8).claim_low_water(8).build().is_ok());
    assert_eq!(
        code(one().lease_ttl(Duration::from_millis(1)).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().claim_wait(Duration::ZERO).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().claim_wait(Duration::from_secs(301)).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(code(one().holder("").build()), ErrorCode::InvalidInput);
    assert_eq!(
        code(one().per_session_limit(0).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().sessions(vec![]).build()),
        ErrorCode::InvalidInput
    );
    assert_eq!(
        code(one().handler_timeout(Some(Duration::ZERO)).build()),
        ErrorCode::InvalidInput
    );
    assert!(one().build().is_ok());
}

#[test]
fn spawn_outside_a_runtime_is_invalid_input() {
    let worker = Worker::builder(memory())
        .consumer(
            ConsumerDeclaration::targeted("a"),
            handler_fn(|_job: Job| async move { Ok(vec![]) }),
        )
        .build()
        .unwrap();
    assert_eq!(worker.spawn().unwrap_err().code(), ErrorCode::InvalidInput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_and_triggers_stop_the_worker() {
    let store = memory();
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(
            ConsumerDeclaration::targeted(CONSUMER),
            handler_fn(|_job: Job| async move { Ok(vec![]) }),
        )
        .build()
        .unwrap();
    let summary = tokio::time::timeout(
        Duration::from_secs(10),
        worker.run_until(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }),
    )
    .await
    .expect("run_until returns after its signal");
    assert_eq!(summary.error, None);
    let handle = Worker::builder(store)
        .consumer(
            ConsumerDeclaration::targeted(CONSUMER),
            handler_fn(|_job: Job| async move { Ok(vec![]) }),
        )
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    let trigger = handle.trigger();
    assert!(!trigger.is_shutting_down());
    let joined = tokio::spawn(handle.join());
    trigger.shutdown();
    assert!(trigger.is_shutting_down());
    let summary = tokio::time::timeout(Duration::from_secs(10), joined)
        .await
        .expect("a trigger's clone stops the worker")
        .unwrap();
    assert_eq!(summary.error, None);
}

/// A handler schedules a follow-up ("remind in a minute") by returning an
/// event whose target carries a delay: the reminder's head is busy until
/// its time on the store's clock, and the reminders handler runs only once
/// the clock reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_schedules_a_follow_up_that_runs_at_its_time() {
    const REMINDERS: &str = "reminders";
    let (store, clock) = manual(1_000_000);
    let agent = handler_fn(|_job: Job| async move {
        let remind = Target::lane(REMINDERS, "main").delayed(Duration::from_secs(60));
        Ok::<_, HandlerError>(vec![NewEvent::new(
            "reminder",
            json!({"text": "follow up"}),
        )
        .with_target(remind)])
    });
    let reminded = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&reminded);
    let reminders = handler_fn(move |job: Job| {
        let count = Arc::clone(&count);
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            assert_eq!(job.event().event_type, "reminder");
            Ok::<_, HandlerError>(vec![NewEvent::new("reminded", json!({}))])
        }
    });
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), agent)
        .consumer(ConsumerDeclaration::targeted(REMINDERS), reminders)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    eventually("the reminder is scheduled", || {
        let store = Arc::clone(&store);
        async move {
            let cursors = store.cursors("s").await.unwrap();
            cursors
                .iter()
                .any(|c| c.lane.as_deref() == Some("main") && c.head == Some(2))
        }
    })
    .await;
    let scheduled = cursor(store.as_ref(), "s", "main").await;
    let log = store.read("s", Default::default()).await.unwrap();
    let due = log[1].created_at + 60_000;
    assert_eq!(scheduled.dispatch.claim_expires_at, Some(due));
    assert_eq!(scheduled.dispatch.claim_holder, None);
    // The store's clock has not moved: the head cannot have been claimed.
    assert_eq!(scheduled.dispatch.attempt_count, 0);
    assert_eq!(reminded.load(Ordering::SeqCst), 0);
    clock.set(due);
    eventually("the reminder ran", || {
        let store = Arc::clone(&store);
        async move {
            let log = store.read("s", Default::default()).await.unwrap();
            log.iter().any(|e| e.event_type == "reminded")
        }
    })
    .await;
    let summary = worker.shutdown().await;
    assert_eq!(reminded.load(Ordering::SeqCst), 1);
    assert_eq!(summary.stats.completed, 2);
    let log = store.read("s", Default::default()).await.unwrap();
    let types: Vec<&str> = log.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["msg", "reminder", "reminded"]);
    assert_eq!(log[2].cause.as_ref().map(|c| c.index), Some(2));
}

/// An hour: the idle time of the retention tests.
const HOUR_MS: i64 = 3_600_000;

/// Session ids of `store`.
async fn session_ids(store: &dyn Store) -> Vec<String> {
    let sessions = store.sessions(Default::default()).await.unwrap();
    sessions.into_iter().map(|s| s.session_id).collect()
}

/// A worker serving [`CONSUMER`] with a handler that returns nothing,
/// pruning sessions idle for an hour every 5 ms.
fn pruning_worker(store: Arc<dyn Store>) -> WorkerHandle {
    Worker::builder(store)
        .consumer(
            ConsumerDeclaration::targeted(CONSUMER),
            handler_fn(|_job: Job| async { Ok(Vec::new()) }),
        )
        .claim_wait(Duration::from_millis(20))
        .retention(Duration::from_secs(3_600), Duration::from_millis(5))
        .build()
        .unwrap()
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_idle_finished_sessions_and_keeps_those_with_work() {
    let (store, clock) = manual(1_000_000);
    let worker = pruning_worker(Arc::clone(&store));
    message(store.as_ref(), "done", "main").await;
    // A message for a consumer no worker serves: work left, never done.
    let other = NewEvent::new("msg", json!({})).with_target(Target::lane("other", "main"));
    store
        .append("waiting", vec![other], Default::default())
        .await
        .unwrap();
    eventually("handled", || {
        let stats = worker.stats();
        async move { stats.completed == 1 }
    })
    .await;
    // Rounds run, but nothing is idle yet.
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(worker.stats().pruned, 0);
    assert_eq!(session_ids(store.as_ref()).await, ["done", "waiting"]);
    clock.advance(2 * HOUR_MS);
    eventually("the finished session is pruned", || {
        let stats = worker.stats();
        async move { stats.pruned == 1 }
    })
    .await;
    // Later rounds keep the session with work left.
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(session_ids(store.as_ref()).await, ["waiting"]);
    let summary = worker.shutdown().await;
    assert_eq!(summary.error, None);
    assert_eq!((summary.stats.pruned, summary.stats.prune_errors), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_prune_is_tried_again_next_round_and_the_worker_goes_on() {
    let (inner, clock) = manual(1_000_000);
    let store: Arc<dyn Store> = Arc::new(LostAtCommit {
        prunes_to_lose: AtomicU32::new(3),
        ..LostAtCommit::new(Arc::clone(&inner))
    });
    let worker = pruning_worker(Arc::clone(&store));
    eventually("three prunes failed", || {
        let stats = worker.stats();
        async move { stats.prune_errors == 3 }
    })
    .await;
    message(store.as_ref(), "done", "main").await;
    eventually("handled", || {
        let stats = worker.stats();
        async move { stats.completed == 1 }
    })
    .await;
    clock.advance(2 * HOUR_MS);
    eventually("pruned after the failures", || {
        let stats = worker.stats();
        async move { stats.pruned == 1 }
    })
    .await;
    assert!(session_ids(inner.as_ref()).await.is_empty());
    let summary = worker.shutdown().await;
    assert_eq!(summary.error, None);
    assert_eq!(summary.stats.prune_errors, 3);
}

#[tokio::test]
async fn retention_durations_are_checked() {
    let build = |idle_for, every| {
        Worker::builder(memory())
            .consumer(
                ConsumerDeclaration::targeted(CONSUMER),
                handler_fn(|_job: Job| async { Ok(Vec::new()) }),
            )
            .retention(idle_for, every)
            .build()
            .map(|_| ())
            .map_err(|e| e.code())
    };
    let hour = Duration::from_secs(3_600);
    assert_eq!(build(Duration::ZERO, hour), Err(ErrorCode::InvalidInput));
    assert_eq!(build(hour, Duration::ZERO), Err(ErrorCode::InvalidInput));
    assert_eq!(build(hour, hour), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_from_before_a_delete_never_reaches_the_new_session() {
    let store = memory();
    let (release, released) = oneshot::channel::<()>();
    let (started_tx, started) = oneshot::channel::<()>();
    let first = Arc::new(tokio::sync::Mutex::new(Some((started_tx, released))));
    let handler = {
        let first = Arc::clone(&first);
        handler_fn(move |job: Job| {
            let first = Arc::clone(&first);
            async move {
                // The first attempt waits until its session was replaced.
                let waits = first.lock().await.take();
                if let Some((started, released)) = waits {
                    let _ = started.send(());
                    let _ = released.await;
                }
                Ok(vec![NewEvent::new(DONE, json!({"source": job.index()}))])
            }
        })
    };
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
        .max_in_flight(2)
        .build()
        .unwrap()
        .spawn()
        .unwrap();
    message(store.as_ref(), "s", "L").await;
    started.await.unwrap();
    let forced = a2_store_api::DeleteSessionRequest::new("s").forced();
    store.delete_session(forced).await.unwrap();
    // The same id again: its head has the same consumer, lane, index and
    // attempt, and is claimed and handled by the other slot.
    message(store.as_ref(), "s", "L").await;
    eventually("the new session's message is handled", || {
        let stats = worker.stats();
        async move { stats.completed == 1 }
    })
    .await;
    let _ = release.send(());
    eventually("the old attempt is settled", || {
        let stats = worker.stats();
        async move { stats.in_flight == 0 }
    })
    .await;
    let summary = worker.shutdown().await;
    assert_eq!((summary.stats.completed, summary.stats.superseded), (1, 1));
    let done = common::log(store.as_ref(), "s").await;
    let done: Vec<_> = done.iter().filter(|e| e.event_type == DONE).collect();
    assert_eq!(done.len(), 1, "{done:?}");
}
