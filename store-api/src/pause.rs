//! Paused consumers: which heads a pause holds back, and for how long.
//!
//! A pause names a consumer, in one session or in every session
//! (`session_id: None`), until it is resumed or until a time. While a pause
//! is in force ([`Pause::in_force`]) the consumer's heads in the sessions it
//! covers are *held*:
//!
//! - not claimed by either claim operation, and not counted by
//!   `has_pending`;
//! - a pause with an end holds its heads as busy until that end (or their
//!   own lease or retry delay, whichever is later): a claim answers `Busy {
//!   retry_at }` with it, so a waiting `claim_work` wakes when it ends; an
//!   open-ended pause hides its heads from claims (`Settled` when nothing
//!   else is there);
//! - leases already held run to their end: renewals, completions and
//!   failures of claimed heads work as before;
//! - resuming (or the end passing) makes the heads claimable at once, and
//!   `resume` wakes waiting claimers.
//!
//! Pausing the same scope again replaces the pause. A pause in one session
//! and one in every session may both hold a consumer: the longer one wins
//! ([`hold`]).

use crate::error::{Result, StoreError};
use crate::types::{Dispatch, Pause, PauseRequest};

/// How the pauses of a session hold back one consumer's heads at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// No pause in force: claims see the heads as usual.
    Free,
    /// Paused until this time, ms: the heads are busy until then.
    Until(i64),
    /// Paused until resumed: the heads are invisible to claims.
    Indefinite,
}

impl Pause {
    /// Whether the pause still holds at `now_ms` (an end at or before now
    /// has passed).
    pub fn in_force(&self, now_ms: i64) -> bool {
        self.until_ms.is_none_or(|until| until > now_ms)
    }

    /// Whether it covers `consumer` in `session_id`.
    pub fn covers(&self, consumer: &str, session_id: &str) -> bool {
        self.consumer == consumer
            && self
                .session_id
                .as_deref()
                .is_none_or(|paused| paused == session_id)
    }
}

/// How `pauses` (any set of pauses; those not covering `consumer` in
/// `session_id` or no longer in force are ignored) hold the consumer's
/// heads there at `now_ms`: indefinitely when any open-ended pause is in
/// force, else until the latest end in force, else free.
pub fn hold(pauses: &[Pause], consumer: &str, session_id: &str, now_ms: i64) -> Hold {
    let mut held = Hold::Free;
    for pause in pauses
        .iter()
        .filter(|pause| pause.covers(consumer, session_id) && pause.in_force(now_ms))
    {
        held = match (held, pause.until_ms) {
            (_, None) | (Hold::Indefinite, _) => Hold::Indefinite,
            (Hold::Until(a), Some(b)) => Hold::Until(a.max(b)),
            (Hold::Free, Some(b)) => Hold::Until(b),
        };
    }
    held
}

/// The pause [`crate::Cursor::pause`] reports for `consumer` in
/// `session_id` at `now_ms`: the one that holds longest (open-ended first,
/// then the latest end; the session's own pause on a tie).
pub fn in_force_for(
    pauses: &[Pause],
    consumer: &str,
    session_id: &str,
    now_ms: i64,
) -> Option<Pause> {
    pauses
        .iter()
        .filter(|pause| pause.covers(consumer, session_id) && pause.in_force(now_ms))
        .max_by_key(|pause| {
            (
                pause.until_ms.is_none(),
                pause.until_ms,
                pause.session_id.is_some(),
            )
        })
        .cloned()
}

impl Hold {
    /// Whether the heads are held at all (so not pending).
    pub fn is_held(self) -> bool {
        self != Self::Free
    }

    /// Whether claims skip the heads entirely (neither claimable nor busy).
    pub fn hides(self) -> bool {
        self == Self::Indefinite
    }
}

impl Dispatch {
    /// [`busy_until`](Self::busy_until) under `hold`: a pause with an end
    /// keeps the head busy until that end at least. (An indefinite hold is
    /// for the caller to skip, see [`Hold::hides`].)
    pub fn busy_until_held(&self, now_ms: i64, hold: Hold) -> Option<i64> {
        let own = self.busy_until(now_ms);
        match hold {
            Hold::Until(until) if until > now_ms => Some(own.map_or(until, |at| at.max(until))),
            _ => own,
        }
    }
}

impl PauseRequest {
    /// The pause this request stores at `now_ms`. An end at or before now
    /// is `InvalidInput` (a pause that has already ended is a mistake, not
    /// a no-op).
    pub fn pause_at(&self, now_ms: i64) -> Result<Pause> {
        if let Some(until) = self.until_ms.filter(|until| *until <= now_ms) {
            return Err(StoreError::invalid_input(format!(
                "pause until_ms {until} is not in the future (now {now_ms}): omit it to pause until resumed"
            )));
        }
        Ok(Pause {
            consumer: self.consumer.clone(),
            session_id: self.session_id.clone(),
            until_ms: self.until_ms,
            paused_at: now_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(session: Option<&str>, until: Option<i64>) -> Pause {
        Pause {
            consumer: "c".into(),
            session_id: session.map(str::to_owned),
            until_ms: until,
            paused_at: 0,
        }
    }

    #[test]
    fn the_longest_pause_in_force_holds() {
        let now = 100;
        assert_eq!(hold(&[], "c", "s", now), Hold::Free);
        let timed = [pause(Some("s"), Some(150)), pause(None, Some(200))];
        assert_eq!(hold(&timed, "c", "s", now), Hold::Until(200));
        assert_eq!(hold(&timed, "c", "t", now), Hold::Until(200));
        assert_eq!(hold(&timed, "d", "s", now), Hold::Free);
        assert_eq!(hold(&timed, "c", "s", 200), Hold::Free);
        let open = [pause(Some("s"), None), pause(None, Some(200))];
        assert_eq!(hold(&open, "c", "s", now), Hold::Indefinite);
        assert_eq!(hold(&open, "c", "t", now), Hold::Until(200));
        assert_eq!(in_force_for(&open, "c", "s", now), Some(open[0].clone()));
        assert_eq!(in_force_for(&open, "c", "t", now), Some(open[1].clone()));
        assert_eq!(in_force_for(&open, "c", "t", 300), None);
    }

    #[test]
    fn timed_holds_keep_heads_busy() {
        let idle = Dispatch::default();
        assert_eq!(idle.busy_until_held(100, Hold::Until(150)), Some(150));
        assert_eq!(idle.busy_until_held(100, Hold::Free), None);
        let leased = Dispatch::scheduled(Some(180));
        assert_eq!(leased.busy_until_held(100, Hold::Until(150)), Some(180));
        assert!(Hold::Indefinite.hides() && Hold::Until(1).is_held() && !Hold::Free.is_held());
        let request = PauseRequest {
            consumer: "c".into(),
            session_id: None,
            until_ms: Some(100),
        };
        assert!(request.pause_at(100).is_err());
        assert_eq!(request.pause_at(99).unwrap().until_ms, Some(100));
    }
}
