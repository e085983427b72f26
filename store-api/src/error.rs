//! The one error type every backend returns, with a stable code per case.

use std::error::Error as StdError;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::types::Cause;

/// A boxed error source, kept so callers can walk `Error::source`.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Shorthand for results of store calls.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The stable, machine-readable code of a [`StoreError`].
///
/// Codes never change meaning once released; new codes may be added, so
/// match with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ErrorCode {
    /// A batch repeats an id, mixes stored and fresh ids, or a replayed
    /// completion does not match the recorded one.
    PartialDuplicateBatch,
    /// Every id of a batch is stored but a type or payload differs.
    IdempotencyConflict,
    /// A fenced call names an attempt that is no longer current.
    SupersededAttempt,
    /// Work scheduled from an event at or below the session's clear.
    SessionCleared,
    /// A completion or failure names an index with no event and no cursor,
    /// or a payload rewrite names an event not stored above the clear.
    NoSuchEvent,
    /// The request itself is malformed; nothing was changed.
    InvalidInput,
    /// The backend stayed busy (locked) past its timeout; retrying may work.
    Busy,
    /// The backend could not be reached or stopped answering: the
    /// connection was refused, lost, or gave no answer within its bound (a
    /// server failing over, a bad network). Retrying may work once it is
    /// back. The one error whose call may have been applied: when the
    /// connection was lost after the call's commit was sent, the outcome is
    /// unknown, so repeat the same call (appends are idempotent by event
    /// id, completions and failures replay their recorded verdict).
    Unavailable,
    /// A delete without `force` found a head that still has work (leased,
    /// claimable, waiting or scheduled); nothing was deleted.
    SessionInUse,
    /// The session named was deleted (and perhaps created again since):
    /// the request names an incarnation that is gone, or a stream followed
    /// a session that was deleted.
    SessionDeleted,
    /// A compare-and-set rewrite ([`Store::rewrite_payloads`](crate::Store::rewrite_payloads))
    /// found a stored payload other than the one it expected; the whole call
    /// was refused and nothing changed. Read the item again and retry.
    PayloadMismatch,
    /// A call names a stored value that does not exist or can no longer be
    /// read: a snapshot state or presence field to rewrite (a missing
    /// event is [`NoSuchEvent`](Self::NoSuchEvent)); nothing changed.
    NotFound,
    /// The backend is out of space; free space and retry.
    StorageFull,
    /// The database was written by a newer schema version than this build.
    IncompatibleSchema,
    /// The backend failed (I/O, corruption, connection); see the source.
    Backend,
}

impl ErrorCode {
    /// The code as a stable `SCREAMING_SNAKE_CASE` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PartialDuplicateBatch => "PARTIAL_DUPLICATE_BATCH",
            Self::IdempotencyConflict => "IDEMPOTENCY_CONFLICT",
            Self::SupersededAttempt => "SUPERSEDED_ATTEMPT",
            Self::SessionCleared => "SESSION_CLEARED",
            Self::NoSuchEvent => "NO_SUCH_EVENT",
            Self::InvalidInput => "INVALID_INPUT",
            Self::Busy => "BUSY",
            Self::Unavailable => "UNAVAILABLE",
            Self::SessionInUse => "SESSION_IN_USE",
            Self::SessionDeleted => "SESSION_DELETED",
            Self::PayloadMismatch => "PAYLOAD_MISMATCH",
            Self::NotFound => "NOT_FOUND",
            Self::StorageFull => "STORAGE_FULL",
            Self::IncompatibleSchema => "INCOMPATIBLE_SCHEMA",
            Self::Backend => "BACKEND",
        }
    }
}

impl ErrorCode {
    /// Whether a call failing with this code may succeed when repeated
    /// unchanged: [`Busy`](Self::Busy) and [`Unavailable`](Self::Unavailable).
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Busy | Self::Unavailable)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every failure of a store call. A call that returns an error changed
/// nothing, except [`ErrorCode::Unavailable`], whose outcome may be unknown
/// (see there); [`StoreError::is_retryable`] tells which errors a repeat of
/// the same call may cure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// See [`ErrorCode::PartialDuplicateBatch`].
    #[error("partial duplicate batch: {message}")]
    PartialDuplicateBatch {
        /// What was duplicated.
        message: String,
    },
    /// See [`ErrorCode::IdempotencyConflict`].
    #[error("idempotency conflict: {message}")]
    IdempotencyConflict {
        /// Which id differs and how.
        message: String,
    },
    /// See [`ErrorCode::SupersededAttempt`].
    #[error("superseded attempt: attempt {} of ({}, {}, {}) in session '{session_id}' is no longer current", cause.attempt, cause.consumer, cause.lane.as_deref().unwrap_or("-"), cause.index)]
    SupersededAttempt {
        /// The session.
        session_id: String,
        /// The attempt that was named.
        cause: Cause,
    },
    /// See [`ErrorCode::SessionCleared`].
    #[error("session cleared: {message}")]
    SessionCleared {
        /// Which work was cleared.
        message: String,
    },
    /// See [`ErrorCode::NoSuchEvent`].
    #[error("no event at index {index} in session '{session_id}'")]
    NoSuchEvent {
        /// The session.
        session_id: String,
        /// The index that has no event.
        index: u64,
    },
    /// See [`ErrorCode::InvalidInput`].
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// See [`ErrorCode::Busy`].
    #[error("backend busy: {message}")]
    Busy {
        /// What stayed locked.
        message: String,
        /// The backend's own error.
        #[source]
        source: Option<BoxError>,
    },
    /// See [`ErrorCode::Unavailable`].
    #[error("backend unavailable: {message}")]
    Unavailable {
        /// What was lost or did not answer, and what to do.
        message: String,
        /// The backend's own error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// See [`ErrorCode::SessionInUse`].
    #[error("session in use: {message}")]
    SessionInUse {
        /// Which head holds the session and how to delete it anyway.
        message: String,
    },
    /// See [`ErrorCode::SessionDeleted`].
    #[error("session deleted: {message}")]
    SessionDeleted {
        /// Which session, and what to do.
        message: String,
    },
    /// See [`ErrorCode::PayloadMismatch`].
    #[error("payload mismatch: {message}")]
    PayloadMismatch {
        /// Which item holds another payload, and what to do.
        message: String,
    },
    /// See [`ErrorCode::NotFound`].
    #[error("not found: {message}")]
    NotFound {
        /// What was named and is not stored.
        message: String,
    },
    /// See [`ErrorCode::StorageFull`].
    #[error("storage full: {message}")]
    StorageFull {
        /// Where space ran out.
        message: String,
        /// The backend's own error.
        #[source]
        source: Option<BoxError>,
    },
    /// See [`ErrorCode::IncompatibleSchema`].
    #[error("incompatible schema: {message}")]
    IncompatibleSchema {
        /// Which versions were found and expected.
        message: String,
    },
    /// See [`ErrorCode::Backend`].
    #[error("backend failure: {message}")]
    Backend {
        /// What the backend was doing.
        message: String,
        /// The backend's own error.
        #[source]
        source: Option<BoxError>,
    },
}

impl StoreError {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::PartialDuplicateBatch { .. } => ErrorCode::PartialDuplicateBatch,
            Self::IdempotencyConflict { .. } => ErrorCode::IdempotencyConflict,
            Self::SupersededAttempt { .. } => ErrorCode::SupersededAttempt,
            Self::SessionCleared { .. } => ErrorCode::SessionCleared,
            Self::NoSuchEvent { .. } => ErrorCode::NoSuchEvent,
            Self::InvalidInput { .. } => ErrorCode::InvalidInput,
            Self::Busy { .. } => ErrorCode::Busy,
            Self::Unavailable { .. } => ErrorCode::Unavailable,
            Self::SessionInUse { .. } => ErrorCode::SessionInUse,
            Self::SessionDeleted { .. } => ErrorCode::SessionDeleted,
            Self::PayloadMismatch { .. } => ErrorCode::PayloadMismatch,
            Self::NotFound { .. } => ErrorCode::NotFound,
            Self::StorageFull { .. } => ErrorCode::StorageFull,
            Self::IncompatibleSchema { .. } => ErrorCode::IncompatibleSchema,
            Self::Backend { .. } => ErrorCode::Backend,
        }
    }

    /// Whether repeating the same call may succeed: [`ErrorCode::Busy`] (a
    /// lock or the pool stayed busy) and [`ErrorCode::Unavailable`] (the
    /// backend was unreachable). Every other code answers the same again.
    pub fn is_retryable(&self) -> bool {
        self.code().is_retryable()
    }

    /// An [`ErrorCode::InvalidInput`] error.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::InvalidInput {
            message: message.into(),
        }
    }

    /// An [`ErrorCode::PartialDuplicateBatch`] error.
    pub fn partial_duplicate(message: impl Into<String>) -> Self {
        Self::PartialDuplicateBatch {
            message: message.into(),
        }
    }

    /// An [`ErrorCode::IdempotencyConflict`] error.
    pub fn idempotency_conflict(message: impl Into<String>) -> Self {
        Self::IdempotencyConflict {
            message: message.into(),
        }
    }

    /// An [`ErrorCode::SupersededAttempt`] error for `cause` in `session_id`.
    pub fn superseded(session_id: &str, cause: &Cause) -> Self {
        Self::SupersededAttempt {
            session_id: session_id.to_owned(),
            cause: cause.clone(),
        }
    }

    /// The [`ErrorCode::SessionCleared`] error for work scheduled from `origin_index`.
    pub fn session_cleared(session_id: &str, origin_index: u64) -> Self {
        Self::SessionCleared {
            message: format!(
                "scheduled work from event {origin_index} was cleared in session '{session_id}'"
            ),
        }
    }

    /// An [`ErrorCode::NoSuchEvent`] error.
    pub fn no_such_event(session_id: &str, index: u64) -> Self {
        Self::NoSuchEvent {
            session_id: session_id.to_owned(),
            index,
        }
    }

    /// The [`ErrorCode::PartialDuplicateBatch`] error of an append whose
    /// batch mixes `stored` already-appended ids with `fresh` new events.
    pub fn mixed_batch(stored: usize, fresh: usize) -> Self {
        Self::partial_duplicate(format!(
            "batch mixes {stored} already-appended and {fresh} fresh events"
        ))
    }

    /// The [`ErrorCode::PartialDuplicateBatch`] error of an event id (given
    /// or generated) that a row of `session_id` above the clear already owns.
    pub fn id_taken(session_id: &str, id: &str) -> Self {
        Self::partial_duplicate(format!(
            "event id '{id}' already exists in session '{session_id}'"
        ))
    }

    /// The [`ErrorCode::InvalidInput`] error of a call that writes on a
    /// store opened read-only (`store` names the database).
    pub fn read_only(store: &str) -> Self {
        Self::invalid_input(format!(
            "{store} was opened read-only: this call writes, open the store read-write to make it"
        ))
    }

    /// The [`ErrorCode::PartialDuplicateBatch`] error of a completion whose
    /// returned events name ids already appended.
    pub fn returned_ids_stored() -> Self {
        Self::partial_duplicate("returned event batch contains already-appended ids")
    }

    /// The [`ErrorCode::PartialDuplicateBatch`] error of a repeated
    /// completion whose returned events differ from the recorded ones.
    pub fn completion_mismatch() -> Self {
        Self::partial_duplicate("completed attempt does not match the returned event batch")
    }

    /// The [`ErrorCode::InvalidInput`] error for pausing a consumer in a
    /// session where it has no cursor.
    pub fn nothing_to_pause(consumer: &str, session_id: &str) -> Self {
        Self::invalid_input(format!(
            "consumer '{consumer}' has no cursor in session '{session_id}': nothing to pause there (omit the session to pause it in every session)"
        ))
    }

    /// The [`ErrorCode::InvalidInput`] error for a `(consumer, lane)` used
    /// both as a log lane and a target lane.
    pub fn lane_conflict(consumer: &str, lane: &str) -> Self {
        Self::invalid_input(format!(
            "lane '{lane}' of consumer '{consumer}' is used both as a log lane and as a target lane: give targeted work a different lane"
        ))
    }

    /// An [`ErrorCode::Backend`] error for a stored `what` that does not
    /// decode (a corrupt row), keeping the decoder's error.
    pub fn corrupt(what: &str, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            message: format!("corrupt {what} in the database"),
            source: Some(source.into()),
        }
    }

    /// An [`ErrorCode::Backend`] error for a stored `what` that is not one
    /// of the values it may hold (a corrupt row).
    pub fn corrupt_value(what: &str) -> Self {
        Self::Backend {
            message: format!("corrupt {what} in the database"),
            source: None,
        }
    }

    /// The [`ErrorCode::SessionInUse`] error refusing to delete `session_id`
    /// while `cursor`'s head still has `work`.
    pub fn session_in_use(
        session_id: &str,
        cursor: &crate::types::Cursor,
        work: &crate::retention::HeadWork,
    ) -> Self {
        use crate::retention::HeadWork;
        let lane = cursor
            .lane
            .as_deref()
            .map(|lane| format!(" lane '{lane}'"))
            .unwrap_or_default();
        let index = cursor.head.unwrap_or(cursor.position);
        let state = match work {
            HeadWork::Leased { holder, until } => {
                format!("is leased by '{holder}' until {until} ms")
            }
            HeadWork::Retrying { until } => format!("waits to be retried at {until} ms"),
            HeadWork::Waiting => "is waiting to be claimed".to_owned(),
        };
        Self::SessionInUse {
            message: format!(
                "session '{session_id}' still has work: the head {index} of consumer '{}'{lane} {state}; \
                 let it finish, or delete with force to end it",
                cursor.consumer
            ),
        }
    }

    /// The [`ErrorCode::SessionDeleted`] error for a request naming
    /// incarnation `requested` of `session_id`, which is now `current`.
    pub fn session_replaced(session_id: &str, requested: u64, current: u64) -> Self {
        Self::SessionDeleted {
            message: format!(
                "session '{session_id}' was deleted and created again since the request's \
                 head was read (incarnation {requested}, now {current}); read the session again"
            ),
        }
    }

    /// The [`ErrorCode::SessionDeleted`] error ending a stream that followed
    /// `session_id` when it was deleted.
    pub fn session_deleted(session_id: &str) -> Self {
        Self::SessionDeleted {
            message: format!("session '{session_id}' was deleted while it was followed"),
        }
    }

    /// The [`ErrorCode::PayloadMismatch`] error of a rewrite whose item
    /// `what` ("the payload of event 3 in session 's'") holds another
    /// payload than the one expected.
    pub fn payload_mismatch(what: &str) -> Self {
        Self::PayloadMismatch {
            message: format!(
                "{what} is not the expected one (changed since it was read); \
                 nothing was rewritten: read it again and retry"
            ),
        }
    }

    /// The [`ErrorCode::NotFound`] error of a rewrite naming `what` ("the
    /// state of reducer 'r' at index 3 in session 's'"), which is not stored.
    pub fn not_found(what: &str) -> Self {
        Self::NotFound {
            message: format!(
                "{what} is not stored (never written, below the clear, expired or deleted); \
                 nothing was rewritten"
            ),
        }
    }

    /// The [`ErrorCode::InvalidInput`] error of a rewrite naming the clear
    /// marker at `index` of `session_id`, whose payload the store writes.
    pub fn marker_not_rewritten(session_id: &str, index: u64) -> Self {
        Self::invalid_input(format!(
            "event {index} in session '{session_id}' is the clear marker: the store writes its \
             payload, which cannot be rewritten; leave it out of the rewrite"
        ))
    }

    /// An [`ErrorCode::Unavailable`] error keeping `source`.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An [`ErrorCode::Backend`] error keeping `source`.
    pub fn backend(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_strings() {
        let err = StoreError::invalid_input("empty session id");
        assert_eq!(err.code(), ErrorCode::InvalidInput);
        assert_eq!(err.code().as_str(), "INVALID_INPUT");
        assert_eq!(
            serde_json::to_string(&ErrorCode::PartialDuplicateBatch).unwrap(),
            "\"PARTIAL_DUPLICATE_BATCH\""
        );
    }

    #[test]
    fn only_busy_and_unavailable_are_retryable() {
        let lost = StoreError::unavailable("claiming", std::io::Error::other("reset"));
        assert_eq!(lost.code().as_str(), "UNAVAILABLE");
        assert!(lost.is_retryable());
        let busy = StoreError::Busy {
            message: "locked".into(),
            source: None,
        };
        assert!(busy.is_retryable());
        assert!(!StoreError::invalid_input("bad").is_retryable());
        assert!(!StoreError::backend("x", std::io::Error::other("y")).is_retryable());
    }

    #[test]
    fn backend_errors_keep_their_source() {
        let io = std::io::Error::other("disk on fire");
        let err = StoreError::backend("writing events", io);
        let source = StdError::source(&err).expect("source kept");
        assert_eq!(source.to_string(), "disk on fire");
    }
}
