//! Scheduled heads: targets with a not-before time, and moving or
//! cancelling a head before it runs.
//!
//! A target may carry a [`NotBefore`]. The head it creates is busy until
//! that time, exactly like a head in a retry delay: its `claim_expires_at`
//! holds the time and it has no holder, so it is not claimable, is reported
//! by `Busy { retry_at }`, counts for `has_pending`, and the work index
//! finds it at that time. A time already reached is no schedule at all: the
//! head is claimable at once and stored as if it had none.
//!
//! On a lane the schedule is kept with the queued index and applies when
//! the lane reaches it ([`Dispatch::scheduled`]): a scheduled head holds
//! its lane, and later events on the lane wait behind it. A lane is the
//! order its handler sees events in; letting a later event pass would
//! reorder it. Work that must not wait for a reminder goes on another lane
//! or an event cursor.
//!
//! [`Store::reschedule`](crate::Store::reschedule) moves or cancels a head
//! that has never been claimed: a cursor's head, or an index still queued
//! on a lane. [`RescheduleRequest::verdict`] decides what it does.

use crate::error::{Result, StoreError};
use crate::types::{
    CursorKind, Dispatch, NotBefore, RescheduleRequest, RescheduleResult, ScheduleChange, Target,
};

impl NotBefore {
    /// The time it names, ms, for a write at `now_ms` (a delay saturates).
    pub fn resolve(self, now_ms: i64) -> i64 {
        match self {
            Self::AtMs(at) => at,
            Self::AfterMs(delay) => now_ms.saturating_add(delay),
        }
    }

    /// The time to store for a write at `now_ms`: `None` when it is
    /// already reached (claimable at once).
    pub fn due_after(self, now_ms: i64) -> Option<i64> {
        Some(self.resolve(now_ms)).filter(|at| *at > now_ms)
    }

    /// Neither an absolute time nor a delay may be negative.
    pub fn check(self) -> Result<()> {
        match self {
            Self::AtMs(at) if at < 0 => Err(StoreError::invalid_input(format!(
                "not_before at_ms must not be negative, got {at}"
            ))),
            Self::AfterMs(delay) if delay < 0 => Err(StoreError::invalid_input(format!(
                "not_before after_ms must not be negative, got {delay}"
            ))),
            _ => Ok(()),
        }
    }
}

impl Target {
    /// The not-before time to store for this target appended at `now_ms`
    /// (`None`: claimable at once).
    pub fn due_at(&self, now_ms: i64) -> Option<i64> {
        self.not_before.and_then(|at| at.due_after(now_ms))
    }
}

/// The not-before of one queued index that several targets of one event
/// name (a cursor queues the index once): the latest of them, so a head is
/// never claimable before any of its targets asked. `None` when one of
/// them is unscheduled and none is in the future.
pub fn merged_due_at<'a>(
    targets: impl IntoIterator<Item = &'a Target>,
    now_ms: i64,
) -> Option<i64> {
    targets
        .into_iter()
        .filter_map(|target| target.due_at(now_ms))
        .max()
}

impl Dispatch {
    /// The bookkeeping of a head its cursor has just reached: fresh, and
    /// busy until `not_before` when it was scheduled.
    pub fn scheduled(not_before: Option<i64>) -> Self {
        Self {
            claim_expires_at: not_before,
            ..Self::default()
        }
    }

    /// Whether the head has never run: never claimed, not dead-lettered.
    /// Only such a head can be rescheduled or cancelled.
    pub fn not_started(&self) -> bool {
        self.attempt_count == 0 && self.claim_holder.is_none() && !self.is_dead_lettered()
    }
}

/// Where a [`RescheduleRequest`] found its index, as a backend reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduledAt<'a> {
    /// The index is the head of a cursor of this kind, with this bookkeeping.
    Head(CursorKind, &'a Dispatch),
    /// The index is queued on the lane behind its head.
    Queued,
    /// A cursor of this kind exists, but nothing waits on it at the index.
    Elsewhere(CursorKind),
    /// No cursor `(consumer, lane)` (or event cursor at the index) exists;
    /// `event_exists`: the session has a row at the index.
    NoCursor {
        /// Whether the session holds a row at the index.
        event_exists: bool,
    },
}

/// What [`Store::reschedule`](crate::Store::reschedule) does (see
/// [`RescheduleRequest::verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RescheduleStep {
    /// Set the head's bookkeeping to [`Dispatch::scheduled`]`(not_before)`.
    MoveHead(Option<i64>),
    /// Advance the cursor past its head, as a redrive skip does.
    CancelHead,
    /// Store `not_before` with the queued index.
    MoveQueued(Option<i64>),
    /// Take the index out of the lane's queue.
    CancelQueued,
    /// Change nothing and answer this.
    Answer(RescheduleResult),
}

impl RescheduleStep {
    /// The answer the call gives once the step is applied.
    pub fn result(self) -> RescheduleResult {
        match self {
            Self::MoveHead(not_before) | Self::MoveQueued(not_before) => {
                RescheduleResult::Rescheduled { not_before }
            }
            Self::CancelHead | Self::CancelQueued => RescheduleResult::Cancelled,
            Self::Answer(result) => result,
        }
    }

    /// Whether the step changes anything.
    pub fn changes(self) -> bool {
        !matches!(self, Self::Answer(_))
    }
}

impl RescheduleRequest {
    /// What this request does at `now_ms` in a session whose clear index is
    /// `clear_index`, its index found `at` (the cause, if any, is fenced
    /// before, with [`crate::dispatch::fence`]). Precedence: a log cursor is
    /// `InvalidInput`; at or below the clear `Gone`; no cursor `Gone` when
    /// the row exists, else `NoSuchEvent`; a head that has run `Started`;
    /// a head or queued index that has not run is moved or cancelled.
    pub fn verdict(
        &self,
        clear_index: u64,
        at: ScheduledAt<'_>,
        now_ms: i64,
    ) -> Result<RescheduleStep> {
        let log = matches!(
            at,
            ScheduledAt::Head(CursorKind::Log, _) | ScheduledAt::Elsewhere(CursorKind::Log)
        );
        if log {
            return Err(StoreError::invalid_input(format!(
                "consumer '{}' follows lane '{}' as a log cursor: log heads are never scheduled",
                self.consumer,
                self.lane.as_deref().unwrap_or_default()
            )));
        }
        let gone = RescheduleStep::Answer(RescheduleResult::Gone);
        if crate::dispatch::cleared(self.index, clear_index) {
            return Ok(gone);
        }
        let due = match self.change {
            ScheduleChange::To(at) => Some(at.due_after(now_ms)),
            ScheduleChange::Cancel => None,
        };
        Ok(match at {
            ScheduledAt::NoCursor { event_exists } => {
                crate::dispatch::without_cursor(&self.session_id, self.index, event_exists)?;
                gone
            }
            ScheduledAt::Elsewhere(_) => gone,
            ScheduledAt::Head(_, dispatch) if !dispatch.not_started() => {
                RescheduleStep::Answer(RescheduleResult::Started)
            }
            ScheduledAt::Head(..) => match due {
                Some(not_before) => RescheduleStep::MoveHead(not_before),
                None => RescheduleStep::CancelHead,
            },
            ScheduledAt::Queued => match due {
                Some(not_before) => RescheduleStep::MoveQueued(not_before),
                None => RescheduleStep::CancelQueued,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn request(change: ScheduleChange) -> RescheduleRequest {
        RescheduleRequest {
            incarnation: None,
            session_id: "s".into(),
            consumer: "c".into(),
            lane: Some("L".into()),
            index: 5,
            change,
            cause: None,
        }
    }

    #[test]
    fn times_resolve_and_past_times_run_at_once() {
        assert_eq!(NotBefore::AfterMs(10).resolve(100), 110);
        assert_eq!(NotBefore::AtMs(90).due_after(100), None);
        assert_eq!(NotBefore::AtMs(100).due_after(100), None);
        assert_eq!(NotBefore::AtMs(101).due_after(100), Some(101));
        assert_eq!(NotBefore::AfterMs(i64::MAX).resolve(5), i64::MAX);
        assert!(NotBefore::AfterMs(-1).check().is_err());
        assert!(NotBefore::AtMs(-1).check().is_err());
        let targets = [
            Target::lane("c", "L").not_before_ms(150),
            Target::lane("c", "L"),
            Target::lane("c", "L").not_before_ms(120),
        ];
        assert_eq!(merged_due_at(&targets, 100), Some(150));
        assert_eq!(merged_due_at(&targets[1..2], 100), None);
        assert_eq!(Dispatch::scheduled(Some(7)).busy_until(5), Some(7));
    }

    #[test]
    fn only_heads_that_never_ran_move() {
        let fresh = Dispatch::scheduled(Some(200));
        let started = Dispatch {
            attempt_count: 1,
            claim_expires_at: Some(300),
            ..Dispatch::default()
        };
        let later = request(ScheduleChange::To(NotBefore::AtMs(500)));
        let head = ScheduledAt::Head(CursorKind::Lane, &fresh);
        assert_eq!(
            later.verdict(0, head, 100).unwrap(),
            RescheduleStep::MoveHead(Some(500))
        );
        let now = request(ScheduleChange::To(NotBefore::AtMs(50)));
        assert_eq!(
            now.verdict(0, head, 100).unwrap(),
            RescheduleStep::MoveHead(None)
        );
        let cancel = request(ScheduleChange::Cancel);
        assert_eq!(
            cancel.verdict(0, head, 100).unwrap(),
            RescheduleStep::CancelHead
        );
        assert_eq!(
            cancel.verdict(0, ScheduledAt::Queued, 100).unwrap(),
            RescheduleStep::CancelQueued
        );
        assert_eq!(
            cancel
                .verdict(0, ScheduledAt::Head(CursorKind::Lane, &started), 100)
                .unwrap(),
            RescheduleStep::Answer(RescheduleResult::Started)
        );
        assert_eq!(
            cancel.verdict(5, head, 100).unwrap().result(),
            RescheduleResult::Gone
        );
        assert_eq!(
            cancel
                .verdict(
                    0,
                    ScheduledAt::NoCursor {
                        event_exists: false
                    },
                    100
                )
                .unwrap_err()
                .code(),
            ErrorCode::NoSuchEvent
        );
        assert_eq!(
            cancel
                .verdict(0, ScheduledAt::Elsewhere(CursorKind::Log), 100)
                .unwrap_err()
                .code(),
            ErrorCode::InvalidInput
        );
    }
}
