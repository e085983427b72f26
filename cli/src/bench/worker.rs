//! The worker of the worker workloads: loops on `claim_work`, completes
//! every head it claims and records how long each message waited.
//!
//! A message's payload holds `sent_us`, the wall-clock time (µs since the
//! epoch) the producer read just before appending it, and `class`, the
//! group its latency is reported in (`existing`, `new`, `small`,
//! `backlog`). The worker reads the wall clock when `claim_work` returns
//! and records the difference per class. Producer and workers run on one
//! machine, so they share that clock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2_store::{
    ClaimWorkRequest, ClaimWorkResult, CompleteRequest, CompleteResult, ConsumerDeclaration,
    NewEvent, Store, Target,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use super::cpu;
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
    /// Heads one call claims at most.
    pub claim_limit: u32,
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
    /// Calls that answered `Busy` or `Settled`.
    pub empty_claims: u64,
    /// `complete_attempt` calls made.
    pub complete_calls: u64,
    /// Append→claim latency of each claimed message, µs, by its class.
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

/// Claims and completes until `stop` turns true (a claim waiting then is
/// dropped, which the contract says leaves nothing behind). `measure_cpu`:
/// the process runs only this worker, so its CPU time is the worker's.
pub async fn work(
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
            let payload = head.event.payload.as_value();
            if let (Some(sent), Some(class)) = (
                payload.get("sent_us").and_then(serde_json::Value::as_u64),
                payload.get("class").and_then(serde_json::Value::as_str),
            ) {
                report
                    .samples
                    .entry(class.to_owned())
                    .or_default()
                    .push(claimed_us.saturating_sub(sent));
            }
            report.complete_calls += 1;
            let completed = store
                .complete_attempt(CompleteRequest {
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
    let window = started.elapsed();
    report.window_s = window.as_secs_f64();
    report.cpu_s = match (cpu_before, measure_cpu.then(cpu::process_cpu).flatten()) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before).as_secs_f64()),
        _ => None,
    };
    Ok(report)
}

/// A bounded pause for polling loops.
pub const POLL: Duration = Duration::from_millis(20);
