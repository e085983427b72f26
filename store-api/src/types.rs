//! Request and response types of the [`Store`](crate::Store) trait.
//!
//! Every type derives serde with `snake_case` field names and round-trips
//! through JSON, so a CLI or another language can speak them. Timestamps are
//! milliseconds since the Unix epoch (`i64`); log indexes are 1-based `u64`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Payload;

/// The type of the marker event a clear appends. Log cursors never take it.
pub const CLEAR_EVENT_TYPE: &str = "a2.cleared";

/// How many rows one [`Store::reclaim`](crate::Store::reclaim) call deletes at most.
pub const RECLAIM_BATCH: usize = 256;

/// The consumer attempt that produced an event: `(consumer, lane, index, attempt)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cause {
    /// The consumer that ran the attempt.
    pub consumer: String,
    /// Its lane, `None` for an event cursor.
    #[serde(default)]
    pub lane: Option<String>,
    /// The index the attempt processed.
    pub index: u64,
    /// The attempt number (1-based) that produced the event.
    pub attempt: u32,
}

impl Cause {
    /// The cursor ref this cause names.
    pub fn cursor_ref(&self) -> CursorRef {
        CursorRef {
            consumer: self.consumer.clone(),
            lane: self.lane.clone(),
            index: self.index,
        }
    }
}

/// Work an appended event asks for: a consumer, optionally on a FIFO lane.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Target {
    /// The consumer that must process the event.
    pub consumer: String,
    /// `Some(lane)`: queued on that lane's FIFO cursor; `None`: its own event cursor.
    #[serde(default)]
    pub lane: Option<String>,
    /// Not claimable before this time: the head is busy until then (see
    /// [`crate::schedule`]). `None`: claimable at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<NotBefore>,
}

impl Target {
    /// A target on a per-event cursor (runs concurrently with others).
    pub fn event(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            lane: None,
            not_before: None,
        }
    }

    /// A target on the FIFO lane `lane` of `consumer`.
    pub fn lane(consumer: impl Into<String>, lane: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            lane: Some(lane.into()),
            not_before: None,
        }
    }

    /// The same target, not claimable before `at_ms` (ms since the epoch).
    pub fn not_before_ms(mut self, at_ms: i64) -> Self {
        self.not_before = Some(NotBefore::AtMs(at_ms));
        self
    }

    /// The same target, not claimable until `delay` after the append (on
    /// the store's clock).
    pub fn delayed(mut self, delay: std::time::Duration) -> Self {
        self.not_before = Some(NotBefore::AfterMs(crate::duration_ms(delay)));
        self
    }
}

/// When a scheduled head becomes claimable: an absolute time or a delay
/// from the store's clock at the write. JSON: `{"at_ms": 1700000000000}` or
/// `{"after_ms": 600000}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotBefore {
    /// At this time, ms since the epoch (not negative).
    AtMs(i64),
    /// This long after the write, ms (not negative).
    AfterMs(i64),
}

/// An event to append.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// Caller-supplied id (enables idempotent replay); generated when `None`.
    #[serde(default)]
    pub id: Option<String>,
    /// Non-empty event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Any JSON value (`Payload::from(value)`, or pass a `Value` to [`NewEvent::new`]).
    #[serde(default)]
    pub payload: Payload,
    /// The attempt that produced it; fences the append (see the
    /// [guide](crate::guide), Idempotency and fencing).
    #[serde(default)]
    pub cause: Option<Cause>,
    /// Consumers that must process it.
    #[serde(default)]
    pub targets: Vec<Target>,
}

impl NewEvent {
    /// An event of `event_type` with `payload`, no id, cause or targets.
    pub fn new(event_type: impl Into<String>, payload: impl Into<Payload>) -> Self {
        Self {
            id: None,
            event_type: event_type.into(),
            payload: payload.into(),
            cause: None,
            targets: Vec::new(),
        }
    }

    /// Sets a caller-supplied id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Adds a target.
    pub fn with_target(mut self, target: Target) -> Self {
        self.targets.push(target);
        self
    }

    /// Sets the fencing cause.
    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }
}

/// An event as stored in a session's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoredEvent {
    /// Unique within the session (above its clear).
    pub id: String,
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload as appended; shared with the store's copy where it keeps one.
    pub payload: Payload,
    /// 1-based, contiguous position in the session's log.
    pub index: u64,
    /// The session the event belongs to.
    pub session_id: String,
    /// Store clock at append, ms; equal for every row of one batch.
    pub created_at: i64,
    /// The attempt that produced it, if any.
    #[serde(default)]
    pub cause: Option<Cause>,
}

/// What a declared log consumer follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogDeclaration {
    /// The lane its log cursor lives on (a log lane is never a target lane).
    pub lane: String,
    /// Types it takes; `None` takes every type (never the clear marker).
    #[serde(default)]
    pub types: Option<Vec<String>>,
    /// `true`: start from the last clear; `false`: from the head when first declared.
    #[serde(default)]
    pub backfill: bool,
}

/// A consumer a caller serves, passed with calls (the store keeps no registry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerDeclaration {
    /// The consumer's name.
    pub name: String,
    /// Present for a log consumer.
    #[serde(default)]
    pub log: Option<LogDeclaration>,
}

impl ConsumerDeclaration {
    /// A consumer of targeted work only.
    pub fn targeted(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            log: None,
        }
    }

    /// A log consumer on `lane` taking `types` (`None`: all).
    pub fn log(
        name: impl Into<String>,
        lane: impl Into<String>,
        types: Option<Vec<String>>,
        backfill: bool,
    ) -> Self {
        Self {
            name: name.into(),
            log: Some(LogDeclaration {
                lane: lane.into(),
                types,
                backfill,
            }),
        }
    }
}

/// Names a cursor's head: `(consumer, lane, index)`.
///
/// For an event cursor the index picks the cursor; for lane and log cursors
/// `(consumer, lane)` picks it and `index` must be its current head.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CursorRef {
    /// The consumer.
    pub consumer: String,
    /// The lane, `None` for an event cursor.
    #[serde(default)]
    pub lane: Option<String>,
    /// The head index.
    pub index: u64,
}

impl CursorRef {
    /// A ref to `(consumer, lane, index)`.
    pub fn new(consumer: impl Into<String>, lane: Option<&str>, index: u64) -> Self {
        Self {
            consumer: consumer.into(),
            lane: lane.map(str::to_owned),
            index,
        }
    }
}

/// The kind of a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorKind {
    /// One targeted event, concurrent with others.
    Event,
    /// A FIFO queue of targeted indexes, one head at a time.
    Lane,
    /// A declared follower of the whole log, filtered by type.
    Log,
}

/// Dispatch bookkeeping of one head; fresh each time a cursor moves to a new head.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Dispatch {
    /// Claims (and expiry dead-letters) so far; the current attempt number.
    pub attempt_count: u32,
    /// First claim, ms.
    pub first_claimed_at: Option<i64>,
    /// Latest claim, ms.
    pub last_claimed_at: Option<i64>,
    /// Holder of the current claim; `None` when unclaimed or released.
    pub claim_holder: Option<String>,
    /// Claim expiry or end of the retry delay, ms.
    pub claim_expires_at: Option<i64>,
    /// Failures counted (explicit fails and expired claims).
    pub failure_count: u32,
    /// Latest failure, ms.
    pub last_failed_at: Option<i64>,
    /// Attempt of the latest explicit failure.
    pub last_failed_attempt: Option<u32>,
    /// Error of the latest explicit failure.
    pub last_error: Option<String>,
    /// Set when dead-lettered, ms.
    pub failed_at: Option<i64>,
}

/// A cursor with its position, head and bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Cursor {
    /// The consumer.
    pub consumer: String,
    /// The lane, `None` for an event cursor.
    pub lane: Option<String>,
    /// Its kind.
    pub kind: CursorKind,
    /// Last index it finished (or started after).
    pub position: u64,
    /// The index it must process next, if any.
    pub head: Option<u64>,
    /// Types a log cursor takes (`None`: all, or not a log cursor).
    #[serde(default)]
    pub types: Option<Vec<String>>,
    /// Bookkeeping of the head.
    pub dispatch: Dispatch,
    /// The pause in force for its consumer, if any (see [`crate::pause`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
}

impl Cursor {
    /// The ref of its current head, if it has one.
    pub fn head_ref(&self) -> Option<CursorRef> {
        self.head.map(|index| CursorRef {
            consumer: self.consumer.clone(),
            lane: self.lane.clone(),
            index,
        })
    }
}

/// A claimable or dead-lettered head: the stored event plus its cursor's bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Head {
    /// The event at the head.
    pub event: StoredEvent,
    /// The cursor's consumer.
    pub consumer: String,
    /// The cursor's lane.
    pub lane: Option<String>,
    /// Bookkeeping of this head.
    pub dispatch: Dispatch,
    /// The session's clear index when it has been cleared.
    #[serde(default)]
    pub clear_index: Option<u64>,
    /// The incarnation of the session the head belongs to (see [`crate::retention`]).
    #[serde(default)]
    pub incarnation: u64,
}

impl Head {
    /// The ref naming this head.
    pub fn cursor_ref(&self) -> CursorRef {
        CursorRef {
            consumer: self.consumer.clone(),
            lane: self.lane.clone(),
            index: self.event.index,
        }
    }

    /// The cause events produced by the current attempt carry.
    pub fn cause(&self) -> Cause {
        Cause {
            consumer: self.consumer.clone(),
            lane: self.lane.clone(),
            index: self.event.index,
            attempt: self.dispatch.attempt_count,
        }
    }
}

/// Options of [`Store::append`](crate::Store::append).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendOptions {
    /// Declarations served; restricts `has_pending` and creates log cursors.
    #[serde(default)]
    pub consumers: Option<Vec<ConsumerDeclaration>>,
    /// The event this append was scheduled from; rejected if at/below the clear.
    #[serde(default)]
    pub origin_index: Option<u64>,
}

/// Result of [`Store::append`](crate::Store::append).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AppendResult {
    /// The stored rows in the batch's order.
    pub events: Vec<StoredEvent>,
    /// Whether any served cursor has a claimable (not dead-lettered) head.
    pub has_pending: bool,
}

/// Request of [`Store::claim_available`](crate::Store::claim_available).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// The session.
    pub session_id: String,
    /// Who claims.
    pub holder: String,
    /// Lease length, ms (exactly one of `ttl_ms` and `expires_at_ms`).
    #[serde(default)]
    pub ttl_ms: Option<i64>,
    /// Lease end, ms since epoch.
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
    /// Refs to skip; an excluded lane or log cursor is skipped whatever its head.
    #[serde(default)]
    pub exclude: Vec<CursorRef>,
    /// Serve only these consumers; `None` serves every cursor.
    #[serde(default)]
    pub consumers: Option<Vec<ConsumerDeclaration>>,
    /// An expired claim reaching this many failures is dead-lettered.
    #[serde(default)]
    pub max_failures: Option<u32>,
    /// Skip heads above this index.
    #[serde(default)]
    pub through: Option<u64>,
    /// Claim at most this many, lowest `(index, consumer)` first.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Result of [`Store::claim_available`](crate::Store::claim_available).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ClaimResult {
    /// Something was claimed or dead-lettered.
    Claimed {
        /// Claimed heads by `(index, consumer, lane)`.
        heads: Vec<Head>,
        /// Heads dead-lettered by this call (expired claims at `max_failures`).
        dead_lettered: Vec<Head>,
        /// The session's log head.
        head: u64,
    },
    /// Nothing claimable now; the earliest busy head frees at `retry_at`.
    Busy {
        /// Earliest busy expiry, ms.
        retry_at: i64,
    },
    /// No served cursor has a claimable or busy head.
    Settled,
}

/// A held claim to renew: the head's ref and the attempt that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldClaim {
    /// The head.
    #[serde(flatten)]
    pub cursor: CursorRef,
    /// The attempt returned by the claim.
    pub attempt: u32,
}

/// Request of [`Store::renew_claims`](crate::Store::renew_claims).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewRequest {
    /// The session.
    pub session_id: String,
    /// Who holds the claims.
    pub holder: String,
    /// The claims to extend.
    pub claims: Vec<HeldClaim>,
    /// New lease length, ms (exactly one of `ttl_ms` and `expires_at_ms`).
    #[serde(default)]
    pub ttl_ms: Option<i64>,
    /// New lease end, ms since epoch.
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
    /// The session incarnation the request was made for (see
    /// [`crate::retention`]); `None`: not fenced by incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

/// Result of [`Store::renew_claims`](crate::Store::renew_claims), refs by `(index, consumer)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RenewResult {
    /// Claims whose expiry was extended.
    pub renewed: Vec<CursorRef>,
    /// Claims that can never complete (cleared, moved past, newer attempt).
    pub superseded: Vec<CursorRef>,
}

/// Request of [`Store::complete_attempt`](crate::Store::complete_attempt).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompleteRequest {
    /// The session.
    pub session_id: String,
    /// The cursor's consumer.
    pub consumer: String,
    /// The cursor's lane.
    #[serde(default)]
    pub lane: Option<String>,
    /// The head completed.
    pub index: u64,
    /// The attempt completing it.
    pub attempt: u32,
    /// Events the handler produced, appended with this attempt as cause.
    #[serde(default)]
    pub events: Vec<NewEvent>,
    /// Declarations served (log cursors for the returned events).
    #[serde(default)]
    pub consumers: Option<Vec<ConsumerDeclaration>>,
    /// The session incarnation the request was made for (see
    /// [`crate::retention`]); `None`: not fenced by incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

/// Result of [`Store::complete_attempt`](crate::Store::complete_attempt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompleteResult {
    /// Applied now, or a replay of the same completion.
    Completed {
        /// The stored returned events.
        events: Vec<StoredEvent>,
    },
    /// The attempt is no longer current; nothing changed.
    Superseded,
}

/// Request of [`Store::fail_attempt`](crate::Store::fail_attempt).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRequest {
    /// The session.
    pub session_id: String,
    /// The cursor's consumer.
    pub consumer: String,
    /// The cursor's lane.
    #[serde(default)]
    pub lane: Option<String>,
    /// The head that failed.
    pub index: u64,
    /// The attempt that failed.
    pub attempt: u32,
    /// What went wrong.
    pub error: String,
    /// Dead-letter when the failure count reaches this; `None`: never.
    #[serde(default)]
    pub max_failures: Option<u32>,
    /// Keep the head busy this long before it can be claimed again, ms.
    #[serde(default)]
    pub retry_after_ms: Option<i64>,
    /// The session incarnation the request was made for (see
    /// [`crate::retention`]); `None`: not fenced by incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

/// How a failure was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailOutcome {
    /// Counted; the head can be claimed again (after the retry delay).
    Failed,
    /// Counted and the head reached `max_failures`.
    DeadLettered,
    /// The attempt is no longer current; nothing changed.
    Superseded,
}

/// Result of [`Store::fail_attempt`](crate::Store::fail_attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FailResult {
    /// What happened.
    pub outcome: FailOutcome,
    /// The head's failure count afterwards (0 when superseded and moved on).
    pub failure_count: u32,
}

/// What a redrive does with a dead-lettered head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedriveAction {
    /// Make it claimable again (failures reset, attempts kept).
    Retry,
    /// Move the cursor past it as if processed (no completion recorded).
    Skip,
}

impl std::str::FromStr for RedriveAction {
    type Err = crate::StoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "retry" => Ok(Self::Retry),
            "skip" => Ok(Self::Skip),
            other => Err(crate::StoreError::invalid_input(format!(
                "unknown redrive action '{other}': use 'retry' or 'skip'"
            ))),
        }
    }
}

/// Request of [`Store::redrive`](crate::Store::redrive).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveRequest {
    /// The session.
    pub session_id: String,
    /// The consumer whose dead-lettered head to redrive.
    pub consumer: String,
    /// The dead-lettered head's index.
    pub index: u64,
    /// Retry or skip.
    pub action: RedriveAction,
    /// The dead-lettered cursor's lane. `None`: the first dead-lettered
    /// head of `consumer` at `index` in `(lane)` order, the event cursor
    /// first (what redrive did before it could name a lane).
    #[serde(default)]
    pub lane: Option<String>,
    /// Declarations served (restricts `has_pending`).
    #[serde(default)]
    pub consumers: Option<Vec<ConsumerDeclaration>>,
    /// The session incarnation the request was made for (see
    /// [`crate::retention`]); `None`: not fenced by incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

/// Result of [`Store::redrive`](crate::Store::redrive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RedriveResult {
    /// Whether a dead-lettered head was found and redriven.
    pub redriven: bool,
    /// Whether any served cursor has a claimable head afterwards.
    pub has_pending: bool,
}

/// Request of [`Store::clear`](crate::Store::clear).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearRequest {
    /// The session.
    pub session_id: String,
    /// Clear only if the head is exactly this.
    #[serde(default)]
    pub if_last_index: Option<u64>,
    /// Fences the clear like an append's cause.
    #[serde(default)]
    pub cause: Option<Cause>,
    /// The session incarnation the request was made for (see
    /// [`crate::retention`]); `None`: not fenced by incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

/// Result of [`Store::clear`](crate::Store::clear).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ClearResult {
    /// The marker appended; its index is the new clear index.
    Cleared {
        /// The `a2.cleared` marker row.
        marker: StoredEvent,
    },
    /// `if_last_index` did not match; nothing changed.
    NotCleared {
        /// The current head.
        head: u64,
    },
}

/// Result of [`Store::reclaim`](crate::Store::reclaim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReclaimResult {
    /// Rows deleted by this call (at most [`RECLAIM_BATCH`]).
    pub reclaimed: u64,
    /// No rows remain below the clear marker.
    pub done: bool,
}

/// Options of [`Store::read`](crate::Store::read): rows with `after < index <= through`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadOptions {
    /// Exclusive lower bound; 0 by default.
    #[serde(default)]
    pub after: Option<u64>,
    /// Inclusive upper bound; the head by default.
    #[serde(default)]
    pub through: Option<u64>,
    /// At most this many rows.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Result of [`Store::wake_log`](crate::Store::wake_log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WakeLogResult {
    /// The log cursor (idle and not stored when nothing follows the clear).
    pub cursor: Cursor,
    /// The session's log head.
    pub head: u64,
}

/// One snapshot write of [`Store::write_state`](crate::Store::write_state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateWrite {
    /// The log index the state was folded through.
    pub index: u64,
    /// The reducer's state.
    pub state: Value,
    /// Heads that keep this checkpoint readable while they hold.
    #[serde(default)]
    pub pins: Vec<CursorRef>,
}

/// Options of [`Store::read_state`](crate::Store::read_state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadStateOptions {
    /// Return no snapshot above this index.
    #[serde(default)]
    pub at: Option<u64>,
}

/// A reducer snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Snapshot {
    /// The index it was folded through.
    pub index: u64,
    /// The state.
    pub state: Value,
}

/// Result of [`Store::read_state`](crate::Store::read_state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StateRead {
    /// The best snapshot at or below `at` and above the clear, if any.
    pub snapshot: Option<Snapshot>,
    /// The session's clear index (0 when never cleared).
    pub clear_index: u64,
}

/// Metadata of [`Store::set_presence`](crate::Store::set_presence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceMeta {
    /// The writer's timestamp, ms; last writer wins per field by it.
    pub at: i64,
    /// A log index the participant has seen (opaque to the store).
    #[serde(default)]
    pub seen: Option<u64>,
    /// Lifetime from the store's clock at the write, ms (positive).
    pub ttl_ms: i64,
}

/// Result of [`Store::set_presence`](crate::Store::set_presence).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PresenceResult {
    /// Fields that were written (a `null` is a deletion).
    pub applied: BTreeMap<String, Value>,
    /// How many fields were written.
    pub applied_count: usize,
}

/// One live presence field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PresenceRow {
    /// Who.
    pub participant: String,
    /// Which field.
    pub field: String,
    /// Its value (never `null`: tombstones are not read).
    pub value: Value,
    /// The log index the writer had seen.
    pub seen: Option<u64>,
    /// The writer's timestamp, ms.
    pub at: i64,
    /// When it stops being read, ms.
    pub expires_at: i64,
}

/// Options of [`Store::sessions`](crate::Store::sessions): a page of sessions by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListSessions {
    /// Only ids sorting after this one.
    #[serde(default)]
    pub after: Option<String>,
    /// At most this many.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// A session as listed by [`Store::sessions`](crate::Store::sessions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The session id.
    pub session_id: String,
    /// Its log head.
    pub head: u64,
    /// Its clear index (0 when never cleared).
    pub clear_index: u64,
    /// Index of the last reclaimed row (rows at or below are deleted).
    pub reclaimed_through: u64,
    /// The session and index it was forked from, when it is a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// Its incarnation: never the same for two sessions of one store, even
    /// of one id after a delete (see [`crate::retention`]).
    #[serde(default)]
    pub incarnation: u64,
}

/// The most a cross-session claim may wait, ms: [`ClaimWorkRequest::wait_ms`]
/// above this is `InvalidInput` (a worker waits again instead).
pub const MAX_WAIT_MS: i64 = 300_000;

/// The most heads (and sessions) one [`Store::claim_work`](crate::Store::claim_work)
/// may claim, and the most sessions a [`ClaimWorkRequest::sessions`] list or a
/// [`ListWork`] page may hold.
pub const MAX_WORK_LIMIT: usize = 1_000;

/// Request of [`Store::claim_work`](crate::Store::claim_work): claim heads of
/// the served consumers across every session (or the listed ones), fairly,
/// optionally waiting for work to arrive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimWorkRequest {
    /// Who claims.
    pub holder: String,
    /// Lease length, ms (exactly one of `ttl_ms` and `expires_at_ms`).
    #[serde(default)]
    pub ttl_ms: Option<i64>,
    /// Lease end, ms since epoch.
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
    /// The consumers served (at least one); log declarations give their types.
    pub consumers: Vec<ConsumerDeclaration>,
    /// Serve only these sessions (1 to [`MAX_WORK_LIMIT`] ids); `None`: every session.
    #[serde(default)]
    pub sessions: Option<Vec<String>>,
    /// An expired claim reaching this many failures is dead-lettered.
    #[serde(default)]
    pub max_failures: Option<u32>,
    /// Claim at most this many heads in all (1 to [`MAX_WORK_LIMIT`]; default 1).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Serve at most this many sessions (1 to [`MAX_WORK_LIMIT`]; default: `limit`).
    #[serde(default)]
    pub session_limit: Option<usize>,
    /// Claim at most this many heads in each session (default 1).
    #[serde(default)]
    pub per_session_limit: Option<usize>,
    /// When nothing is claimable, wait up to this long for work, ms
    /// (1 to [`MAX_WAIT_MS`]); `None` answers at once.
    #[serde(default)]
    pub wait_ms: Option<i64>,
}

impl ClaimWorkRequest {
    /// A request by `holder` serving `consumers` under a `ttl_ms` lease,
    /// claiming one head without waiting.
    pub fn new(
        holder: impl Into<String>,
        consumers: Vec<ConsumerDeclaration>,
        ttl_ms: i64,
    ) -> Self {
        Self {
            holder: holder.into(),
            ttl_ms: Some(ttl_ms),
            consumers,
            ..Self::default()
        }
    }

    /// The same request claiming up to `limit` heads in all.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The same request waiting up to `wait_ms` for work.
    pub fn with_wait_ms(mut self, wait_ms: i64) -> Self {
        self.wait_ms = Some(wait_ms);
        self
    }

    /// The heads claimed in all at most (default 1).
    pub fn head_limit(&self) -> usize {
        self.limit.unwrap_or(1)
    }

    /// The sessions served at most (default: [`head_limit`](Self::head_limit)).
    pub fn session_limit(&self) -> usize {
        self.session_limit.unwrap_or_else(|| self.head_limit())
    }

    /// The heads claimed in one session at most (default 1).
    pub fn per_session_limit(&self) -> usize {
        self.per_session_limit.unwrap_or(1)
    }

    /// Whether `session_id` is served (every session when no list is given).
    pub fn serves_session(&self, session_id: &str) -> bool {
        self.sessions
            .as_ref()
            .is_none_or(|sessions| sessions.iter().any(|id| id == session_id))
    }

    /// The names of the served consumers, sorted and without repeats.
    pub fn consumer_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.consumers.iter().map(|c| c.name.clone()).collect();
        names.sort();
        names.dedup();
        names
    }

    /// The per-session claim this request makes in `session_id` when up to
    /// `limit` heads may still be claimed: same holder, lease, consumers and
    /// `max_failures`, no `exclude` or `through`.
    pub fn session_request(&self, session_id: &str, limit: usize) -> ClaimRequest {
        ClaimRequest {
            session_id: session_id.to_owned(),
            holder: self.holder.clone(),
            ttl_ms: self.ttl_ms,
            expires_at_ms: self.expires_at_ms,
            exclude: Vec::new(),
            consumers: Some(self.consumers.clone()),
            max_failures: self.max_failures,
            through: None,
            limit: Some(limit.min(self.per_session_limit()).max(1)),
        }
    }
}

/// What one session gave a [`Store::claim_work`](crate::Store::claim_work) call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionClaim {
    /// The session.
    pub session_id: String,
    /// Claimed heads by `(index, consumer, lane)`.
    pub heads: Vec<Head>,
    /// Heads dead-lettered by this call (expired claims at `max_failures`).
    pub dead_lettered: Vec<Head>,
    /// The session's log head.
    pub head: u64,
}

/// Result of [`Store::claim_work`](crate::Store::claim_work).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ClaimWorkResult {
    /// Something was claimed or dead-lettered.
    Claimed {
        /// The sessions served, in the order they were served (fairness order).
        sessions: Vec<SessionClaim>,
    },
    /// Nothing claimable now; something may become claimable at `retry_at`
    /// (a lease or retry delay ends), never later.
    Busy {
        /// Earliest time a served head may be claimable, ms.
        retry_at: i64,
    },
    /// No served session has a claimable or busy head of the served consumers.
    Settled,
}

impl ClaimWorkResult {
    /// Every claimed head, session by session.
    pub fn heads(&self) -> impl Iterator<Item = (&str, &Head)> {
        let sessions: &[SessionClaim] = match self {
            Self::Claimed { sessions } => sessions,
            _ => &[],
        };
        sessions.iter().flat_map(|session| {
            session
                .heads
                .iter()
                .map(move |head| (session.session_id.as_str(), head))
        })
    }
}

/// Options of [`Store::list_work`](crate::Store::list_work): a page of the
/// sessions with work for some consumers, by session id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListWork {
    /// The consumers whose work is listed (at least one name).
    pub consumers: Vec<String>,
    /// Only sessions whose id sorts after this one.
    #[serde(default)]
    pub after: Option<String>,
    /// At most this many sessions (1 to [`MAX_WORK_LIMIT`]; default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

impl ListWork {
    /// The names of the listed consumers, sorted and without repeats (a
    /// consumer named twice is counted once).
    pub fn consumer_names(&self) -> Vec<String> {
        let mut names = self.consumers.clone();
        names.sort();
        names.dedup();
        names
    }

    /// The page size (default 100).
    pub fn page_size(&self) -> usize {
        self.limit.unwrap_or(100)
    }
}

/// A session's work for the listed consumers, as [`Store::list_work`](crate::Store::list_work) reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionWork {
    /// The session.
    pub session_id: String,
    /// Heads claimable now.
    pub claimable: u64,
    /// Heads under a lease or retry delay that has not ended.
    pub busy: u64,
    /// Dead-lettered heads.
    pub dead_lettered: u64,
    /// Since when the session has waited to be served, ms: the time its
    /// work became claimable or a claim last served it (`None` when nothing
    /// is claimable).
    pub ready_since: Option<i64>,
    /// The earliest end of a busy head's lease or retry delay, ms.
    pub next_expiry: Option<i64>,
}

impl SessionWork {
    /// Whether anything is left to list: a claimable, busy or dead-lettered head.
    pub fn has_work(&self) -> bool {
        self.claimable + self.busy + self.dead_lettered > 0
    }
}

/// Request of [`Store::reschedule`](crate::Store::reschedule): move or
/// cancel a head that has not run yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RescheduleRequest {
    /// The session.
    pub session_id: String,
    /// The cursor's consumer.
    pub consumer: String,
    /// The cursor's lane, `None` for an event cursor.
    #[serde(default)]
    pub lane: Option<String>,
    /// The scheduled index: a cursor's head, or an index queued on a lane.
    pub index: u64,
    /// What to do with it.
    pub change: ScheduleChange,
    /// Fences the change like an append's cause (the attempt that scheduled it).
    #[serde(default)]
    pub cause: Option<Cause>,
    /// The session incarnation the request was made for (see
    /// [`crate::retention`]); `None`: not fenced by incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

/// What [`Store::reschedule`](crate::Store::reschedule) does to a head that has not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleChange {
    /// Make it claimable at this time instead (a time already reached: at once).
    To(NotBefore),
    /// Drop it: the cursor moves past it as if processed (no completion recorded).
    Cancel,
}

/// Result of [`Store::reschedule`](crate::Store::reschedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RescheduleResult {
    /// The head is now claimable from `not_before` (`None`: at once).
    Rescheduled {
        /// The new time, ms; `None` when it was already reached.
        not_before: Option<i64>,
    },
    /// The head was dropped; the cursor moved past it.
    Cancelled,
    /// The head has been claimed at least once: it is running or ran; nothing changed.
    Started,
    /// The cursor has moved past the index (finished, skipped, cancelled or
    /// cleared); nothing changed.
    Gone,
}

/// Request of [`Store::pause`](crate::Store::pause).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseRequest {
    /// The consumer to pause.
    pub consumer: String,
    /// Pause it in this session only; `None`: in every session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Resume by itself at this time, ms (in the future); `None`: until resumed.
    #[serde(default)]
    pub until_ms: Option<i64>,
}

/// A pause in force: a consumer's heads are not claimed and not pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Pause {
    /// The paused consumer.
    pub consumer: String,
    /// The session it is paused in; `None`: every session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// When it resumes by itself, ms; `None`: when resumed.
    #[serde(default)]
    pub until_ms: Option<i64>,
    /// When it was paused (or last re-paused), ms.
    pub paused_at: i64,
}

/// Request of [`Store::resume`](crate::Store::resume).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeRequest {
    /// The consumer to resume.
    pub consumer: String,
    /// Lift its pause in this session; `None`: lift its store-wide pause.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// Result of [`Store::resume`](crate::Store::resume).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResumeResult {
    /// Whether a pause in force was lifted.
    pub resumed: bool,
}

/// Request of [`Store::redrive_all`](crate::Store::redrive_all): redrive
/// every dead-lettered head matching the filters, up to `limit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkRedrive {
    /// Retry or skip each.
    pub action: RedriveAction,
    /// Only this consumer's heads.
    #[serde(default)]
    pub consumer: Option<String>,
    /// Only this session's heads.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Only heads on this lane (`None`: any cursor).
    #[serde(default)]
    pub lane: Option<String>,
    /// Only heads dead-lettered at or after this time, ms.
    #[serde(default)]
    pub dead_since_ms: Option<i64>,
    /// Only heads dead-lettered before this time, ms.
    #[serde(default)]
    pub dead_before_ms: Option<i64>,
    /// At most this many heads (1 to [`MAX_WORK_LIMIT`]; default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

impl BulkRedrive {
    /// A bulk `action` over every dead letter (narrow it with the fields).
    pub fn new(action: RedriveAction) -> Self {
        Self {
            action,
            consumer: None,
            session_id: None,
            lane: None,
            dead_since_ms: None,
            dead_before_ms: None,
            limit: None,
        }
    }

    /// The most heads redriven by one call (default 100).
    pub fn page_size(&self) -> usize {
        self.limit.unwrap_or(100)
    }
}

/// One head a [`Store::redrive_all`](crate::Store::redrive_all) redrove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RedrivenHead {
    /// The session.
    pub session_id: String,
    /// The head's ref.
    #[serde(flatten)]
    pub cursor: CursorRef,
    /// When it had been dead-lettered, ms.
    pub failed_at: i64,
}

/// Result of [`Store::redrive_all`](crate::Store::redrive_all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BulkRedriveResult {
    /// The heads redriven, by `(session_id, index, consumer, lane)`.
    pub redriven: Vec<RedrivenHead>,
    /// Whether matching dead letters are left beyond the limit.
    pub more: bool,
}

/// Request of [`Store::fork`](crate::Store::fork): copy a session's log
/// into a new session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRequest {
    /// The session copied.
    pub session_id: String,
    /// The new session (never written to).
    pub into: String,
    /// Copy through this index (default: the head).
    #[serde(default)]
    pub through: Option<u64>,
}

impl ForkRequest {
    /// A fork of `session_id` into `into` through the head.
    pub fn new(session_id: impl Into<String>, into: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            into: into.into(),
            through: None,
        }
    }

    /// The same fork, through `index`.
    pub fn through(mut self, index: u64) -> Self {
        self.through = Some(index);
        self
    }
}

/// Where a forked session came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ForkOrigin {
    /// The session it was copied from.
    pub session_id: String,
    /// The last index copied.
    pub index: u64,
}

/// Result of [`Store::fork`](crate::Store::fork).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ForkResult {
    /// The new session as [`Store::sessions`](crate::Store::sessions) lists it.
    pub session: SessionInfo,
    /// How many rows were copied.
    pub copied: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip<T>(value: &T)
    where
        T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let text = serde_json::to_string(value).unwrap();
        let back: T = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, value, "{text}");
    }

    #[test]
    fn requests_and_results_round_trip_through_json() {
        round_trip(
            &NewEvent::new("msg", json!({"a": [1, 2]}))
                .with_id("e1")
                .with_target(Target::lane("agent", "L1"))
                .with_target(Target::event("notifier")),
        );
        round_trip(&ClaimRequest {
            session_id: "s".into(),
            holder: "w1".into(),
            ttl_ms: Some(1000),
            exclude: vec![CursorRef::new("agent", Some("L1"), 3)],
            consumers: Some(vec![ConsumerDeclaration::log(
                "audit",
                "log",
                Some(vec!["msg".into()]),
                true,
            )]),
            limit: Some(2),
            ..ClaimRequest::default()
        });
        round_trip(&ClaimResult::Busy { retry_at: 5 });
        round_trip(&ClaimResult::Settled);
        round_trip(&RenewRequest {
            incarnation: None,
            session_id: "s".into(),
            holder: "w".into(),
            claims: vec![HeldClaim {
                cursor: CursorRef::new("c", None, 4),
                attempt: 2,
            }],
            ttl_ms: None,
            expires_at_ms: Some(9),
        });
        round_trip(&FailResult {
            outcome: FailOutcome::DeadLettered,
            failure_count: 3,
        });
        round_trip(&ClearResult::NotCleared { head: 7 });
        let head = Head {
            incarnation: 0,
            event: StoredEvent {
                id: "x".into(),
                event_type: "msg".into(),
                payload: json!(null).into(),
                index: 1,
                session_id: "s".into(),
                created_at: 10,
                cause: Some(Cause {
                    consumer: "c".into(),
                    lane: None,
                    index: 0,
                    attempt: 1,
                }),
            },
            consumer: "c".into(),
            lane: Some("L".into()),
            dispatch: Dispatch {
                attempt_count: 1,
                claim_holder: Some("w".into()),
                ..Dispatch::default()
            },
            clear_index: Some(3),
        };
        round_trip(&ClaimResult::Claimed {
            heads: vec![head.clone()],
            dead_lettered: vec![],
            head: 9,
        });
        assert_eq!(
            serde_json::to_value(RedriveAction::Skip).unwrap(),
            json!("skip")
        );
        assert_eq!(
            "bounce".parse::<RedriveAction>().unwrap_err().code(),
            crate::ErrorCode::InvalidInput
        );
    }
}
