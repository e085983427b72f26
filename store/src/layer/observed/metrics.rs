//! The `metrics` half of the layer: counters and a latency histogram per call.
//!
//! Handles are registered with the recorder on first use and kept, so a
//! call costs a few atomic adds rather than a key lookup per metric; a
//! series appears once it has been recorded, never before.

use std::array;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_histogram, histogram, Counter, Histogram, SharedString,
    Unit,
};

use super::{Label, Operation, Outcome};

/// The metric handles of one store, registered lazily.
pub(super) struct Handles {
    backend: SharedString,
    /// `a2_store_calls_total` by operation, then outcome.
    calls: Box<[[OnceLock<Counter>; Label::COUNT]; Operation::COUNT]>,
    /// `a2_store_call_duration_seconds` by operation.
    durations: [OnceLock<Histogram>; Operation::COUNT],
    /// `a2_store_superseded_total` by operation.
    superseded: [OnceLock<Counter>; Operation::COUNT],
    claimed: OnceLock<Counter>,
    completions: OnceLock<Counter>,
    failures: OnceLock<Counter>,
    dead_letters: OnceLock<Counter>,
    busy: OnceLock<Counter>,
    /// `a2_store_sessions_deleted_total`: by `delete_session`, by `prune`.
    deleted: [OnceLock<Counter>; 2],
    /// `a2_store_prune_pages_total`: not a dry run, a dry run.
    prune_pages: [OnceLock<Counter>; 2],
}

impl Handles {
    /// The handles of a store labelled `backend`; describes the metrics to
    /// the installed recorder (HELP lines in Prometheus).
    pub(super) fn new(backend: &Arc<str>) -> Self {
        describe();
        Self {
            backend: SharedString::from_shared(backend.clone()),
            calls: Box::new(array::from_fn(|_| array::from_fn(|_| OnceLock::new()))),
            durations: array::from_fn(|_| OnceLock::new()),
            superseded: array::from_fn(|_| OnceLock::new()),
            claimed: OnceLock::new(),
            completions: OnceLock::new(),
            failures: OnceLock::new(),
            dead_letters: OnceLock::new(),
            busy: OnceLock::new(),
            deleted: array::from_fn(|_| OnceLock::new()),
            prune_pages: array::from_fn(|_| OnceLock::new()),
        }
    }

    /// A per-backend counter, registered on first use.
    fn per_backend(&self, slot: &OnceLock<Counter>, name: &'static str, value: u64) {
        if value > 0 {
            slot.get_or_init(|| counter!(name, "backend" => self.backend.clone()))
                .increment(value);
        }
    }

    /// Records one finished call.
    pub(super) fn record(&self, operation: Operation, outcome: &Outcome, elapsed: Duration) {
        let op = operation.as_str();
        let index = operation as usize;
        let label = outcome.label;
        if let Some(slot) = self
            .calls
            .get(index)
            .and_then(|row| row.get(label as usize))
        {
            slot.get_or_init(|| {
                counter!(
                    "a2_store_calls_total",
                    "operation" => op,
                    "backend" => self.backend.clone(),
                    "outcome" => label.as_str()
                )
            })
            .increment(1);
        }
        if let Some(slot) = self.durations.get(index) {
            slot.get_or_init(|| {
                histogram!(
                    "a2_store_call_duration_seconds",
                    "operation" => op,
                    "backend" => self.backend.clone()
                )
            })
            .record(elapsed.as_secs_f64());
        }
        if let Some(code) = outcome.error {
            // Rare: looked up each time rather than kept per code.
            counter!(
                "a2_store_errors_total",
                "operation" => op,
                "backend" => self.backend.clone(),
                "code" => code.as_str()
            )
            .increment(1);
        }
        self.per_backend(
            &self.claimed,
            "a2_store_claimed_heads_total",
            outcome.claimed,
        );
        self.per_backend(
            &self.completions,
            "a2_store_completions_total",
            outcome.completed,
        );
        self.per_backend(&self.failures, "a2_store_failures_total", outcome.failed);
        self.per_backend(
            &self.dead_letters,
            "a2_store_dead_letters_total",
            outcome.dead_lettered,
        );
        self.per_backend(&self.busy, "a2_store_busy_total", u64::from(outcome.busy));
        if outcome.deleted > 0 {
            let slot = usize::from(operation == Operation::Prune);
            if let Some(slot) = self.deleted.get(slot) {
                slot.get_or_init(|| {
                    counter!(
                        "a2_store_sessions_deleted_total",
                        "operation" => op,
                        "backend" => self.backend.clone()
                    )
                })
                .increment(outcome.deleted);
            }
        }
        if let Some(dry_run) = outcome.pruned_page {
            if let Some(slot) = self.prune_pages.get(usize::from(dry_run)) {
                slot.get_or_init(|| {
                    counter!(
                        "a2_store_prune_pages_total",
                        "backend" => self.backend.clone(),
                        "dry_run" => if dry_run { "true" } else { "false" }
                    )
                })
                .increment(1);
            }
        }
        if outcome.superseded > 0 {
            if let Some(slot) = self.superseded.get(index) {
                slot.get_or_init(|| {
                    counter!(
                        "a2_store_superseded_total",
                        "operation" => op,
                        "backend" => self.backend.clone()
                    )
                })
                .increment(outcome.superseded);
            }
        }
    }
}

/// Describes every metric of the layer to the installed recorder.
fn describe() {
    describe_counter!(
        "a2_store_calls_total",
        Unit::Count,
        "Store calls by operation, backend and outcome"
    );
    describe_counter!(
        "a2_store_errors_total",
        Unit::Count,
        "Store calls that returned an error, by operation, backend and error code"
    );
    describe_histogram!(
        "a2_store_call_duration_seconds",
        Unit::Seconds,
        "Latency of store calls by operation and backend"
    );
    describe_counter!(
        "a2_store_claimed_heads_total",
        Unit::Count,
        "Heads handed out by claim_available"
    );
    describe_counter!(
        "a2_store_completions_total",
        Unit::Count,
        "Attempts completed by complete_attempt"
    );
    describe_counter!(
        "a2_store_failures_total",
        Unit::Count,
        "Failures counted by fail_attempt"
    );
    describe_counter!(
        "a2_store_dead_letters_total",
        Unit::Count,
        "Heads dead-lettered by fail_attempt or by claim_available on an expired claim"
    );
    describe_counter!(
        "a2_store_busy_total",
        Unit::Count,
        "Busy answers of claim_available"
    );
    describe_counter!(
        "a2_store_sessions_deleted_total",
        Unit::Count,
        "Sessions deleted, by delete_session or by prune"
    );
    describe_counter!(
        "a2_store_prune_pages_total",
        Unit::Count,
        "Pages returned by prune, dry runs apart"
    );
    describe_counter!(
        "a2_store_superseded_total",
        Unit::Count,
        "Superseded attempts reported by complete_attempt, fail_attempt and renew_claims"
    );
}
