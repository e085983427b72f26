//! The per-head state machine: every transition of a head's [`Dispatch`]
//! bookkeeping, and every verdict that decides what a call does to a head.
//!
//! A backend finds the head (by its own indexes), asks these methods what to
//! do, applies the returned change to its copy of the `Dispatch`, and stores
//! it. The transitions:
//!
//! - **claim** ([`Dispatch::claim_step`], [`Dispatch::take`]): an idle or
//!   expired head is claimed (attempt + 1, holder, lease); an expired claim
//!   still held counts a failure first, and reaching `max_failures` that way
//!   dead-letters the head instead;
//! - **busy** ([`Dispatch::busy_until`]): a head whose lease or retry delay
//!   has not ended is not claimable;
//! - **renew** ([`Dispatch::renew_verdict`]);
//! - **fence** ([`Dispatch::fences`], [`fence`]): which attempt may append
//!   or clear;
//! - **complete** ([`Dispatch::complete_verdict`]);
//! - **fail** ([`Dispatch::fail_verdict`], [`Dispatch::record_failure`]);
//! - **redrive** ([`Dispatch::retry`]).

use crate::error::{Result, StoreError};
use crate::types::{
    AppendOptions, Cause, ClaimRequest, ClaimWorkRequest, CompleteRequest, Dispatch, FailOutcome,
    FailRequest, FailResult, HeldClaim, ReclaimResult, RenewRequest,
};

/// What a claim does to a claimable head (see [`Dispatch::claim_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStep {
    /// Claim it for the caller.
    Claim,
    /// Its expired claim reaches `max_failures`: dead-letter it instead.
    DeadLetter,
}

/// What a completion does to the head it names (see [`Dispatch::complete_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteVerdict {
    /// The attempt is current: append its events, record it, advance.
    Apply,
    /// The cursor moved past the index: replay a recorded completion of
    /// this attempt (see [`crate::replay`]), else superseded.
    Replay,
    /// The attempt is no longer current: `Superseded`, nothing changes.
    Superseded,
}

/// What a renewal does to one held claim (see [`Dispatch::renew_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewVerdict {
    /// Still held by the caller: extend its lease.
    Renew,
    /// Can never complete (moved past, newer attempt): report it superseded.
    Superseded,
    /// Not held now, but may still complete (expired, released, not yet
    /// reached): neither renewed nor reported.
    Skip,
}

impl ClaimRequest {
    /// The lease end of claims made at `now_ms`: exactly one of `ttl_ms`
    /// (positive) and `expires_at_ms`.
    pub fn lease_expiry(&self, now_ms: i64) -> Result<i64> {
        lease_expiry(now_ms, self.ttl_ms, self.expires_at_ms)
    }
}

impl ClaimWorkRequest {
    /// The lease end of claims made at `now_ms`: exactly one of `ttl_ms`
    /// (positive) and `expires_at_ms`.
    pub fn lease_expiry(&self, now_ms: i64) -> Result<i64> {
        lease_expiry(now_ms, self.ttl_ms, self.expires_at_ms)
    }
}

impl RenewRequest {
    /// The new lease end of claims renewed at `now_ms`: exactly one of
    /// `ttl_ms` (positive) and `expires_at_ms`.
    pub fn lease_expiry(&self, now_ms: i64) -> Result<i64> {
        lease_expiry(now_ms, self.ttl_ms, self.expires_at_ms)
    }
}

/// The lease expiry from exactly one of `ttl_ms` (positive) and `expires_at_ms`.
pub fn lease_expiry(now_ms: i64, ttl_ms: Option<i64>, expires_at_ms: Option<i64>) -> Result<i64> {
    match (ttl_ms, expires_at_ms) {
        (Some(_), Some(_)) => Err(StoreError::invalid_input(
            "both ttl_ms and expires_at_ms given: pass exactly one",
        )),
        (None, None) => Err(StoreError::invalid_input(
            "neither ttl_ms nor expires_at_ms given: pass exactly one",
        )),
        (Some(ttl), None) if ttl <= 0 => Err(StoreError::invalid_input(format!(
            "ttl_ms must be positive, got {ttl}"
        ))),
        (Some(ttl), None) => Ok(now_ms.saturating_add(ttl)),
        (None, Some(expires)) => Ok(expires),
    }
}

/// The fence of causes (appends and clears) in `session_id` whose clear
/// index is `clear_index`: `cause` must be above the clear and name a
/// cursor (`cursor`: its head and bookkeeping, `None` when there is none)
/// that [fences](Dispatch::fences) it. Otherwise `SupersededAttempt`.
pub fn fence(
    session_id: &str,
    clear_index: u64,
    cause: &Cause,
    cursor: Option<(Option<u64>, &Dispatch)>,
) -> Result<()> {
    let current = cause.index > clear_index
        && cursor.is_some_and(|(head, dispatch)| {
            dispatch.fences(head == Some(cause.index), cause.attempt)
        });
    if current {
        Ok(())
    } else {
        Err(StoreError::superseded(session_id, cause))
    }
}

/// Whether work at `index` is cleared in a session whose clear index is
/// `clear_index`: at or below it. Index 0 is at or below every clear
/// index, so it always is. A completion or failure of cleared work is
/// superseded; an append scheduled from it is `SessionCleared`.
pub fn cleared(index: u64, clear_index: u64) -> bool {
    index <= clear_index
}

/// The answer to a completion or failure at `index` (above the clear)
/// that no cursor has as head or finished head: superseded (`Ok`) when the
/// event exists (its cursor finished earlier, or it was never targeted at
/// this consumer), `NoSuchEvent` when there is no event at `index` (never
/// appended, or reclaimed).
pub fn without_cursor(session_id: &str, index: u64, event_exists: bool) -> Result<()> {
    if event_exists {
        Ok(())
    } else {
        Err(StoreError::no_such_event(session_id, index))
    }
}

impl AppendOptions {
    /// The origin rule of an append: scheduled from an event at or below
    /// the session's clear (`clear_index`) is `SessionCleared`.
    pub fn check_origin(&self, session_id: &str, clear_index: u64) -> Result<()> {
        match self.origin_index {
            Some(origin) if cleared(origin, clear_index) => {
                Err(StoreError::session_cleared(session_id, origin))
            }
            _ => Ok(()),
        }
    }
}

impl CompleteRequest {
    /// The cause the completion's returned events carry: this attempt of
    /// the completed head.
    pub fn cause(&self) -> Cause {
        Cause {
            consumer: self.consumer.clone(),
            lane: self.lane.clone(),
            index: self.index,
            attempt: self.attempt,
        }
    }
}

impl FailResult {
    /// The answer to a failure that is no longer current and whose head
    /// has moved on (or was cleared): superseded, failure count 0.
    pub fn superseded() -> Self {
        Self {
            outcome: FailOutcome::Superseded,
            failure_count: 0,
        }
    }
}

impl ReclaimResult {
    /// The answer to a reclaim with nothing below the clear to delete (a
    /// session never cleared, or fully reclaimed).
    pub fn nothing_left() -> Self {
        Self {
            reclaimed: 0,
            done: true,
        }
    }
}

impl Dispatch {
    /// Whether the head is dead-lettered.
    pub fn is_dead_lettered(&self) -> bool {
        self.failed_at.is_some()
    }

    /// When a head found among the claimable ones is not claimable at
    /// `now_ms` after all: its lease or retry delay ends later (a head
    /// promoted earlier whose expiry is in the future again because the
    /// clock moved back). `None`: claimable now.
    pub fn busy_until(&self, now_ms: i64) -> Option<i64> {
        self.claim_expires_at.filter(|expiry| *expiry > now_ms)
    }

    /// What a claim with `max_failures` does to this claimable head: a claim
    /// still held has expired, which counts a failure, and reaching
    /// `max_failures` that way dead-letters it.
    pub fn claim_step(&self, max_failures: Option<u32>) -> ClaimStep {
        let dead = self.claim_holder.is_some()
            && max_failures.is_some_and(|max| self.failure_count.saturating_add(1) >= max);
        if dead {
            ClaimStep::DeadLetter
        } else {
            ClaimStep::Claim
        }
    }

    /// Applies [`claim_step`](Self::claim_step) at `now_ms`: either claims
    /// the head for `holder` until `expires_at` (counting an expired claim
    /// as a failure first), or dead-letters it. Returns the step taken.
    pub fn take(
        &mut self,
        holder: String,
        now_ms: i64,
        expires_at: i64,
        max_failures: Option<u32>,
    ) -> ClaimStep {
        let step = self.claim_step(max_failures);
        match step {
            ClaimStep::Claim => self.claim(holder, now_ms, expires_at),
            ClaimStep::DeadLetter => self.dead_letter_expired(now_ms),
        }
        step
    }

    /// Claims the head for `holder` at `now_ms` until `expires_at`: an
    /// expired claim still held counts a failure, the attempt number grows
    /// by one, first and last claim times are kept.
    pub fn claim(&mut self, holder: String, now_ms: i64, expires_at: i64) {
        if self.claim_holder.is_some() {
            self.failure_count = self.failure_count.saturating_add(1);
        }
        self.attempt_count = self.attempt_count.saturating_add(1);
        self.first_claimed_at.get_or_insert(now_ms);
        self.last_claimed_at = Some(now_ms);
        self.claim_holder = Some(holder);
        self.claim_expires_at = Some(expires_at);
    }

    /// Dead-letters a head whose expired claim reached `max_failures`: the
    /// expiry counts a failure and an attempt, the holder is released.
    pub fn dead_letter_expired(&mut self, now_ms: i64) {
        self.failure_count = self.failure_count.saturating_add(1);
        self.attempt_count = self.attempt_count.saturating_add(1);
        self.claim_holder = None;
        self.claim_expires_at = None;
        self.failed_at = Some(now_ms);
    }

    /// Whether attempt `attempt` may append with this head as cause or clear
    /// (`on_head`: the cursor's head is the cause's index): the attempt is
    /// the current one and the head is not dead-lettered.
    pub fn fences(&self, on_head: bool, attempt: u32) -> bool {
        on_head && self.attempt_count == attempt && !self.is_dead_lettered()
    }

    /// What a completion by `attempt` does (`on_head`: the cursor's head is
    /// the completed index): applied when the attempt is current, claimed and
    /// not dead-lettered; a replay when the cursor moved past the index.
    pub fn complete_verdict(&self, on_head: bool, attempt: u32) -> CompleteVerdict {
        if !on_head {
            CompleteVerdict::Replay
        } else if self.attempt_count != attempt
            || self.is_dead_lettered()
            || self.claim_holder.is_none()
        {
            CompleteVerdict::Superseded
        } else {
            CompleteVerdict::Apply
        }
    }

    /// What a renewal by `holder` at `now_ms` does to `claim` on a cursor
    /// whose head is `head` and whose position is `position`.
    pub fn renew_verdict(
        &self,
        head: Option<u64>,
        position: u64,
        claim: &HeldClaim,
        holder: &str,
        now_ms: i64,
    ) -> RenewVerdict {
        let index = claim.cursor.index;
        let on_head = head == Some(index);
        if !on_head && position < index {
            return RenewVerdict::Skip;
        }
        if !on_head || self.attempt_count > claim.attempt {
            return RenewVerdict::Superseded;
        }
        let held = !self.is_dead_lettered()
            && self.claim_holder.as_deref() == Some(holder)
            && self.claim_expires_at.is_some_and(|expiry| expiry > now_ms);
        if held {
            RenewVerdict::Renew
        } else {
            RenewVerdict::Skip
        }
    }

    /// Whether a pin on this head's index keeps a snapshot checkpoint
    /// (`on_head`: the cursor's head is the pin's index): the head is still
    /// to be processed and not dead-lettered. Pins at or below the clear
    /// never hold ([`cleared`]).
    pub fn holds_pin(&self, on_head: bool) -> bool {
        on_head && !self.is_dead_lettered()
    }

    /// A renewal of a claim [`renew_verdict`](Self::renew_verdict) found
    /// held: the lease now ends at `expires_at`.
    pub fn renew(&mut self, expires_at: i64) {
        self.claim_expires_at = Some(expires_at);
    }

    /// What a `fail_attempt` naming `attempt` does (`on_head`: the cursor is
    /// still on the failed index). `Some(result)` answers without a change:
    /// superseded, an idempotent repeat, or an already dead-lettered head;
    /// `None` means record the failure with [`record_failure`](Self::record_failure).
    pub fn fail_verdict(&self, on_head: bool, attempt: u32) -> Option<FailResult> {
        let released = self.claim_holder.is_none();
        let repeat = released && self.last_failed_attempt == Some(attempt);
        if !on_head || self.attempt_count != attempt || (released && !repeat) {
            return Some(FailResult {
                outcome: FailOutcome::Superseded,
                failure_count: if on_head { self.failure_count } else { 0 },
            });
        }
        if repeat || self.is_dead_lettered() {
            let outcome = if self.is_dead_lettered() {
                FailOutcome::DeadLettered
            } else {
                FailOutcome::Failed
            };
            return Some(FailResult {
                outcome,
                failure_count: self.failure_count,
            });
        }
        None
    }

    /// Records the failure `request` describes at `now_ms`: counted, error
    /// kept, holder released, retry delay or dead letter (`failed_at` set, no
    /// delay) at `max_failures`.
    pub fn record_failure(&mut self, request: &FailRequest, now_ms: i64) -> FailResult {
        self.failure_count = self.failure_count.saturating_add(1);
        self.last_error = Some(request.error.clone());
        self.last_failed_at = Some(now_ms);
        self.last_failed_attempt = Some(request.attempt);
        self.claim_holder = None;
        let dead = request
            .max_failures
            .is_some_and(|max| self.failure_count >= max);
        self.claim_expires_at = match request.retry_after_ms {
            Some(delay) if !dead => Some(now_ms.saturating_add(delay)),
            _ => None,
        };
        if dead {
            self.failed_at = Some(now_ms);
        }
        FailResult {
            outcome: if dead {
                FailOutcome::DeadLettered
            } else {
                FailOutcome::Failed
            },
            failure_count: self.failure_count,
        }
    }

    /// A redrive's retry: the head is claimable again, failures reset,
    /// attempts kept.
    pub fn retry(&mut self) {
        self.failed_at = None;
        self.failure_count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::CursorRef;
    use crate::ErrorCode;

    fn claimed(attempt: u32) -> Dispatch {
        Dispatch {
            attempt_count: attempt,
            claim_holder: Some("w".into()),
            claim_expires_at: Some(100),
            ..Dispatch::default()
        }
    }

    #[test]
    fn lease_needs_exactly_one_positive_bound() {
        assert_eq!(lease_expiry(10, Some(5), None).unwrap(), 15);
        assert_eq!(lease_expiry(10, None, Some(3)).unwrap(), 3);
        for (ttl, exp) in [
            (None, None),
            (Some(1), Some(1)),
            (Some(0), None),
            (Some(-1), None),
        ] {
            assert_eq!(
                lease_expiry(10, ttl, exp).unwrap_err().code(),
                ErrorCode::InvalidInput
            );
        }
    }

    #[test]
    fn claims_count_expired_claims_and_dead_letter_at_max() {
        let mut fresh = Dispatch::default();
        assert_eq!(fresh.take("a".into(), 5, 50, Some(1)), ClaimStep::Claim);
        assert_eq!(fresh.attempt_count, 1);
        assert_eq!(fresh.failure_count, 0);
        assert_eq!(fresh.first_claimed_at, Some(5));
        assert_eq!(fresh.claim_expires_at, Some(50));
        // Expired and taken again: a failure is counted.
        assert_eq!(fresh.take("b".into(), 60, 90, Some(3)), ClaimStep::Claim);
        assert_eq!((fresh.attempt_count, fresh.failure_count), (2, 1));
        assert_eq!(fresh.first_claimed_at, Some(5));
        assert_eq!(fresh.last_claimed_at, Some(60));
        // The next expiry reaches max_failures = 2: dead-lettered.
        assert_eq!(
            fresh.take("c".into(), 95, 99, Some(2)),
            ClaimStep::DeadLetter
        );
        assert_eq!((fresh.attempt_count, fresh.failure_count), (3, 2));
        assert!(fresh.is_dead_lettered() && fresh.claim_holder.is_none());
        assert_eq!(claimed(1).busy_until(99), Some(100));
        assert_eq!(claimed(1).busy_until(100), None);
    }

    #[test]
    fn fence_and_complete_need_the_current_attempt() {
        let d = claimed(2);
        let cause = Cause {
            consumer: "c".into(),
            lane: None,
            index: 4,
            attempt: 2,
        };
        assert!(fence("s", 3, &cause, Some((Some(4), &d))).is_ok());
        for (clear, cursor) in [
            (4, Some((Some(4), &d))),
            (3, Some((Some(5), &d))),
            (3, None),
        ] {
            assert_eq!(
                fence("s", clear, &cause, cursor).unwrap_err().code(),
                ErrorCode::SupersededAttempt
            );
        }
        assert_eq!(d.complete_verdict(true, 2), CompleteVerdict::Apply);
        assert_eq!(d.complete_verdict(true, 1), CompleteVerdict::Superseded);
        assert_eq!(d.complete_verdict(false, 2), CompleteVerdict::Replay);
        let released = Dispatch {
            claim_holder: None,
            ..d
        };
        assert_eq!(
            released.complete_verdict(true, 2),
            CompleteVerdict::Superseded
        );
    }

    #[test]
    fn cleared_work_and_missing_cursors() {
        assert!(cleared(0, 0));
        assert!(cleared(3, 3));
        assert!(!cleared(4, 3));
        assert!(without_cursor("s", 4, true).is_ok());
        assert_eq!(
            without_cursor("s", 4, false).unwrap_err().code(),
            ErrorCode::NoSuchEvent
        );
        let options = AppendOptions {
            origin_index: Some(3),
            ..AppendOptions::default()
        };
        assert!(options.check_origin("s", 2).is_ok());
        assert_eq!(
            options.check_origin("s", 3).unwrap_err().code(),
            ErrorCode::SessionCleared
        );
        assert!(AppendOptions::default().check_origin("s", 9).is_ok());
        let request = CompleteRequest {
            consumer: "c".into(),
            lane: Some("L".into()),
            index: 5,
            attempt: 2,
            ..CompleteRequest::default()
        };
        assert_eq!(
            request.cause().cursor_ref(),
            CursorRef::new("c", Some("L"), 5)
        );
        assert_eq!(FailResult::superseded().failure_count, 0);
        assert!(ReclaimResult::nothing_left().done);
    }

    #[test]
    fn renew_extends_only_live_claims_of_the_holder() {
        let claim = |index, attempt| HeldClaim {
            cursor: CursorRef::new("c", None, index),
            attempt,
        };
        let d = claimed(2);
        assert_eq!(
            d.renew_verdict(Some(4), 3, &claim(4, 2), "w", 50),
            RenewVerdict::Renew
        );
        assert_eq!(
            d.renew_verdict(Some(4), 3, &claim(4, 2), "x", 50),
            RenewVerdict::Skip
        );
        assert_eq!(
            d.renew_verdict(Some(4), 3, &claim(4, 2), "w", 100),
            RenewVerdict::Skip
        );
        assert_eq!(
            d.renew_verdict(Some(4), 3, &claim(4, 1), "w", 50),
            RenewVerdict::Superseded
        );
        assert_eq!(
            d.renew_verdict(Some(6), 5, &claim(4, 2), "w", 50),
            RenewVerdict::Superseded
        );
        assert_eq!(
            d.renew_verdict(Some(4), 3, &claim(9, 2), "w", 50),
            RenewVerdict::Skip
        );
    }

    #[test]
    fn failures_are_counted_once_and_dead_letter_at_max() {
        let request = FailRequest {
            attempt: 1,
            error: "boom".into(),
            max_failures: Some(2),
            retry_after_ms: Some(10),
            ..FailRequest::default()
        };
        let mut d = claimed(1);
        assert_eq!(d.fail_verdict(true, 1), None);
        let first = d.record_failure(&request, 7);
        assert_eq!(first.outcome, FailOutcome::Failed);
        assert_eq!(d.claim_expires_at, Some(17));
        // The same failure again is an idempotent repeat.
        assert_eq!(d.fail_verdict(true, 1), Some(first));
        assert_eq!(
            d.fail_verdict(true, 2).map(|r| r.outcome),
            Some(FailOutcome::Superseded)
        );
        d.claim("w".into(), 20, 30);
        let second = d.record_failure(
            &FailRequest {
                attempt: 2,
                ..request
            },
            21,
        );
        assert_eq!(second.outcome, FailOutcome::DeadLettered);
        assert_eq!(d.claim_expires_at, None);
        d.retry();
        assert!(!d.is_dead_lettered());
        assert_eq!((d.failure_count, d.attempt_count), (0, 2));
    }
}
