//! Retention: deleting one session ([`Store::delete_session`](crate::Store::delete_session)),
//! pruning the idle, finished ones ([`Store::prune`](crate::Store::prune)),
//! and the incarnation fence that keeps a deleted session's attempts away
//! from a new session of the same id.
//!
//! A backend finds the rows (a session's cursors, the idle candidates by
//! last activity) and stores the answer; these functions decide:
//!
//! - [`delete_blocker`]: what keeps a session from being deleted without `force`;
//! - [`work_left`]: what a head that still has work is doing ([`HeadWork`]);
//! - [`prunable`]: whether an idle session has nothing left to do;
//! - [`heads_ended`]: how many heads a forced delete ends;
//! - [`idle_cutoff`]: the last-activity time below which a session is idle;
//! - [`incarnation_current`]: whether a request's incarnation names the
//!   session as it is now.
//!
//! # Incarnations
//!
//! Every session gets an incarnation when it is created: a number the store
//! never hands out again, not even after the session is deleted, and not by
//! another store instance on the same database. Heads ([`Head::incarnation`](crate::Head::incarnation))
//! and listings ([`SessionInfo::incarnation`](crate::SessionInfo::incarnation))
//! carry it, and the requests built from a head (`for_head`) name it. A
//! completion, failure, renewal, redrive, reschedule or clear naming another
//! incarnation than the session's is answered as superseded (completions,
//! failures, renewals) or refused with [`ErrorCode::SessionDeleted`](crate::ErrorCode::SessionDeleted)
//! (redrives, reschedules, clears), even when the new session's head has the
//! same consumer, lane, index and attempt. A request naming no incarnation
//! (`None`) is not fenced by it.

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::types::Cursor;

/// How many sessions one [`Store::prune`](crate::Store::prune) examines when
/// the request names no limit.
pub const DEFAULT_PRUNE_LIMIT: usize = 100;

/// The most sessions one [`Store::prune`](crate::Store::prune) may examine;
/// a larger [`PruneRequest::limit`] is `InvalidInput`.
pub const MAX_PRUNE_LIMIT: usize = 1_000;

/// Request of [`Store::delete_session`](crate::Store::delete_session).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteSessionRequest {
    /// The session.
    pub session_id: String,
    /// Also end the heads still leased, claimable, waiting or scheduled
    /// (without it such a head refuses the delete with
    /// [`ErrorCode::SessionInUse`](crate::ErrorCode::SessionInUse)).
    #[serde(default)]
    pub force: bool,
    /// Delete only if the session's head is exactly this index.
    #[serde(default)]
    pub if_last_index: Option<u64>,
}

/// What one delete removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Removed {
    /// The deleted session's incarnation (no request naming it applies again).
    pub incarnation: u64,
    /// The session's head when it was deleted.
    pub head: u64,
    /// Event rows deleted (those not reclaimed before).
    pub events: u64,
    /// Cursors deleted.
    pub cursors: u64,
    /// Heads that still had work (leased, claimable, waiting, scheduled),
    /// ended by `force`; 0 without it.
    pub ended: u64,
}

impl Removed {
    /// What deleting incarnation `incarnation`, at head `head`, removed.
    pub fn new(incarnation: u64, head: u64, events: u64, cursors: u64, ended: u64) -> Self {
        Self {
            incarnation,
            head,
            events,
            cursors,
            ended,
        }
    }
}

/// Result of [`Store::delete_session`](crate::Store::delete_session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeleteSessionResult {
    /// Every row of the session is gone.
    Deleted {
        /// What went.
        removed: Removed,
    },
    /// `if_last_index` did not match; nothing changed.
    NotDeleted {
        /// The session's current head.
        head: u64,
    },
    /// No session has this id; nothing changed (and nothing was created).
    NotFound,
}

/// Where a [`Store::prune`](crate::Store::prune) page starts: after this
/// session in last-activity order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PruneFrom {
    /// The last activity of the last session examined, ms.
    pub last_activity_ms: i64,
    /// Its id (ties on `last_activity_ms` go by id).
    pub session_id: String,
}

/// Request of [`Store::prune`](crate::Store::prune): delete the sessions idle
/// for `idle_for_ms` that have nothing left to do, a page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneRequest {
    /// A session is idle when nothing was appended to it for this long
    /// (from the store's clock), ms; positive.
    pub idle_for_ms: i64,
    /// The most idle sessions to examine (1 to [`MAX_PRUNE_LIMIT`];
    /// [`DEFAULT_PRUNE_LIMIT`] when `None`).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Count and list what would go; delete nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Also prune sessions whose only heads are dead-lettered (by default a
    /// dead letter keeps its session for an operator to look at).
    #[serde(default)]
    pub include_dead_letters: bool,
    /// Continue after this session ([`PruneResult::next`] of the page before).
    #[serde(default)]
    pub after: Option<PruneFrom>,
}

/// Result of [`Store::prune`](crate::Store::prune).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PruneResult {
    /// The sessions deleted (with `dry_run`: that would be), in last-activity order.
    pub sessions: Vec<String>,
    /// Idle sessions examined, deleted or kept (kept: work left or a dead letter).
    pub examined: usize,
    /// Where the next page starts; `None` when no idle session is left after this page.
    pub next: Option<PruneFrom>,
    /// Presence fields removed because they had expired (0 with `dry_run`).
    pub expired_presence: u64,
    /// Snapshot checkpoints removed: no longer pinned and not a reducer's
    /// latest snapshot (0 with `dry_run`).
    pub checkpoints: u64,
}

impl PruneResult {
    /// A page that deleted (or would delete) `sessions` of the `examined`
    /// idle ones, continuing at `next`.
    pub fn new(sessions: Vec<String>, examined: usize, next: Option<PruneFrom>) -> Self {
        Self {
            sessions,
            examined,
            next,
            expired_presence: 0,
            checkpoints: 0,
        }
    }

    /// The same page, having also removed `expired_presence` presence fields
    /// and `checkpoints` snapshot checkpoints.
    pub fn with_swept(mut self, expired_presence: u64, checkpoints: u64) -> Self {
        self.expired_presence = expired_presence;
        self.checkpoints = checkpoints;
        self
    }

    /// Whether more idle sessions may follow this page.
    pub fn more(&self) -> bool {
        self.next.is_some()
    }
}

impl DeleteSessionRequest {
    /// Delete `session_id`, refused while it has work left.
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            ..Self::default()
        }
    }

    /// Also end the heads that still have work.
    pub fn forced(mut self) -> Self {
        self.force = true;
        self
    }

    /// Delete only if the session's head is exactly `index`.
    pub fn with_if_last_index(mut self, index: u64) -> Self {
        self.if_last_index = Some(index);
        self
    }

    /// The [`DeleteSessionResult::NotDeleted`] answer when `if_last_index`
    /// does not match the session's `head`; `None` when the delete may go on.
    pub fn unmet_condition(&self, head: u64) -> Option<DeleteSessionResult> {
        match self.if_last_index {
            Some(expected) if expected != head => Some(DeleteSessionResult::NotDeleted { head }),
            _ => None,
        }
    }
}

impl PruneRequest {
    /// Prune the sessions idle for `idle_for`, [`DEFAULT_PRUNE_LIMIT`] at a time.
    pub fn idle_for(idle_for: std::time::Duration) -> Self {
        Self {
            idle_for_ms: crate::duration_ms(idle_for),
            ..Self::default()
        }
    }

    /// Examine at most `limit` idle sessions.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Only count and list; delete nothing.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Also prune sessions whose only heads are dead-lettered.
    pub fn including_dead_letters(mut self) -> Self {
        self.include_dead_letters = true;
        self
    }

    /// Continue after `from` (the [`PruneResult::next`] of the page before).
    pub fn after(mut self, from: Option<PruneFrom>) -> Self {
        self.after = from;
        self
    }

    /// The page size: `limit`, or [`DEFAULT_PRUNE_LIMIT`].
    pub fn page_size(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_PRUNE_LIMIT)
    }
}

/// The last-activity time (ms) at or after which a session is not idle,
/// for a prune of sessions idle for `idle_for_ms` at `now_ms`: sessions
/// whose last activity is strictly below it are candidates.
pub fn idle_cutoff(now_ms: i64, idle_for_ms: i64) -> i64 {
    now_ms.saturating_sub(idle_for_ms)
}

/// Whether a request naming `requested` may act on the session whose
/// incarnation is `current` (`None`: the session does not exist, never
/// written or deleted, and a request on it is answered as without
/// incarnations): yes when it names none, the session does not exist, or
/// it names this incarnation.
pub fn incarnation_current(requested: Option<u64>, current: Option<u64>) -> bool {
    match (requested, current) {
        (Some(requested), Some(current)) => requested == current,
        _ => true,
    }
}

/// Refuses a request naming incarnation `requested` of `session_id` whose
/// incarnation is now `current` with [`ErrorCode::SessionDeleted`](crate::ErrorCode::SessionDeleted);
/// a session that does not exist (`current` `None`) refuses nothing.
pub fn fence_incarnation(
    session_id: &str,
    requested: Option<u64>,
    current: Option<u64>,
) -> Result<()> {
    match (requested, current) {
        (Some(requested), Some(current)) if requested != current => {
            Err(StoreError::session_replaced(session_id, requested, current))
        }
        _ => Ok(()),
    }
}

/// What a head that still has work is doing, as a delete refused without
/// `force` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadWork {
    /// Claimed by `holder` until `until` (ms).
    Leased {
        /// Who holds the claim.
        holder: String,
        /// When the lease ends, ms.
        until: i64,
    },
    /// Failed, or its lease ran out, and is not claimable before `until` (ms).
    Retrying {
        /// When the retry delay ends, ms.
        until: i64,
    },
    /// Claimable, scheduled or held by a pause: waiting for a claim.
    Waiting,
}

/// Whether `cursor`'s head still has work, and what it is doing at
/// `now_ms`: `None` without a head or when the head is dead-lettered.
pub fn work_left(cursor: &Cursor, now_ms: i64) -> Option<HeadWork> {
    if !has_work(cursor) {
        return None;
    }
    let dispatch = &cursor.dispatch;
    Some(match (&dispatch.claim_holder, dispatch.claim_expires_at) {
        (Some(holder), Some(until)) if until > now_ms => HeadWork::Leased {
            holder: holder.clone(),
            until,
        },
        (None, Some(until)) if until > now_ms => HeadWork::Retrying { until },
        _ => HeadWork::Waiting,
    })
}

/// Whether a cursor's head still has work: it has a head that is not
/// dead-lettered (leased, claimable, waiting for a retry, scheduled or held
/// by a pause).
fn has_work(cursor: &Cursor) -> bool {
    cursor.head.is_some() && !cursor.dispatch.is_dead_lettered()
}

/// What keeps `session_id` from being deleted without `force`: the first of
/// its `cursors` whose head still has work, as the
/// [`ErrorCode::SessionInUse`](crate::ErrorCode::SessionInUse) error naming
/// it (and its holder and lease end, when leased at `now_ms`). `None` when
/// no head has work; dead letters never keep a session from a delete.
pub fn delete_blocker(session_id: &str, cursors: &[Cursor], now_ms: i64) -> Option<StoreError> {
    cursors.iter().find_map(|cursor| {
        let work = work_left(cursor, now_ms)?;
        Some(StoreError::session_in_use(session_id, cursor, &work))
    })
}

/// How many heads a forced delete of a session with these `cursors` ends.
pub fn heads_ended(cursors: &[Cursor]) -> u64 {
    cursors.iter().filter(|cursor| has_work(cursor)).count() as u64
}

/// Whether an idle session with these `cursors` has nothing left to do:
/// no head with work, and no dead-lettered head unless
/// `include_dead_letters`.
pub fn prunable(cursors: &[Cursor], include_dead_letters: bool) -> bool {
    cursors.iter().all(|cursor| match cursor.head {
        None => true,
        Some(_) => include_dead_letters && cursor.dispatch.is_dead_lettered(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CursorKind, Dispatch};

    fn cursor(head: Option<u64>, dispatch: Dispatch) -> Cursor {
        let mut cursor =
            Cursor::new("agent", Some("main".into()), CursorKind::Lane, 0).with_head(head);
        cursor.dispatch = dispatch;
        cursor
    }

    #[test]
    fn only_heads_with_work_block_a_delete() {
        let idle = cursor(None, Dispatch::default());
        let dead = cursor(Some(3), Dispatch::dead_lettered_at(5));
        let claimable = cursor(Some(4), Dispatch::default());
        assert!(delete_blocker("s", &[idle.clone(), dead.clone()], 0).is_none());
        let refused = delete_blocker("s", &[idle, dead, claimable.clone()], 0);
        assert_eq!(
            refused.map(|err| err.code()),
            Some(crate::ErrorCode::SessionInUse)
        );
        assert_eq!(heads_ended(&[claimable]), 1);
    }

    #[test]
    fn dead_letters_keep_a_session_from_prune_unless_asked() {
        let dead = cursor(Some(3), Dispatch::dead_lettered_at(5));
        assert!(!prunable(std::slice::from_ref(&dead), false));
        assert!(prunable(std::slice::from_ref(&dead), true));
        assert!(!prunable(&[cursor(Some(4), Dispatch::default())], true));
        assert!(prunable(&[], false));
    }

    #[test]
    fn the_incarnation_fence_lets_unnamed_requests_through() {
        assert!(incarnation_current(None, Some(7)));
        assert!(incarnation_current(Some(7), Some(7)));
        assert!(!incarnation_current(Some(6), Some(7)));
        assert!(fence_incarnation("s", Some(6), Some(7)).is_err());
        assert!(fence_incarnation("s", None, Some(7)).is_ok());
    }

    #[test]
    fn a_session_that_does_not_exist_is_not_fenced() {
        assert!(incarnation_current(Some(6), None));
        assert!(fence_incarnation("s", Some(6), None).is_ok());
    }

    #[test]
    fn the_cutoff_never_overflows() {
        assert_eq!(idle_cutoff(1_000, 400), 600);
        assert_eq!(idle_cutoff(i64::MIN + 1, 10), i64::MIN);
    }
}
