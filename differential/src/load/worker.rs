//! Producing the load and the worker tasks that drain it.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, ClaimWorkRequest, ClaimWorkResult, Clock, CompleteRequest, CompleteResult,
    ErrorCode, FailOutcome, FailRequest, Head, HeldClaim, NewEvent, RenewRequest, Store,
    StoreError, SystemClock,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::plan::{Action, LoadPlan, DONE, MAX_FAILURES};

/// How many events one append carries.
const BATCH: u64 = 10;
/// How often a call refused with `Busy` is retried before the run fails.
const BUSY_RETRIES: u32 = 200;
/// How long a worker's claim waits for work when nothing is claimable, ms.
pub const CLAIM_WAIT_MS: i64 = 200;
/// Heads one claim takes in all.
pub const CLAIM_LIMIT: usize = 4;
/// Heads one claim takes from one session.
pub const CLAIM_PER_SESSION: usize = 1;

/// What the workers of one process did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Completions answered `Completed` (stalled ones included).
    pub completed: u64,
    /// Failures answered `Failed`.
    pub failed: u64,
    /// Failures answered `DeadLettered`.
    pub dead_lettered: u64,
    /// Stalled attempts whose late completion was accepted (nobody reclaimed).
    pub stalls_completed: u64,
    /// Stalled attempts fenced on completion: `(session, index)`.
    pub stalls_superseded: Vec<(String, u64)>,
    /// Non-stalled outcomes answered `Superseded` (must stay empty).
    pub unexpected: Vec<String>,
    /// Calls retried after `Busy`.
    pub busy_retries: u64,
    /// `claim_work` calls made.
    pub claim_calls: u64,
    /// `claim_work` calls that claimed nothing (their wait ended with `Busy` or `Settled`).
    pub empty_claims: u64,
    /// Every claim handed out: `(session, consumer, lane, index, attempt)`.
    pub claims: Vec<(String, String, Option<String>, u64, u32)>,
    /// Per worker, its accepted lane completions in the order it made them:
    /// `(session, consumer, lane, index)`.
    pub lane_orders: Vec<Vec<(String, String, String, u64)>>,
}

impl WorkerReport {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: WorkerReport) {
        self.completed += other.completed;
        self.failed += other.failed;
        self.dead_lettered += other.dead_lettered;
        self.stalls_completed += other.stalls_completed;
        self.stalls_superseded.extend(other.stalls_superseded);
        self.unexpected.extend(other.unexpected);
        self.busy_retries += other.busy_retries;
        self.claim_calls += other.claim_calls;
        self.empty_claims += other.empty_claims;
        self.claims.extend(other.claims);
        self.lane_orders.extend(other.lane_orders);
    }
}

/// Retries `call` while the store answers `Busy`, counting retries.
async fn patient<T, F, Fut>(busy: &mut u64, mut call: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut tries = 0;
    loop {
        match call().await {
            Err(error) if error.code() == ErrorCode::Busy && tries < BUSY_RETRIES => {
                tries += 1;
                *busy += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return other,
        }
    }
}

/// Appends every event of `plan`, in batches, declaring the log consumer.
pub async fn produce(store: &dyn Store, plan: &LoadPlan) -> Result<(), StoreError> {
    plan.validate()?;
    let mut busy = 0;
    for k in 0..plan.sessions {
        let session = plan.session_id(k);
        let numbers: Vec<u64> = (k..plan.events)
            .filter(|n| plan.session_of(*n) == k)
            .collect();
        for chunk in numbers.chunks(BATCH as usize) {
            let events: Vec<NewEvent> = chunk.iter().map(|n| LoadPlan::event(*n)).collect();
            patient(&mut busy, || {
                store.append(
                    &session,
                    events.clone(),
                    AppendOptions {
                        consumers: Some(LoadPlan::consumers()),
                        origin_index: None,
                    },
                )
            })
            .await?;
        }
    }
    Ok(())
}

/// Runs `plan.workers_per_process` worker tasks on `store` until no
/// session has work left, and sums what they did.
pub async fn drain(
    store: Arc<dyn Store>,
    plan: LoadPlan,
    process: usize,
) -> Result<WorkerReport, StoreError> {
    plan.validate()?;
    let mut tasks = Vec::new();
    for worker in 0..plan.workers_per_process {
        let store = Arc::clone(&store);
        let holder = format!("p{process}-w{worker}");
        tasks.push(tokio::spawn(async move {
            work(store.as_ref(), &plan, &holder).await
        }));
    }
    let mut report = WorkerReport::default();
    for task in tasks {
        let done = task
            .await
            .map_err(|error| StoreError::backend("a worker task panicked", error))??;
        report.merge(done);
    }
    Ok(report)
}

/// The cross-session claim every worker makes: up to [`CLAIM_LIMIT`]
/// heads, [`CLAIM_PER_SESSION`] per session, waiting up to
/// [`CLAIM_WAIT_MS`] for work.
pub fn claim_request(plan: &LoadPlan, holder: &str) -> ClaimWorkRequest {
    ClaimWorkRequest {
        holder: holder.to_owned(),
        ttl_ms: Some(plan.ttl_ms),
        consumers: LoadPlan::consumers(),
        max_failures: Some(MAX_FAILURES),
        limit: Some(CLAIM_LIMIT),
        per_session_limit: Some(CLAIM_PER_SESSION),
        wait_ms: Some(CLAIM_WAIT_MS),
        ..ClaimWorkRequest::default()
    }
}

/// One worker: claims across every session and handles what it got, until
/// a claim answers `Settled` (no session has a claimable or busy head:
/// every head is finished or dead-lettered, and nobody holds one).
async fn work(
    store: &dyn Store,
    plan: &LoadPlan,
    holder: &str,
) -> Result<WorkerReport, StoreError> {
    let mut report = WorkerReport {
        lane_orders: vec![Vec::new()],
        ..WorkerReport::default()
    };
    let request = claim_request(plan, holder);
    loop {
        report.claim_calls += 1;
        let claim = patient(&mut report.busy_retries, || {
            store.claim_work(request.clone())
        })
        .await?;
        let sessions = match claim {
            ClaimWorkResult::Settled => return Ok(report),
            ClaimWorkResult::Busy { .. } => {
                report.empty_claims += 1;
                continue;
            }
            ClaimWorkResult::Claimed { sessions } => sessions,
            other => {
                report.unexpected.push(format!(
                    "claim_work answered {other:?}, an outcome this test does not know"
                ));
                return Ok(report);
            }
        };
        for claimed in sessions {
            let session = claimed.session_id;
            for head in claimed.dead_lettered {
                report.unexpected.push(format!(
                    "{session}: {:?} dead-lettered by an expired claim",
                    head.cursor_ref()
                ));
            }
            for head in claimed.heads {
                report.claims.push((
                    session.clone(),
                    head.consumer.clone(),
                    head.lane.clone(),
                    head.event.index,
                    head.dispatch.attempt_count,
                ));
                handle(store, plan, holder, &session, &head, &mut report).await?;
            }
        }
    }
}

fn complete_request(session: &str, head: &Head, holder: &str) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: session.to_owned(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events: vec![NewEvent::new(DONE, json!({ "by": holder }))],
        consumers: Some(LoadPlan::consumers()),
    }
}

/// Handles one claimed head as the plan injects.
async fn handle(
    store: &dyn Store,
    plan: &LoadPlan,
    holder: &str,
    session: &str,
    head: &Head,
    report: &mut WorkerReport,
) -> Result<(), StoreError> {
    let n = head
        .event
        .payload
        .get("n")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| StoreError::invalid_input(format!("head without n: {head:?}")))?;
    let attempt = head.dispatch.attempt_count;
    match LoadPlan::action(&head.consumer, n, attempt) {
        Action::Fail => {
            let failed = patient(&mut report.busy_retries, || {
                store.fail_attempt(FailRequest {
                    incarnation: None,
                    session_id: session.to_owned(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt,
                    error: format!("injected failure of attempt {attempt}"),
                    max_failures: Some(MAX_FAILURES),
                    retry_after_ms: None,
                })
            })
            .await?;
            match failed.outcome {
                FailOutcome::Failed => report.failed += 1,
                FailOutcome::DeadLettered => report.dead_lettered += 1,
                FailOutcome::Superseded => report
                    .unexpected
                    .push(format!("{session}: failing {:?} superseded", head.cause())),
                other => report.unexpected.push(format!(
                    "{session}: failing {:?} answered {other:?}",
                    head.cause()
                )),
            }
        }
        Action::Stall => {
            // The handler hangs: its lease ends now, and it only reports
            // after another worker has had time to claim the head again.
            patient(&mut report.busy_retries, || {
                store.renew_claims(RenewRequest {
                    incarnation: None,
                    session_id: session.to_owned(),
                    holder: holder.to_owned(),
                    claims: vec![HeldClaim {
                        cursor: head.cursor_ref(),
                        attempt,
                    }],
                    ttl_ms: None,
                    expires_at_ms: Some(SystemClock.now_ms() + 1),
                })
            })
            .await?;
            tokio::time::sleep(Duration::from_millis(plan.stall_ms)).await;
            let late = patient(&mut report.busy_retries, || {
                store.complete_attempt(complete_request(session, head, holder))
            })
            .await?;
            match late {
                CompleteResult::Completed { .. } => {
                    report.completed += 1;
                    report.stalls_completed += 1;
                    record_lane(report, session, head);
                }
                CompleteResult::Superseded => report
                    .stalls_superseded
                    .push((session.to_owned(), head.event.index)),
                other => report.unexpected.push(format!(
                    "{session}: the late completion of {:?} answered {other:?}",
                    head.cause()
                )),
            }
        }
        Action::Complete => {
            let done = patient(&mut report.busy_retries, || {
                store.complete_attempt(complete_request(session, head, holder))
            })
            .await?;
            match done {
                CompleteResult::Completed { .. } => {
                    report.completed += 1;
                    record_lane(report, session, head);
                }
                CompleteResult::Superseded => report.unexpected.push(format!(
                    "{session}: completing {:?} superseded",
                    head.cause()
                )),
                other => report.unexpected.push(format!(
                    "{session}: completing {:?} answered {other:?}",
                    head.cause()
                )),
            }
        }
    }
    Ok(())
}

/// Notes an accepted completion of a lane (or log) head in this worker's order.
fn record_lane(report: &mut WorkerReport, session: &str, head: &Head) {
    if let (Some(lane), Some(order)) = (&head.lane, report.lane_orders.last_mut()) {
        order.push((
            session.to_owned(),
            head.consumer.clone(),
            lane.clone(),
            head.event.index,
        ));
    }
}
