//! Constructors of the result types (see "Versioning" on the crate's
//! front page).
//!
//! The structs a [`Store`](crate::Store) returns are `#[non_exhaustive]`:
//! their fields are public to read (and to change), but outside this crate
//! they cannot be written as struct literals, so a later version can add a
//! field without breaking anyone. Backends, test doubles and layers build
//! them with these constructors instead: `new` takes the fields every value
//! has, and a field added later arrives with a default and a `with_*`
//! method, so code written against these constructors keeps compiling.
//!
//! The result enums are `#[non_exhaustive]` too: a `match` on them needs a
//! wildcard arm, so a later version can add a variant.
//!
//! ```
//! use a2_store_api::{AppendResult, StoredEvent};
//! use serde_json::json;
//!
//! let event = StoredEvent::new("s1", 1, "e1", "user.message", json!({"text": "hi"}), 1_000);
//! let result = AppendResult::new(vec![event], false);
//! assert_eq!(result.events[0].index, 1);
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

use crate::types::{
    AppendResult, BulkRedriveResult, Cause, Cursor, CursorKind, CursorRef, Dispatch, FailOutcome,
    FailResult, ForkOrigin, ForkResult, Head, Pause, PresenceResult, PresenceRow, ReclaimResult,
    RedriveResult, RedrivenHead, RenewResult, ResumeResult, SessionClaim, SessionInfo, SessionWork,
    Snapshot, StateRead, StoredEvent, WakeLogResult,
};
use crate::Payload;

impl StoredEvent {
    /// The event stored at `index` of `session_id`, without a cause.
    pub fn new(
        session_id: impl Into<String>,
        index: u64,
        id: impl Into<String>,
        event_type: impl Into<String>,
        payload: impl Into<Payload>,
        created_at: i64,
    ) -> Self {
        Self {
            id: id.into(),
            event_type: event_type.into(),
            payload: payload.into(),
            index,
            session_id: session_id.into(),
            created_at,
            cause: None,
        }
    }

    /// The same event with `cause` (the attempt that produced it).
    pub fn with_cause(mut self, cause: Option<Cause>) -> Self {
        self.cause = cause;
        self
    }
}

impl Cursor {
    /// A cursor at `position` with no head, no type filter, fresh
    /// bookkeeping and no pause.
    pub fn new(
        consumer: impl Into<String>,
        lane: Option<String>,
        kind: CursorKind,
        position: u64,
    ) -> Self {
        Self {
            consumer: consumer.into(),
            lane,
            kind,
            position,
            head: None,
            types: None,
            dispatch: Dispatch::default(),
            pause: None,
        }
    }

    /// The same cursor with `head` as the index it must process next.
    pub fn with_head(mut self, head: Option<u64>) -> Self {
        self.head = head;
        self
    }

    /// The same cursor taking only `types` (log cursors).
    pub fn with_types(mut self, types: Option<Vec<String>>) -> Self {
        self.types = types;
        self
    }

    /// The same cursor with its head's bookkeeping.
    pub fn with_dispatch(mut self, dispatch: Dispatch) -> Self {
        self.dispatch = dispatch;
        self
    }

    /// The same cursor with the pause in force for its consumer.
    pub fn with_pause(mut self, pause: Option<Pause>) -> Self {
        self.pause = pause;
        self
    }
}

impl Dispatch {
    /// Fresh bookkeeping of a head leased until `claim_expires_at` (`None`:
    /// not leased), as a work summary or a busy probe looks at it.
    pub fn leased_until(claim_expires_at: Option<i64>) -> Self {
        Self {
            claim_expires_at,
            ..Self::default()
        }
    }

    /// Bookkeeping of a head dead-lettered at `failed_at`, as a work summary
    /// looks at it.
    pub fn dead_lettered_at(failed_at: i64) -> Self {
        Self {
            failed_at: Some(failed_at),
            ..Self::default()
        }
    }
}

impl Head {
    /// `event` as the head of the cursor `(consumer, lane)`, with its
    /// bookkeeping; no clear index.
    pub fn new(
        event: StoredEvent,
        consumer: impl Into<String>,
        lane: Option<String>,
        dispatch: Dispatch,
    ) -> Self {
        Self {
            event,
            consumer: consumer.into(),
            lane,
            dispatch,
            clear_index: None,
            incarnation: 0,
        }
    }

    /// The incarnation requests about this head are fenced by: `None` when
    /// the backend did not say (0).
    pub fn fence(&self) -> Option<u64> {
        (self.incarnation != 0).then_some(self.incarnation)
    }

    /// The same head, of a session in incarnation `incarnation`.
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// The same head in a session cleared at `clear_index`.
    pub fn with_clear_index(mut self, clear_index: Option<u64>) -> Self {
        self.clear_index = clear_index;
        self
    }
}

impl AppendResult {
    /// The stored `events` and whether any served cursor has work.
    pub fn new(events: Vec<StoredEvent>, has_pending: bool) -> Self {
        Self {
            events,
            has_pending,
        }
    }
}

impl RenewResult {
    /// The claims `renewed` and those `superseded`.
    pub fn new(renewed: Vec<CursorRef>, superseded: Vec<CursorRef>) -> Self {
        Self {
            renewed,
            superseded,
        }
    }
}

impl FailResult {
    /// How the failure was recorded and the head's failure count after it.
    pub fn new(outcome: FailOutcome, failure_count: u32) -> Self {
        Self {
            outcome,
            failure_count,
        }
    }
}

impl RedriveResult {
    /// Whether the head was redriven, and whether any served cursor has work.
    pub fn new(redriven: bool, has_pending: bool) -> Self {
        Self {
            redriven,
            has_pending,
        }
    }
}

impl ReclaimResult {
    /// `reclaimed` rows deleted; `done` when nothing is left to reclaim.
    pub fn new(reclaimed: u64, done: bool) -> Self {
        Self { reclaimed, done }
    }
}

impl WakeLogResult {
    /// The log cursor after the wake, and the session's head.
    pub fn new(cursor: Cursor, head: u64) -> Self {
        Self { cursor, head }
    }
}

impl Snapshot {
    /// The reducer `state` through `index`.
    pub fn new(index: u64, state: Value) -> Self {
        Self { index, state }
    }
}

impl StateRead {
    /// The `snapshot` found (if any) and the session's clear index.
    pub fn new(snapshot: Option<Snapshot>, clear_index: u64) -> Self {
        Self {
            snapshot,
            clear_index,
        }
    }
}

impl PresenceResult {
    /// The fields `applied` and how many were applied.
    pub fn new(applied: BTreeMap<String, Value>, applied_count: usize) -> Self {
        Self {
            applied,
            applied_count,
        }
    }
}

impl PresenceRow {
    /// One participant's field: its `value`, the index it had `seen`, when
    /// it was written (`at`) and when it expires, ms.
    pub fn new(
        participant: impl Into<String>,
        field: impl Into<String>,
        value: Value,
        seen: Option<u64>,
        at: i64,
        expires_at: i64,
    ) -> Self {
        Self {
            participant: participant.into(),
            field: field.into(),
            value,
            seen,
            at,
            expires_at,
        }
    }
}

impl SessionInfo {
    /// A session's head, clear index and reclaimed-through index; not a fork.
    pub fn new(
        session_id: impl Into<String>,
        head: u64,
        clear_index: u64,
        reclaimed_through: u64,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            head,
            clear_index,
            reclaimed_through,
            forked_from: None,
            incarnation: 0,
        }
    }

    /// The same session, in incarnation `incarnation`.
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// The same session, forked from `origin`.
    pub fn with_forked_from(mut self, origin: Option<ForkOrigin>) -> Self {
        self.forked_from = origin;
        self
    }
}

impl ForkOrigin {
    /// Forked from `session_id` through `index`.
    pub fn new(session_id: impl Into<String>, index: u64) -> Self {
        Self {
            session_id: session_id.into(),
            index,
        }
    }
}

impl SessionClaim {
    /// What one session gave a cross-session claim.
    pub fn new(
        session_id: impl Into<String>,
        heads: Vec<Head>,
        dead_lettered: Vec<Head>,
        head: u64,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            heads,
            dead_lettered,
            head,
        }
    }
}

impl SessionWork {
    /// A session with no counted work yet (every count 0, no times).
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            ..Self::default()
        }
    }
}

impl Pause {
    /// `consumer` paused in `session_id` (`None`: everywhere) until
    /// `until_ms` (`None`: until resumed), recorded at `paused_at`.
    pub fn new(
        consumer: impl Into<String>,
        session_id: Option<String>,
        until_ms: Option<i64>,
        paused_at: i64,
    ) -> Self {
        Self {
            consumer: consumer.into(),
            session_id,
            until_ms,
            paused_at,
        }
    }
}

impl ResumeResult {
    /// Whether a pause was lifted.
    pub fn new(resumed: bool) -> Self {
        Self { resumed }
    }
}

impl RedrivenHead {
    /// The dead letter at `cursor` of `session_id`, dead since `failed_at`.
    pub fn new(session_id: impl Into<String>, cursor: CursorRef, failed_at: i64) -> Self {
        Self {
            session_id: session_id.into(),
            cursor,
            failed_at,
        }
    }
}

impl BulkRedriveResult {
    /// The heads `redriven`, and whether `more` matched past the limit.
    pub fn new(redriven: Vec<RedrivenHead>, more: bool) -> Self {
        Self { redriven, more }
    }
}

impl ForkResult {
    /// The new `session` and how many events were `copied` into it.
    pub fn new(session: SessionInfo, copied: u64) -> Self {
        Self { session, copied }
    }
}
