//! The cases, one module per area of the contract, and the ONE list of them
//! ([`__a2_cases!`](crate::__a2_cases)) that both the [`suite!`](crate::suite)
//! macro and the [`run`](crate::run) function are generated from.

use std::future::Future;
use std::pin::Pin;

use crate::support::{CaseResult, Cx};

pub(crate) mod append;

/// A case: its name, area, whether it needs a store pair, and its body.
pub(crate) struct CaseDef {
    /// The case's name, unique in the suite.
    pub name: &'static str,
    /// The module (area of the contract) it lives in.
    pub area: &'static str,
    /// Multi-instance case: the runner asks the factory for a store pair.
    pub needs_pair: bool,
    /// The body.
    pub run: fn(Cx) -> Pin<Box<dyn Future<Output = CaseResult> + Send>>,
}

/// The one list of cases. Calls `$crate::$callback!` with `{ args }`, then
/// `single: [area::case, ...]` (cases on one store) and `pair: [...]`
/// (multi-instance cases). Adding a case here reaches every backend that
/// expands [`suite!`](crate::suite) and every [`run`](crate::run).
#[doc(hidden)]
#[macro_export]
macro_rules! __a2_cases {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            single: [
                append::append_assigns_contiguous_indexes_from_one,
                append::append_generates_ids_when_absent,
                append::append_keeps_supplied_ids,
                append::append_stamps_created_at_from_store_clock,
                append::append_empty_batch_reports_has_pending,
                append::append_rejects_duplicate_ids_within_batch,
                append::append_replays_batch_whose_ids_are_all_stored,
                append::append_replay_with_different_content_is_conflict,
                append::append_partial_duplicate_batch_writes_nothing,
                append::append_ids_are_per_session,
                append::append_origin_index_at_clear_is_session_cleared,
                append::append_origin_index_below_clear_is_session_cleared,
                append::append_origin_index_above_clear_is_accepted,
                append::append_checks_origin_before_cause,
                append::append_with_current_cause_is_accepted,
                append::append_with_stale_attempt_cause_is_superseded,
                append::append_with_dead_lettered_cause_is_superseded,
                append::append_with_completed_cause_is_superseded,
                append::append_with_cause_below_clear_is_superseded,
                append::append_with_unknown_cause_is_superseded,
                append::append_with_failed_attempt_cause_is_current_until_reclaimed,
                append::append_fenced_batch_is_atomic,
                append::append_has_pending_respects_consumers,
                append::append_has_pending_ignores_dead_letters,
                append::append_has_pending_counts_busy_heads,
            ]
            pair: [
            ]
        }
    };
}

/// Expands the case list into the table the runner uses.
#[doc(hidden)]
#[macro_export]
macro_rules! __a2_case_table {
    (
        {}
        single: [$($sa:ident :: $sc:ident),* $(,)?]
        pair: [$($pa:ident :: $pc:ident),* $(,)?]
    ) => {
        /// Every case, in suite order.
        pub(crate) static CASES: &[CaseDef] = &[
            $(CaseDef {
                name: stringify!($sc),
                area: stringify!($sa),
                needs_pair: false,
                run: |cx| Box::pin($crate::cases::$sa::$sc(cx)),
            },)*
            $(CaseDef {
                name: stringify!($pc),
                area: stringify!($pa),
                needs_pair: true,
                run: |cx| Box::pin($crate::cases::$pa::$pc(cx)),
            },)*
        ];
    };
}

__a2_cases!(__a2_case_table {});
