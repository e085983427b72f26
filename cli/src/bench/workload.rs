//! The fixed workload mix `bench` runs, one loop per session.
//!
//! One *round* of a session:
//! 1. `append` a batch of [`MESSAGES`] `msg` events, alternately targeted at
//!    the FIFO lanes `lane-0` and `lane-1` of consumer `agent`, plus one
//!    `ping` targeted at an event cursor of consumer `notifier`.
//! 2. `claim` and work until the session settles. A lane head completes with
//!    one `reply` event (so completions append), an event head completes
//!    empty, and the log consumer `audit` (lane `audit`, types `msg` and
//!    `reply`, no backfill) follows the whole log. A head whose index is a
//!    multiple of [`FAIL_EVERY`] fails its first attempt (`fail`, retry
//!    delay 0) and is claimed again and completed as attempt 2.
//! 3. Every [`ROUNDS_PER_CLEAR`] rounds, `clear` the session and `reclaim`
//!    until no row remains below the marker, so sessions stay small and the
//!    run measures steady state rather than growth.
//!
//! Per round that is 1 append, 9 new rows (4 `msg`, 1 `ping`, 4 `reply`),
//! 13 heads worked (4 lane, 1 event, 8 log), about 3 of them failed once;
//! each clear leaves about 72 rows below it, which one `reclaim` call deletes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use a2_store::{
    AppendOptions, ClaimRequest, ClaimResult, ClearRequest, CompleteRequest, CompleteResult,
    ConsumerDeclaration, FailOutcome, FailRequest, Head, NewEvent, Store, StoreError, Target,
};
use serde_json::json;

use super::latency::Recorder;
use super::operation::Operation;
use crate::failure::Failure;

/// `msg` events per appended batch.
pub const MESSAGES: u64 = 4;
/// A head whose index is a multiple of this fails its first attempt.
pub const FAIL_EVERY: u64 = 5;
/// A session is cleared and reclaimed after this many rounds.
pub const ROUNDS_PER_CLEAR: u64 = 8;
/// Lease of every claim, ms (long: the workload never lets one expire).
const LEASE_MS: i64 = 30_000;
/// Dead-letter threshold passed with claims and failures (never reached).
const MAX_FAILURES: u32 = 10;
/// More claim calls than this in one round means the backend does not settle.
const MAX_CLAIMS_PER_ROUND: usize = 1_000;
/// The holder name of every claim.
const HOLDER: &str = "a2-bench";

/// What one session loop shares with the others and the progress bar.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Calls made so far, all sessions together.
    pub calls: Arc<AtomicU64>,
    /// Rounds finished so far, all sessions together.
    pub rounds: Arc<AtomicU64>,
    /// Set when a session failed: the others stop at their next round.
    pub stop: Arc<AtomicBool>,
}

impl Shared {
    /// Fresh counters.
    pub fn new() -> Self {
        Self {
            calls: Arc::new(AtomicU64::new(0)),
            rounds: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The consumers every call of the workload serves.
fn consumers() -> Vec<ConsumerDeclaration> {
    vec![
        ConsumerDeclaration::targeted("agent"),
        ConsumerDeclaration::targeted("notifier"),
        ConsumerDeclaration::log(
            "audit",
            "audit",
            Some(vec!["msg".to_owned(), "reply".to_owned()]),
            false,
        ),
    ]
}

/// One session's loop: runs rounds until `deadline` (or until another
/// session failed) and returns its latency samples.
pub async fn run_session(
    store: Arc<dyn Store>,
    session_id: String,
    deadline: Instant,
    shared: Shared,
) -> Result<Recorder, Failure> {
    let mut session = Session {
        store: store.as_ref(),
        session_id: &session_id,
        consumers: consumers(),
        recorder: Recorder::default(),
        shared: &shared,
    };
    let mut round: u64 = 0;
    while Instant::now() < deadline && !shared.stop.load(Ordering::Relaxed) {
        round += 1;
        let result = session.round(round).await;
        if let Err(failure) = result {
            shared.stop.store(true, Ordering::Relaxed);
            return Err(failure);
        }
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        // An in-memory store never suspends: yield so the other sessions
        // and the progress bar get their turn.
        tokio::task::yield_now().await;
    }
    Ok(session.recorder)
}

struct Session<'a> {
    store: &'a dyn Store,
    session_id: &'a str,
    consumers: Vec<ConsumerDeclaration>,
    recorder: Recorder,
    shared: &'a Shared,
}

impl Session<'_> {
    async fn round(&mut self, round: u64) -> Result<(), Failure> {
        self.append(round).await?;
        self.drain().await?;
        if round.is_multiple_of(ROUNDS_PER_CLEAR) {
            self.clear_and_reclaim().await?;
        }
        Ok(())
    }

    fn timed(&mut self, operation: Operation, started: Instant) {
        self.recorder.record(operation, started.elapsed());
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self, operation: Operation, error: &StoreError) -> Failure {
        Failure::new(format!(
            "{} in session '{}' failed: {}",
            operation.name(),
            self.session_id,
            crate::failure::chain(error)
        ))
    }

    async fn append(&mut self, round: u64) -> Result<(), Failure> {
        let mut batch: Vec<NewEvent> = (0..MESSAGES)
            .map(|n| {
                NewEvent::new("msg", json!({"round": round, "n": n}))
                    .with_target(Target::lane("agent", format!("lane-{}", n % 2)))
            })
            .collect();
        batch.push(
            NewEvent::new("ping", json!({"round": round})).with_target(Target::event("notifier")),
        );
        let options = AppendOptions {
            consumers: Some(self.consumers.clone()),
            origin_index: None,
        };
        let started = Instant::now();
        let result = self.store.append(self.session_id, batch, options).await;
        self.timed(Operation::Append, started);
        result.map_err(|e| self.failed(Operation::Append, &e))?;
        Ok(())
    }

    async fn drain(&mut self) -> Result<(), Failure> {
        for _ in 0..MAX_CLAIMS_PER_ROUND {
            let request = ClaimRequest {
                session_id: self.session_id.to_owned(),
                holder: HOLDER.to_owned(),
                ttl_ms: Some(LEASE_MS),
                consumers: Some(self.consumers.clone()),
                max_failures: Some(MAX_FAILURES),
                ..ClaimRequest::default()
            };
            let started = Instant::now();
            let result = self.store.claim_available(request).await;
            self.timed(Operation::Claim, started);
            match result.map_err(|e| self.failed(Operation::Claim, &e))? {
                ClaimResult::Claimed { heads, .. } => {
                    for head in heads {
                        self.work(&head).await?;
                    }
                }
                ClaimResult::Settled => return Ok(()),
                ClaimResult::Busy { retry_at } => {
                    return Err(Failure::new(format!(
                        "claim in session '{}' reported Busy until {retry_at} although the workload holds no claim: the backend does not follow the contract; run `a2-store check` on it",
                        self.session_id
                    )))
                }
                other => {
                    return Err(Failure::new(format!(
                        "claim in session '{}' answered {other:?}, an outcome this build of a2-store does not know: use a CLI built from the same version as the store",
                        self.session_id
                    )))
                }
            }
        }
        Err(Failure::new(format!(
            "session '{}' did not settle after {MAX_CLAIMS_PER_ROUND} claims in one round: the backend does not follow the contract; run `a2-store check` on it",
            self.session_id
        )))
    }

    async fn work(&mut self, head: &Head) -> Result<(), Failure> {
        let index = head.event.index;
        let attempt = head.dispatch.attempt_count;
        if index.is_multiple_of(FAIL_EVERY) && attempt == 1 {
            let request = FailRequest {
                incarnation: None,
                session_id: self.session_id.to_owned(),
                consumer: head.consumer.clone(),
                lane: head.lane.clone(),
                index,
                attempt,
                error: "bench: first attempts at every 5th index fail".to_owned(),
                max_failures: Some(MAX_FAILURES),
                retry_after_ms: Some(0),
            };
            let started = Instant::now();
            let result = self.store.fail_attempt(request).await;
            self.timed(Operation::Fail, started);
            let outcome = result.map_err(|e| self.failed(Operation::Fail, &e))?;
            if outcome.outcome != FailOutcome::Failed {
                return Err(self.unexpected("fail", index, &format!("{:?}", outcome.outcome)));
            }
            return Ok(());
        }
        let events = if head.consumer == "agent" {
            vec![NewEvent::new("reply", json!({"to": index}))]
        } else {
            Vec::new()
        };
        let request = CompleteRequest {
            incarnation: None,
            session_id: self.session_id.to_owned(),
            consumer: head.consumer.clone(),
            lane: head.lane.clone(),
            index,
            attempt,
            events,
            consumers: Some(self.consumers.clone()),
        };
        let started = Instant::now();
        let result = self.store.complete_attempt(request).await;
        self.timed(Operation::Complete, started);
        match result.map_err(|e| self.failed(Operation::Complete, &e))? {
            CompleteResult::Completed { .. } => Ok(()),
            CompleteResult::Superseded => Err(self.unexpected("complete", index, "Superseded")),
            other => Err(self.unexpected("complete", index, &format!("{other:?}"))),
        }
    }

    async fn clear_and_reclaim(&mut self) -> Result<(), Failure> {
        let request = ClearRequest {
            incarnation: None,
            session_id: self.session_id.to_owned(),
            if_last_index: None,
            cause: None,
        };
        let started = Instant::now();
        let result = self.store.clear(request).await;
        self.timed(Operation::Clear, started);
        result.map_err(|e| self.failed(Operation::Clear, &e))?;
        // Each call deletes at most 256 rows; 8 rounds add 72, so one call suffices.
        for _ in 0..MAX_CLAIMS_PER_ROUND {
            let started = Instant::now();
            let result = self.store.reclaim(self.session_id).await;
            self.timed(Operation::Reclaim, started);
            if result
                .map_err(|e| self.failed(Operation::Reclaim, &e))?
                .done
            {
                return Ok(());
            }
        }
        Err(Failure::new(format!(
            "reclaim in session '{}' never reported done: the backend does not follow the contract; run `a2-store check` on it",
            self.session_id
        )))
    }

    fn unexpected(&self, what: &str, index: u64, got: &str) -> Failure {
        Failure::new(format!(
            "{what} of the head at index {index} in session '{}' returned {got} although the workload holds it: the backend does not follow the contract; run `a2-store check` on it",
            self.session_id
        ))
    }
}
