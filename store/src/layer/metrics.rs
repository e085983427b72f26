//! The `metrics` half of the layer: counters and a latency histogram per call.

use std::time::Duration;

use metrics::{counter, describe_counter, describe_histogram, histogram, SharedString, Unit};

use super::{Operation, Outcome};

/// Labels every metric of one store carries.
#[derive(Debug, Clone)]
pub(super) struct Labels {
    backend: SharedString,
}

impl Labels {
    /// The labels of a store labelled `backend`; describes the metrics to
    /// the installed recorder (HELP lines in Prometheus).
    pub(super) fn new(backend: &std::sync::Arc<str>) -> Self {
        describe();
        Self {
            backend: SharedString::from_shared(backend.clone()),
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
        "a2_store_superseded_total",
        Unit::Count,
        "Superseded attempts reported by complete_attempt, fail_attempt and renew_claims"
    );
}

/// Records one finished call.
pub(super) fn record(labels: &Labels, operation: Operation, outcome: &Outcome, elapsed: Duration) {
    let backend = &labels.backend;
    let op = operation.as_str();
    counter!(
        "a2_store_calls_total",
        "operation" => op,
        "backend" => backend.clone(),
        "outcome" => outcome.label
    )
    .increment(1);
    histogram!(
        "a2_store_call_duration_seconds",
        "operation" => op,
        "backend" => backend.clone()
    )
    .record(elapsed.as_secs_f64());
    if let Some(code) = outcome.error {
        counter!(
            "a2_store_errors_total",
            "operation" => op,
            "backend" => backend.clone(),
            "code" => code.as_str()
        )
        .increment(1);
    }
    let per_backend = [
        ("a2_store_claimed_heads_total", outcome.claimed),
        ("a2_store_completions_total", outcome.completed),
        ("a2_store_failures_total", outcome.failed),
        ("a2_store_dead_letters_total", outcome.dead_lettered),
        ("a2_store_busy_total", u64::from(outcome.busy)),
    ];
    for (name, value) in per_backend {
        if value > 0 {
            counter!(name, "backend" => backend.clone()).increment(value);
        }
    }
    if outcome.superseded > 0 {
        counter!(
            "a2_store_superseded_total",
            "operation" => op,
            "backend" => backend.clone()
        )
        .increment(outcome.superseded);
    }
}
