//! What a load run produces, which handler outcomes it injects, and what it
//! therefore expects at the end. Everything is a pure function of the
//! event number, so every process agrees on it without talking.

use a2_store_api::{ConsumerDeclaration, NewEvent, Target};
use serde_json::json;

/// The lane consumer: every event is queued on one of its lanes.
pub const AGENT: &str = "agent";
/// The event-cursor consumer: every even event targets it.
pub const NOTIFIER: &str = "notifier";
/// The log consumer: follows every `job` event in order.
pub const AUDIT: &str = "audit";
/// The log consumer's lane.
pub const AUDIT_LANE: &str = "log";
/// The type of produced work.
pub const JOB: &str = "job";
/// The type of the marker a completion returns.
pub const DONE: &str = "done";
/// Lanes per session.
pub const LANES: u64 = 3;
/// Failures at which a head is dead-lettered.
pub const MAX_FAILURES: u32 = 3;

/// What the handler does with one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Complete it, returning a `done` marker.
    Complete,
    /// Report a failure.
    Fail,
    /// Let the lease run out (renewed to expire at once), sleep, then complete.
    Stall,
}

/// The shape of one load run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadPlan {
    /// Targeted events in all.
    pub events: u64,
    /// Sessions they are spread over.
    pub sessions: u64,
    /// Worker tasks per process.
    pub workers_per_process: usize,
    /// Lease of a normal claim, ms (long: normal work never expires).
    pub ttl_ms: i64,
    /// How long after a stalled attempt's lease ends its handler wakes, ms.
    pub stall_ms: u64,
}

impl LoadPlan {
    /// `events` events over 100 sessions, 4 workers per process.
    pub fn new(events: u64) -> Self {
        Self {
            events,
            sessions: 100,
            workers_per_process: 4,
            ttl_ms: 30_000,
            stall_ms: 150,
        }
    }

    /// The plan of a test run: 2,000 events, 50,000 with `A2_LOAD_FULL=1`,
    /// or exactly `A2_LOAD_EVENTS` when that is set to a number.
    pub fn from_env() -> Self {
        let events = std::env::var("A2_LOAD_EVENTS")
            .ok()
            .and_then(|n| n.trim().parse::<u64>().ok());
        let full = std::env::var("A2_LOAD_FULL").is_ok_and(|v| v == "1");
        Self::new(events.unwrap_or(if full { 50_000 } else { 2_000 }))
    }

    /// The session event `n` belongs to (0 when the plan has no sessions).
    pub fn session_of(&self, n: u64) -> u64 {
        n.checked_rem(self.sessions).unwrap_or(0)
    }

    /// Refuses a plan that cannot run: no sessions or no workers.
    pub fn validate(&self) -> Result<(), a2_store_api::StoreError> {
        if self.sessions == 0 || self.workers_per_process == 0 {
            return Err(a2_store_api::StoreError::invalid_input(
                "a load plan needs at least one session and one worker per process",
            ));
        }
        Ok(())
    }

    /// The id of session `k`.
    pub fn session_id(&self, k: u64) -> String {
        format!("load-{k:03}")
    }

    /// The lane event `n` is queued on.
    pub fn lane_of(n: u64) -> String {
        format!("L{}", (n / 100) % LANES)
    }

    /// Whether event `n` also targets the notifier's event cursor.
    pub fn notifies(n: u64) -> bool {
        n.is_multiple_of(2)
    }

    /// Event `n` as appended.
    pub fn event(n: u64) -> NewEvent {
        let mut event = NewEvent::new(JOB, json!({ "n": n }))
            .with_id(format!("job-{n}"))
            .with_target(Target::lane(AGENT, Self::lane_of(n)));
        if Self::notifies(n) {
            event = event.with_target(Target::event(NOTIFIER));
        }
        event
    }

    /// The consumers every call serves.
    pub fn consumers() -> Vec<ConsumerDeclaration> {
        vec![
            ConsumerDeclaration::targeted(AGENT),
            ConsumerDeclaration::targeted(NOTIFIER),
            ConsumerDeclaration::log(AUDIT, AUDIT_LANE, Some(vec![JOB.to_owned()]), true),
        ]
    }

    /// The injected outcome of `consumer`'s attempt `attempt` at event `n`.
    pub fn action(consumer: &str, n: u64, attempt: u32) -> Action {
        if Self::poisoned(consumer, n) {
            return Action::Fail;
        }
        if attempt == 1 && n % 10 == 3 {
            return Action::Fail;
        }
        if attempt == 1 && consumer == AGENT && Self::stalls(n) {
            return Action::Stall;
        }
        Action::Complete
    }

    /// The notifier always fails at these events: they end dead-lettered.
    pub fn poisoned(consumer: &str, n: u64) -> bool {
        consumer == NOTIFIER && n % 97 == 5
    }

    /// The agent's first attempt at these events stalls past its lease.
    pub fn stalls(n: u64) -> bool {
        n % 50 == 7
    }

    /// The consumers that must process event `n`.
    pub fn targeted(n: u64) -> Vec<&'static str> {
        let mut consumers = vec![AGENT, AUDIT];
        if Self::notifies(n) {
            consumers.push(NOTIFIER);
        }
        consumers
    }

    /// What the run must end with, from the plan alone.
    pub fn expected(&self) -> Expected {
        let mut expected = Expected::default();
        for n in 0..self.events {
            for consumer in Self::targeted(n) {
                if consumer == NOTIFIER && Self::poisoned(consumer, n) {
                    expected.failed += u64::from(MAX_FAILURES - 1);
                    expected.dead_lettered += 1;
                    continue;
                }
                expected.completions += 1;
                if n % 10 == 3 {
                    expected.failed += 1;
                }
                if consumer == AGENT && Self::stalls(n) {
                    expected.stalls += 1;
                }
            }
        }
        expected
    }
}

/// Totals a run must reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expected {
    /// Heads completed (one `done` marker each).
    pub completions: u64,
    /// `fail_attempt` calls answered `Failed`.
    pub failed: u64,
    /// `fail_attempt` calls answered `DeadLettered` (= dead letters at the end).
    pub dead_lettered: u64,
    /// Stalled attempts.
    pub stalls: u64,
}
