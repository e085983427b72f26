//! Forking a session: what [`Store::fork`](crate::Store::fork) copies and
//! what the new session looks like.
//!
//! A fork copies the source's rows after its clear up to `through` (the
//! head by default), and the clear marker itself when the source was
//! cleared, into a session never written to. Each row keeps its index, id,
//! type, payload, `created_at` and cause. The new session starts as a
//! cleared session fully reclaimed would: the same clear index, nothing
//! below the marker (`reclaimed_through = clear - 1`). It records where it
//! came from ([`crate::ForkOrigin`], listed by `sessions()`).
//!
//! Nothing else is copied: no cursors (targets are not queued again, log
//! consumers are not re-declared: a consumer that should follow the fork
//! declares itself on the fork's next append, with `backfill: true` to start
//! from its clear), no snapshots, no presence. A fork is history to branch
//! from; the work in it was the source's.
//!
//! Refused with `InvalidInput`, nothing changed: a fork into itself, of a
//! session never written to, into a session that has rows, `through` above
//! the source's head, or below its clear (those rows are cleared), or 0.

use crate::error::{Result, StoreError};
use crate::types::{ForkOrigin, ForkRequest, SessionInfo};

/// What a fork writes, decided by [`ForkRequest::plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkPlan {
    /// The first index copied: the clear marker when cleared, else 1.
    pub first: u64,
    /// The last index copied.
    pub through: u64,
    /// The new session as it is listed after the fork.
    pub session: SessionInfo,
}

impl ForkPlan {
    /// How many rows the fork copies.
    pub fn rows(&self) -> u64 {
        self.through + 1 - self.first
    }
}

impl ForkRequest {
    /// The plan of this fork from `source` (`None`: no session by that id)
    /// into a session whose head is `into_head` (0 when never written).
    pub fn plan(&self, source: Option<&SessionInfo>, into_head: u64) -> Result<ForkPlan> {
        if self.into == self.session_id {
            return Err(StoreError::invalid_input(format!(
                "cannot fork session '{}' into itself: name a new session",
                self.session_id
            )));
        }
        let Some(source) = source.filter(|source| source.head > 0) else {
            return Err(StoreError::invalid_input(format!(
                "cannot fork session '{}': it has no events",
                self.session_id
            )));
        };
        if into_head > 0 {
            return Err(StoreError::invalid_input(format!(
                "cannot fork into session '{}': it already has {into_head} events; fork into a new session",
                self.into
            )));
        }
        let through = self.through.unwrap_or(source.head);
        if through > source.head {
            return Err(StoreError::invalid_input(format!(
                "cannot fork session '{}' through index {through}: its head is {}",
                self.session_id, source.head
            )));
        }
        if through == 0 || through < source.clear_index {
            return Err(StoreError::invalid_input(format!(
                "cannot fork session '{}' through index {through}: rows below its clear at {} are cleared",
                self.session_id, source.clear_index
            )));
        }
        let clear = source.clear_index;
        Ok(ForkPlan {
            first: clear.max(1),
            through,
            session: SessionInfo {
                incarnation: 0,
                session_id: self.into.clone(),
                head: through,
                clear_index: clear,
                reclaimed_through: clear.saturating_sub(1),
                forked_from: Some(ForkOrigin {
                    session_id: self.session_id.clone(),
                    index: through,
                }),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn info(head: u64, clear: u64) -> SessionInfo {
        SessionInfo {
            incarnation: 0,
            session_id: "a".into(),
            head,
            clear_index: clear,
            reclaimed_through: 0,
            forked_from: None,
        }
    }

    #[test]
    fn a_fork_copies_after_the_clear_through_the_index() {
        let plan = ForkRequest::new("a", "b")
            .plan(Some(&info(9, 0)), 0)
            .unwrap();
        assert_eq!((plan.first, plan.through, plan.rows()), (1, 9, 9));
        let plan = ForkRequest::new("a", "b")
            .through(6)
            .plan(Some(&info(9, 4)), 0)
            .unwrap();
        assert_eq!((plan.first, plan.through, plan.rows()), (4, 6, 3));
        assert_eq!(
            (
                plan.session.head,
                plan.session.clear_index,
                plan.session.reclaimed_through
            ),
            (6, 4, 3)
        );
        assert_eq!(plan.session.forked_from.unwrap().index, 6);
        let bad = [
            (ForkRequest::new("a", "a"), Some(info(3, 0)), 0),
            (ForkRequest::new("a", "b"), None, 0),
            (ForkRequest::new("a", "b"), Some(info(0, 0)), 0),
            (ForkRequest::new("a", "b"), Some(info(3, 0)), 1),
            (ForkRequest::new("a", "b").through(4), Some(info(3, 0)), 0),
            (ForkRequest::new("a", "b").through(2), Some(info(5, 3)), 0),
            (ForkRequest::new("a", "b").through(0), Some(info(5, 0)), 0),
        ];
        for (request, source, into_head) in bad {
            assert_eq!(
                request.plan(source.as_ref(), into_head).unwrap_err().code(),
                ErrorCode::InvalidInput,
                "{request:?}"
            );
        }
    }
}
