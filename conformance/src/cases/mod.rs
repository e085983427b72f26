//! The cases, one module per area of the contract, and the ONE list of them
//! ([`__a2_cases!`](crate::__a2_cases)) that both the [`suite!`](crate::suite)
//! macro and the [`run`](crate::run) function are generated from.

use std::future::Future;
use std::pin::Pin;

use crate::support::{CaseResult, Cx};

pub(crate) mod append;
pub(crate) mod claims;
pub(crate) mod clear;
pub(crate) mod complete;
pub(crate) mod concurrency;
pub(crate) mod cursors;
pub(crate) mod declarations;
pub(crate) mod example;
pub(crate) mod fail;
pub(crate) mod fork;
pub(crate) mod generated_ids;
pub(crate) mod hostile;
pub(crate) mod multi;
pub(crate) mod pause;
pub(crate) mod precedence;
pub(crate) mod presence;
pub(crate) mod read;
pub(crate) mod renew;
pub(crate) mod robustness;
pub(crate) mod schedule;
pub(crate) mod snapshots;
pub(crate) mod subscribe;
pub(crate) mod validation;
pub(crate) mod work;

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
///
/// To add a case: write `pub(crate) async fn <behaviour_it_proves>(cx: Cx) ->
/// CaseResult` in the area's module (fresh sessions from
/// `cx.session_id(..)`, time from `cx.advance(..)`, exact expectations with
/// `ensure_eq!`/`ensure_code!`, every expected error or no-op inside
/// `ensure_unchanged!(cx, &s, { .. })`), then list it here. Names are unique
/// across areas: they are the test names.
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
                append::index_zero_is_at_the_clear_of_an_uncleared_session,
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
                append::append_empty_batch_precedes_origin_check,
                append::append_replay_precedes_origin_check,
                append::append_replay_precedes_cause_fence,
                claims::claim_returns_heads_by_index_consumer_lane,
                claims::claim_sets_bookkeeping_and_reports_log_head,
                claims::claim_with_expires_at_sets_lease_end,
                claims::claim_on_busy_heads_is_busy_with_earliest_expiry,
                claims::claim_without_work_is_settled,
                claims::claim_right_after_a_refused_call_returns_every_head,
                claims::claim_skips_heads_above_through,
                claims::claim_excludes_event_cursor_by_index,
                claims::claim_excludes_lane_cursor_whatever_its_head,
                claims::claim_excludes_log_cursor_whatever_its_head,
                claims::claim_limit_takes_lowest_and_leaves_rest,
                claims::served_claim_orders_ties_by_consumer_then_lane,
                claims::claim_never_hands_busy_head_to_anyone,
                claims::expired_claim_counts_failure_and_is_reclaimed,
                claims::expired_claim_at_max_failures_is_dead_lettered,
                claims::dead_letter_on_expiry_not_counted_against_limit,
                claims::claim_without_max_failures_never_dead_letters,
                claims::claimed_heads_carry_clear_index_after_clear,
                claims::claims_are_per_session,
                claims::busy_retry_at_ignores_skipped_heads,
                claims::expired_claims_dead_letter_when_count_reaches_max,
                clear::clear_appends_marker_event,
                clear::clear_of_new_session_marks_index_one,
                clear::clear_with_matching_last_index_clears,
                clear::clear_with_other_last_index_is_not_cleared,
                clear::clear_fenced_by_current_cause_clears,
                clear::clear_fenced_by_stale_cause_is_superseded,
                clear::clear_drops_event_and_lane_cursors_parks_log_cursors,
                clear::log_cursor_resumes_after_clear,
                clear::ids_below_clear_are_reusable,
                clear::attempts_below_clear_are_superseded,
                clear::rows_below_clear_stay_readable,
                clear::reclaim_without_clear_is_done,
                clear::reclaim_deletes_in_batches_never_the_marker,
                clear::appends_continue_after_reclaim,
                clear::complete_of_reclaimed_index_is_superseded,
                clear::marker_id_stays_taken_after_clear,
                clear::second_clear_moves_the_clear_index,
                complete::complete_advances_lane_to_next_head,
                complete::complete_appends_returned_events_with_cause,
                complete::complete_returned_events_fan_out_to_other_consumers,
                complete::complete_replay_returns_stored_rows,
                complete::complete_replay_without_returned_events,
                complete::complete_replay_with_different_ids_is_partial_duplicate,
                complete::complete_replay_with_generated_ids_is_partial_duplicate,
                complete::complete_replay_with_different_content_is_conflict,
                complete::complete_replay_by_other_attempt_is_superseded,
                complete::complete_by_older_attempt_is_superseded,
                complete::complete_after_fail_is_superseded,
                complete::complete_of_dead_lettered_head_is_superseded,
                complete::complete_after_clear_is_superseded,
                complete::complete_unknown_index_is_no_such_event,
                complete::complete_without_cursor_on_existing_event_is_superseded,
                complete::complete_with_stored_returned_id_is_partial_duplicate,
                complete::complete_after_unreclaimed_expiry_succeeds,
                complete::lane_cursor_keeps_completion_records,
                complete::log_cursor_keeps_only_latest_completion,
                complete::complete_advances_log_cursor_to_next_taken_event,
                complete::log_cursor_takes_events_returned_by_its_completion,
                complete::complete_of_skipped_head_is_superseded,
                complete::event_cursor_completion_replays,
                complete::completion_records_end_at_clear,
                complete::complete_overrides_returned_event_cause,
                complete::completion_can_queue_on_its_own_lane,
                concurrency::concurrent_claims_never_hand_out_a_head_twice,
                concurrency::concurrent_appends_keep_indexes_contiguous,
                concurrency::concurrent_completions_apply_once,
                concurrency::concurrent_identical_appends_write_once,
                concurrency::concurrent_sessions_stay_independent,
                cursors::event_cursors_run_concurrently,
                cursors::event_cursor_position_is_index_minus_one,
                cursors::event_cursor_finishes_after_completion,
                cursors::lane_cursor_hands_out_one_head_at_a_time,
                cursors::lane_cursor_queues_across_batches,
                cursors::separate_lanes_run_concurrently,
                cursors::drained_lane_cursor_stays_listed_without_head,
                cursors::lane_target_repeated_in_one_event_is_queued_once,
                cursors::lane_cursor_created_after_clear_starts_at_clear,
                cursors::log_cursor_takes_every_type_without_filter,
                cursors::log_cursor_skips_types_it_does_not_take,
                cursors::log_cursor_without_backfill_starts_at_declaring_batch,
                cursors::log_cursor_with_backfill_starts_from_beginning,
                cursors::log_cursor_with_backfill_starts_after_last_clear,
                cursors::log_cursor_not_created_without_taken_type,
                cursors::log_cursor_never_takes_clear_marker,
                cursors::log_declaration_refreshes_types_from_next_advance,
                cursors::log_consumers_follow_the_log_independently,
                cursors::target_on_log_lane_declared_in_same_call_is_invalid,
                cursors::target_on_existing_log_lane_is_invalid,
                cursors::log_declaration_on_target_lane_is_invalid,
                cursors::completion_targeting_log_lane_is_invalid,
                cursors::claim_serves_only_declared_consumers,
                cursors::claim_for_consumers_without_work_is_settled,
                cursors::cursors_sorted_by_consumer_lane_then_event_heads,
                cursors::cursors_report_dispatch_bookkeeping,
                cursors::wake_log_on_empty_session_is_idle,
                cursors::wake_log_on_just_cleared_session_is_idle,
                cursors::wake_log_with_backfill_creates_cursor,
                cursors::wake_log_without_backfill_creates_cursor_at_head,
                cursors::wake_log_refreshes_types_and_wakes_idle_cursor,
                cursors::wake_log_keeps_current_head,
                cursors::completion_creates_declared_log_cursor,
                cursors::claim_declaration_never_creates_log_cursor,
                cursors::complete_declaration_refreshes_log_types,
                cursors::redrive_declaration_refreshes_log_types,
                cursors::log_and_target_lanes_coexist_when_distinct,
                cursors::target_on_lane_created_by_wake_log_is_invalid,
                cursors::dead_lettered_lane_head_blocks_the_lane,
                cursors::retrying_lane_head_keeps_the_lane_busy,
                cursors::log_consumer_with_empty_types_takes_nothing,
                cursors::wake_log_with_nothing_taken_creates_headless_cursor,
                declarations::empty_append_declaration_refreshes_log_types,
                declarations::replay_append_declaration_refreshes_log_types,
                declarations::superseded_completion_declaration_refreshes_log_types,
                declarations::replayed_completion_declaration_refreshes_log_types,
                declarations::unredriven_redrive_declaration_refreshes_log_types,
                declarations::claim_declaration_refreshes_log_types,
                declarations::wake_log_declaration_refreshes_log_types,
                declarations::failed_call_declaration_refreshes_nothing,
                example::spec_worked_example,
                example::spec_worked_example_expired_claim_is_retried,
                fail::fail_counts_failure_and_releases_holder,
                fail::fail_with_retry_delay_keeps_head_busy,
                fail::fail_at_max_failures_dead_letters,
                fail::fail_without_max_failures_never_dead_letters,
                fail::fail_repeat_is_idempotent,
                fail::fail_of_older_attempt_is_superseded,
                fail::fail_after_completion_is_superseded,
                fail::fail_after_clear_is_superseded,
                fail::fail_unknown_index_is_no_such_event,
                fail::fail_of_attempt_dead_lettered_on_expiry_is_superseded,
                fail::fail_with_negative_retry_delay_is_invalid,
                fail::dead_letters_sorted_by_index_consumer_lane,
                fail::dead_letters_empty_after_clear,
                fail::redrive_retry_keeps_attempt_count,
                fail::redrive_skip_advances_cursor,
                fail::redrive_skip_finishes_event_cursor,
                fail::redrive_without_dead_head_is_not_redriven,
                fail::redrive_has_pending_respects_consumers,
                fail::redrive_takes_the_first_dead_letter_at_an_index,
                fail::fail_after_unreclaimed_expiry_counts,
                fail::dead_letters_carry_clear_index_after_clear,
                fail::redriven_head_completes_and_lane_advances,
                generated_ids::lane_conflict_append_draws_no_ids,
                generated_ids::partial_duplicate_append_draws_no_ids,
                generated_ids::superseded_cause_append_draws_no_ids,
                generated_ids::cleared_origin_append_draws_no_ids,
                generated_ids::superseded_completion_draws_no_ids,
                generated_ids::lane_conflict_completion_draws_no_ids,
                precedence::append_checks_cause_before_lane_conflicts,
                precedence::append_checks_origin_before_lane_conflicts,
                precedence::complete_supersession_precedes_duplicate_check,
                precedence::complete_validates_before_clear_check,
                precedence::fail_validates_before_lookup,
                precedence::clear_checks_last_index_after_fence,
                presence::presence_write_is_read_back,
                presence::presence_rows_sorted_by_participant_then_field,
                presence::presence_later_at_wins,
                presence::presence_older_at_is_skipped,
                presence::presence_equal_at_newer_call_wins,
                presence::presence_expired_entries_are_not_read,
                presence::presence_expired_entry_never_blocks,
                presence::presence_ttl_counts_from_store_clock,
                presence::presence_null_is_a_tombstone,
                presence::presence_tombstone_blocks_older_writes,
                presence::presence_expired_tombstone_no_longer_blocks,
                presence::presence_is_per_session_and_participant,
                presence::presence_invalid_input_writes_nothing,
                read::read_defaults_to_whole_log,
                read::read_respects_after_and_through,
                read::read_limit_caps_rows,
                read::read_bounds_beyond_head_are_empty_or_clamped,
                read::read_through_below_after_is_invalid,
                read::read_of_unknown_session_is_empty,
                read::sessions_lists_written_sessions_by_id,
                read::sessions_page_with_after_and_limit,
                read::sessions_omit_sessions_without_events,
                read::sessions_are_isolated,
                read::sessions_list_a_session_holding_only_a_marker,
                renew::renew_extends_held_claim,
                renew::renew_with_expires_at_sets_lease_end,
                renew::renew_by_other_holder_is_neither,
                renew::renew_of_expired_claim_is_neither,
                renew::renew_after_completion_is_superseded,
                renew::renew_of_finished_event_cursor_is_superseded,
                renew::renew_after_clear_is_superseded,
                renew::renew_of_older_attempt_is_superseded,
                renew::renew_of_index_not_reached_is_neither,
                renew::renew_of_unknown_cursor_is_neither,
                renew::renew_of_dead_lettered_head_is_neither,
                renew::renew_reports_refs_in_index_order,
                renew::renew_with_invalid_lease_is_invalid,
                renew::renew_after_fail_is_neither,
                renew::lease_handover_supersedes_the_old_holder,
                robustness::extreme_numbers_never_panic,
                robustness::odd_strings_round_trip,
                robustness::nul_and_huge_strings_are_stored_or_rejected,
                robustness::empty_requests_are_no_ops,
                hostile::hostile_strings_round_trip_through_every_operation,
                hostile::hostile_log_declarations_round_trip,
                hostile::sixteen_mib_payload_is_stored_or_refused,
                hostile::deeply_nested_payload_is_invalid,
                hostile::deeply_nested_state_is_invalid,
                hostile::deeply_nested_presence_is_invalid,
                hostile::numbers_at_their_limits_are_typed,
                snapshots::read_state_without_writes_is_empty,
                snapshots::read_state_returns_most_recent_write,
                snapshots::head_snapshot_is_most_recent_even_if_lower,
                snapshots::writes_of_one_call_apply_in_index_order,
                snapshots::read_state_never_returns_above_at,
                snapshots::pinned_checkpoint_readable_while_pin_holds,
                snapshots::pin_holds_through_claims_and_failures,
                snapshots::pin_released_when_head_advances,
                snapshots::pin_released_on_dead_letter,
                snapshots::pin_released_on_clear,
                snapshots::pin_on_head_not_held_keeps_nothing,
                snapshots::highest_pinned_checkpoint_wins,
                snapshots::read_state_never_returns_below_clear,
                snapshots::writes_below_clear_are_ignored,
                snapshots::snapshots_are_per_reducer,
                subscribe::subscribe_delivers_backlog_then_live,
                subscribe::subscribe_after_skips_backlog,
                subscribe::subscribe_after_beyond_head_waits_for_it,
                subscribe::subscribe_to_new_session_delivers_first_events,
                subscribe::subscribe_has_no_gap_or_duplicate_while_appends_race,
                subscribe::subscribe_sees_clear_marker,
                subscribe::subscribe_sees_completion_returned_events,
                subscribe::subscribe_sees_only_its_session,
                subscribe::subscribe_skips_failed_appends,
                subscribe::subscription_ends_when_store_is_dropped,
                subscribe::subscribe_after_reclaim_delivers_what_remains,
                validation::empty_session_id_is_invalid_for_every_call,
                validation::empty_holder_is_invalid,
                validation::empty_consumer_name_is_invalid,
                validation::empty_reducer_name_is_invalid,
                validation::empty_event_type_is_invalid,
                validation::empty_supplied_id_is_invalid,
                validation::target_with_empty_lane_is_invalid,
                validation::reserved_clear_type_is_invalid,
                validation::log_declaration_with_empty_lane_is_invalid,
                validation::consumer_declared_twice_differently_is_invalid,
                validation::wake_log_without_log_declaration_is_invalid,
                validation::claim_with_invalid_lease_is_invalid,
                validation::append_validates_before_replay_and_empty_batch,
                validation::claim_with_zero_limit_is_invalid,
                work::work_claim_with_bad_input_is_invalid,
                work::list_work_with_bad_input_is_invalid,
                work::work_claim_serves_longest_waiting_session_first,
                work::work_claim_rotates_a_backlog_behind_the_others,
                work::work_claim_respects_its_limits,
                work::work_claim_serves_a_batch_of_sessions_as_claims_of_one,
                work::work_claim_serves_only_given_consumers,
                work::work_claim_serves_only_listed_sessions,
                work::work_claim_without_work_is_settled,
                work::work_claim_on_busy_heads_is_busy_until_the_earliest_expiry,
                work::work_claim_counts_expired_leases_and_dead_letters,
                work::work_claim_finds_work_after_every_change,
                work::work_claim_finds_nothing_after_clear,
                work::per_session_claims_update_the_work_index,
                work::concurrent_work_claims_never_share_a_head,
                work::work_wait_wakes_on_append_to_a_new_session,
                work::work_wait_wakes_when_a_lease_expires,
                work::work_wait_ends_with_busy_or_settled,
                work::dropped_work_wait_leaves_nothing_behind,
                work::list_work_reports_counts_and_waiting_time,
                work::list_work_pages_by_session_id,
                work::list_work_lists_dead_letter_holders,
                work::work_claim_follows_renewed_leases,
                schedule::scheduled_head_is_busy_until_its_time,
                schedule::scheduled_head_wakes_a_waiting_work_claim,
                schedule::scheduled_time_in_the_past_runs_at_once,
                schedule::scheduled_target_times_must_not_be_negative,
                schedule::repeated_scheduled_targets_take_the_latest_time,
                schedule::scheduled_head_holds_its_lane,
                schedule::log_heads_are_never_scheduled,
                schedule::reschedule_moves_a_head_that_has_not_run,
                schedule::reschedule_cancels_a_head_and_the_lane_moves_on,
                schedule::reschedule_moves_and_cancels_queued_lane_entries,
                schedule::reschedule_of_a_started_head_changes_nothing,
                schedule::reschedule_is_fenced_by_its_cause,
                pause::pause_rejects_past_ends_and_unknown_consumers,
                pause::paused_consumer_is_not_claimed_or_pending,
                pause::timed_pause_ends_by_itself,
                pause::pause_lets_held_leases_run_out,
                pause::store_wide_pause_holds_every_session,
                pause::resume_wakes_a_waiting_work_claim,
                pause::resume_lifts_one_scope,
                pause::pauses_are_listed,
                fail::redrive_names_the_lane,
                fail::redrive_all_filters_and_pages,
                fail::redrive_all_skips_and_lanes_move_on,
                fork::fork_copies_the_log_through_an_index,
                fork::fork_of_a_cleared_session_starts_at_its_marker,
                fork::fork_has_no_cursors_and_continues_its_log,
                fork::fork_rejects_bad_input,
            ]
            pair: [
                multi::second_instance_sees_first_instance_appends,
                multi::claims_are_exclusive_across_instances,
                multi::concurrent_claims_across_instances_never_share_a_head,
                multi::completion_applies_once_across_instances,
                multi::completion_after_renewal_on_other_instance_applies,
                multi::late_completion_after_reclaim_on_other_instance_is_superseded,
                multi::completion_after_failure_on_other_instance_is_superseded,
                multi::failure_after_renewal_or_reclaim_on_other_instance,
                multi::clear_on_one_instance_fences_the_other,
                multi::subscribe_sees_appends_from_other_instance,
                multi::work_wait_wakes_on_append_from_other_instance,
                multi::work_claims_across_instances_never_share_a_head,
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
