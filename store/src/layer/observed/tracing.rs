//! The `tracing` half of the layer: one span per call.

use std::time::Duration;

use a2_store_api::ErrorCode;
use tracing::field::Empty;
use tracing::{info_span, record_all, Span};

use super::{Call, Operation, Outcome};

/// Opens the span of `call`, with the fields known before it runs.
pub(super) fn span(call: &Call<'_>, backend: &str) -> Span {
    // One callsite per operation, so each span is named after its method.
    macro_rules! spans {
        ($($variant:ident => $name:literal),* $(,)?) => {
            match call.operation {
                $(Operation::$variant => info_span!(
                    target: "a2_store",
                    concat!("a2_store.", $name),
                    operation = $name,
                    backend,
                    session = call.session,
                    consumer = call.consumer,
                    lane = call.lane,
                    index = call.index,
                    attempt = call.attempt,
                    holder = call.holder,
                    dry_run = call.dry_run,
                    outcome = Empty,
                    error = Empty,
                    duration_ms = Empty,
                    claimed = Empty,
                    dead_lettered = Empty,
                    superseded = Empty,
                    deleted = Empty,
                    examined = Empty,
                ),)*
            }
        };
    }
    let span = spans! {
        Append => "append",
        ClaimAvailable => "claim_available",
        RenewClaims => "renew_claims",
        CompleteAttempt => "complete_attempt",
        FailAttempt => "fail_attempt",
        DeadLetters => "dead_letters",
        Redrive => "redrive",
        Clear => "clear",
        Reclaim => "reclaim",
        Read => "read",
        WakeLog => "wake_log",
        Cursors => "cursors",
        Subscribe => "subscribe",
        WriteState => "write_state",
        ReadState => "read_state",
        SetPresence => "set_presence",
        ReadPresence => "read_presence",
        Sessions => "sessions",
        ClaimWork => "claim_work",
        ListWork => "list_work",
        Reschedule => "reschedule",
        Pause => "pause",
        Resume => "resume",
        Pauses => "pauses",
        RedriveAll => "redrive_all",
        Fork => "fork",
        DeleteSession => "delete_session",
        Prune => "prune",
        RewritePayloads => "rewrite_payloads",
    };
    span
}

/// Records how the call ended on its span, in one record (a subscriber
/// formats the new fields once).
pub(super) fn finish(span: &Span, operation: Operation, outcome: &Outcome, elapsed: Duration) {
    let claims = matches!(operation, Operation::ClaimAvailable | Operation::ClaimWork);
    let retention = matches!(operation, Operation::DeleteSession | Operation::Prune);
    let prune = operation == Operation::Prune && outcome.error.is_none();
    record_all!(
        span,
        outcome = outcome.label.as_str(),
        duration_ms = millis(elapsed),
        error = outcome.error.map(ErrorCode::as_str),
        claimed = claims.then_some(outcome.claimed),
        dead_lettered = claims.then_some(outcome.dead_lettered),
        superseded = (outcome.superseded > 0).then_some(outcome.superseded),
        deleted = (retention && outcome.error.is_none()).then_some(outcome.listed),
        examined = prune.then_some(outcome.examined),
    );
}

/// A duration in (fractional) milliseconds.
fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1_000.0
}
