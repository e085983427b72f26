//! The worker of the worker workloads: loops on `claim_work`, completes
//! every head it claims and records how long each message waited; or, for
//! `--workload worker`, runs `a2_store::worker::Worker` with a handler that
//! records the same when it starts.
//!
//! A message's payload holds `sent_us`, the wall-clock time (µs since the
//! epoch) the producer read just before appending it, and `class`, the
//! group its latency is reported in (`existing`, `new`, `small`,
//! `backlog`). The worker reads the wall clock when `claim_work` returns
//! (or its handler starts) and records the difference per class. Producer
//! and workers run on one machine, so they share that clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2_store::worker::{handler_fn, Job, Worker};
use a2_store::{
    ClaimWorkRequest, ClaimWorkResult, CompleteRequest, CompleteResult, ConsumerDeclaration,
    NewEvent, Payload, Store, Target,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use super::cpu;
use crate::args::Runner;
use crate::failure::{chain, Failure};

/// The consumer every worker serves: its FIFO lanes carry the messages.
pub const CONSUMER: &str = "agent";
/// The event type of every produced message.
pub const MESSAGE: &str = "msg";
/// Lease of every claim, ms (long: the workload never lets one expire).
const LEASE_MS: i64 = 30_000;

/// The consumers a worker serves.
pub fn consumers() -> Vec<ConsumerDeclaration> {
    vec![ConsumerDeclaration::targeted(CONSUMER)]
}

/// Wall-clock time now, µs since the epoch (0 before it).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A message for `lane` of [`CONSUMER`], stamped now, in latency group `class`.
pub fn message(lane: &str, class: &str) -> NewEvent {
    NewEvent::new(MESSAGE, json!({"sent_us": now_us(), "class": class}))
        .with_target(Target::lane(CONSUMER, lane))
}

/// How one worker claims.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    /// The worker's number; its holder is `a2-bench-worker-N`.
    pub worker: u32,
    /// How long one `claim_work` call waits for work, ms.
    pub wait_ms: i64,
    /// Heads one call claims at most (the loop).
    pub claim_limit: u32,
    /// What the worker runs.
    pub runner: Runner,
    /// Heads processed at once (`a2-worker`).
    pub max_in_flight: u32,
}

/// What one worker did between its start and its stop.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The worker's number.
    pub worker: u32,
    /// Wall time from start to stop, s.
    pub window_s: f64,
    /// CPU time its process used in that window, s (`None` for a worker
    /// task sharing a process, or without `/proc`).
    pub cpu_s: Option<f64>,
    /// `claim_work` calls made (including the one cut short by the stop).
    pub claim_calls: u64,
    /// Calls that answered `Busy` or `Settled` (the loop; `a2-worker` does
    /// not count them: 0).
    pub empty_claims: u64,
    /// `complete_attempt` calls made (`a2-worker`: attempts completed).
    pub complete_calls: u64,
    /// Append→claim latency of each claimed message, µs, by its class
    /// (`a2-worker`: append→handler start of each attempt).
    pub samples: BTreeMap<String, Vec<u64>>,
}

impl WorkerReport {
    /// Store calls (claims and completions) per second of the window.
    pub fn calls_per_s(&self) -> f64 {
        if self.window_s > 0.0 {
            (self.claim_calls + self.complete_calls) as f64 / self.window_s
        } else {
            0.0
        }
    }

    /// `claim_work` calls per second of the window.
    pub fn claims_per_s(&self) -> f64 {
        if self.window_s > 0.0 {
            self.claim_calls as f64 / self.window_s
        } else {
            0.0
        }
    }
}

/// Works as `config.runner` says until `stop` turns true. `measure_cpu`:
/// the process runs only this worker, so its CPU time is the worker's.
pub async fn work(
    store: &Arc<dyn Store>,
    config: WorkerConfig,
    stop: watch::Receiver<bool>,
    measure_cpu: bool,
) -> Result<WorkerReport, Failure> {
    match config.runner {
        Runner::Loop => claim_loop(store.as_ref(), config, stop, measure_cpu).await,
        Runner::A2Worker => a2_worker(store, config, stop, measure_cpu).await,
    }
}

/// The message's latency group and send time, when it is a produced message.
fn stamp(payload: &Payload) -> Option<(&str, u64)> {
    let payload = payload.as_value();
    Some((
        payload.get("class")?.as_str()?,
        payload.get("sent_us")?.as_u64()?,
    ))
}

/// Elapsed wall time from `started`, and CPU time of the process since
/// `cpu_before` when measured, into `report`.
fn close_window(report: &mut WorkerReport, started: Instant, cpu_before: Option<Duration>) {
    report.window_s = started.elapsed().as_secs_f64();
    report.cpu_s = cpu_before.and_then(|before| {
        cpu::process_cpu().map(|after| after.saturating_sub(before).as_secs_f64())
    });
}

/// Runs an `a2_store::worker::Worker` serving [`CONSUMER`] until `stop`
/// turns true, then shuts it down gracefully. Its handler records
/// append→start of every attempt and completes with no events. Any
/// attempt that did not simply complete (a failure, a dead letter, a
/// superseded completion, a lost lease, an attempt left unsettled) is a
/// failure of the run: with a no-op handler and 30 s leases none should happen.
async fn a2_worker(
    store: &Arc<dyn Store>,
    config: WorkerConfig,
    mut stop: watch::Receiver<bool>,
    measure_cpu: bool,
) -> Result<WorkerReport, Failure> {
    type Samples = BTreeMap<String, Vec<u64>>;
    let samples: Arc<Mutex<Samples>> = Arc::default();
    let recorder = Arc::clone(&samples);
    let handler = handler_fn(move |job: Job| {
        let started_us = now_us();
        if let Some((class, sent)) = stamp(&job.event().payload) {
            recorder
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(class.to_owned())
                .or_default()
                .push(started_us.saturating_sub(sent));
        }
        async { Ok(Vec::new()) }
    });
    let mut builder = Worker::builder(Arc::clone(store))
        .holder(format!("a2-bench-worker-{}", config.worker))
        .lease_ttl(Duration::from_millis(LEASE_MS.unsigned_abs()))
        .max_in_flight(config.max_in_flight as usize)
        .claim_wait(Duration::from_millis(config.wait_ms.unsigned_abs()));
    for consumer in consumers() {
        builder = builder.consumer(consumer, handler.clone());
    }
    let worker = builder.build().map_err(|e| {
        Failure::new(format!(
            "worker {}: building the a2 worker: {}",
            config.worker,
            chain(&e)
        ))
    })?;
    let cpu_before = measure_cpu.then(cpu::process_cpu).flatten();
    let started = Instant::now();
    let summary = worker
        .run_until(async move {
            // A dropped sender is a stop too.
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
        .await;
    let mut report = WorkerReport {
        worker: config.worker,
        claim_calls: summary.stats.claim_calls,
        complete_calls: summary.stats.completed,
        samples: std::mem::take(
            &mut *samples
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ),
        ..WorkerReport::default()
    };
    close_window(&mut report, started, cpu_before);
    if let Some(error) = summary.error {
        return Err(Failure::new(format!(
            "worker {}: the a2 worker stopped on its own: {error}",
            config.worker
        )));
    }
    let stats = summary.stats;
    let odd: Vec<String> = [
        ("failed", stats.failed),
        ("dead-lettered", stats.dead_lettered),
        ("superseded", stats.superseded),
        ("leases lost", stats.leases_lost),
        ("unsettled", stats.unsettled),
    ]
    .iter()
    .filter(|(_, count)| *count > 0)
    .map(|(what, count)| format!("{count} {what}"))
    .collect();
    if !odd.is_empty() {
        return Err(Failure::new(format!(
            "worker {}: attempts of a no-op handler did not all complete ({}): run `a2-store check` on the backend",
            config.worker,
            odd.join(", ")
        )));
    }
    Ok(report)
}

/// Claims and completes until `stop` turns true (a claim waiting then is
/// dropped, which the contract says leaves nothing behind).
async fn claim_loop(
    store: &dyn Store,
    config: WorkerConfig,
    mut stop: watch::Receiver<bool>,
    measure_cpu: bool,
) -> Result<WorkerReport, Failure> {
    let request = ClaimWorkRequest {
        limit: Some(config.claim_limit as usize),
        ..ClaimWorkRequest::new(
            format!("a2-bench-worker-{}", config.worker),
            consumers(),
            LEASE_MS,
        )
        .with_wait_ms(config.wait_ms)
    };
    let mut report = WorkerReport {
        worker: config.worker,
        ..WorkerReport::default()
    };
    let cpu_before = measure_cpu.then(cpu::process_cpu).flatten();
    let started = Instant::now();
    loop {
        if *stop.borrow() {
            break;
        }
        report.claim_calls += 1;
        let result = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => break,
            result = store.claim_work(request.clone()) => result,
        };
        let claimed_us = now_us();
        let result = result.map_err(|e| {
            Failure::new(format!(
                "worker {}: claim_work failed: {}",
                config.worker,
                chain(&e)
            ))
        })?;
        if !matches!(result, ClaimWorkResult::Claimed { .. }) {
            report.empty_claims += 1;
            continue;
        }
        for (session_id, head) in result.heads() {
            if let Some((class, sent)) = stamp(&head.event.payload) {
                report
                    .samples
                    .entry(class.to_owned())
                    .or_default()
                    .push(claimed_us.saturating_sub(sent));
            }
            report.complete_calls += 1;
            let completed = store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: session_id.to_owned(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    events: Vec::new(),
                    consumers: Some(consumers()),
                })
                .await
                .map_err(|e| {
                    Failure::new(format!(
                        "worker {}: completing index {} of session '{session_id}' failed: {}",
                        config.worker,
                        head.event.index,
                        chain(&e)
                    ))
                })?;
            if let CompleteResult::Superseded = completed {
                return Err(Failure::new(format!(
                    "worker {}: the head at index {} of session '{session_id}' it had just claimed was superseded: the backend does not follow the contract; run `a2-store check` on it",
                    config.worker, head.event.index
                )));
            }
        }
    }
    close_window(&mut report, started, cpu_before);
    Ok(report)
}

/// The class of the messages a runtime workload's warm-up sends: claimed
/// and completed like every other, never counted or timed.
pub const WARM_UP: &str = "warm-up";

/// A bounded pause for polling loops.
pub const POLL: Duration = Duration::from_millis(20);
