//! The [`Store`] trait: the whole session-store contract in one object-safe trait.

use std::collections::BTreeMap;
use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;
use serde_json::Value;

use crate::error::Result;
use crate::types::{
    AppendOptions, AppendResult, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult,
    ClearRequest, ClearResult, CompleteRequest, CompleteResult, ConsumerDeclaration, Cursor,
    FailRequest, FailResult, Head, ListSessions, ListWork, NewEvent, PresenceMeta, PresenceResult,
    PresenceRow, ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult,
    RenewRequest, RenewResult, SessionInfo, SessionWork, StateRead, StateWrite, StoredEvent,
    WakeLogResult,
};

/// A live stream of a session's stored events: the backlog, then live appends,
/// in index order with no gap and no duplicate. Ends when the store is dropped;
/// yields an error (then ends) if the backend can no longer follow the log.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StoredEvent>> + Send + 'static>>;

/// A durable store of agent sessions: append-only logs dispatched through
/// cursors under leases. See the [guide](crate::guide) for the contract;
/// the `a2-conformance` suite proves a backend implements it.
///
/// Every method is one atomic step: an `Err` means nothing changed. Object
/// safe, so `Arc<dyn Store>` works across tasks and threads.
#[async_trait]
pub trait Store: Send + Sync {
    /// Appends a batch atomically (or replays it idempotently when every id
    /// is already stored), creating cursors for its targets and declared log
    /// consumers, and notifying subscribers.
    async fn append(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult>;

    /// Claims every claimable head of the served cursors (up to `limit`),
    /// counting expired claims as failures first.
    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult>;

    /// Extends leases still held by `holder`; reports claims that can never complete.
    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult>;

    /// Completes a claimed head: appends the returned events with the attempt
    /// as cause, records the completion and advances the cursor, atomically.
    /// Repeating a completion replays it.
    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteResult>;

    /// Records a failed attempt (with optional retry delay), dead-lettering at
    /// `max_failures`. Repeating the same failure is idempotent.
    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult>;

    /// Dead-lettered heads above the clear, by `(index, consumer, lane)`.
    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>>;

    /// Retries or skips a consumer's dead-lettered head.
    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult>;

    /// Appends the `a2.cleared` marker: drops event and lane cursors, parks log
    /// cursors at the marker and releases every pin.
    async fn clear(&self, request: ClearRequest) -> Result<ClearResult>;

    /// Deletes up to [`RECLAIM_BATCH`](crate::RECLAIM_BATCH) rows below the clear marker.
    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult>;

    /// Stored rows with `after < index <= through`, in order.
    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>>;

    /// Makes sure a declared log consumer's cursor exists and points at its
    /// next taken event.
    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult>;

    /// Every unfinished cursor, by consumer then lane (laneless last by head).
    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>>;

    /// The stored events after `after`, then live appends.
    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream>;

    /// Caches reducer snapshots; each write is a checkpoint kept while a pin holds.
    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<()>;

    /// The best cached snapshot at or below `at` and above the clear.
    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead>;

    /// Writes presence fields, last writer wins per field by `meta.at`; a
    /// `null` value is a tombstone.
    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult>;

    /// Live (unexpired, non-tombstone) presence fields by participant, then field.
    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>>;

    /// Sessions with at least one appended event, by id.
    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>>;

    /// Claims heads of the served consumers across every session (or the
    /// listed ones), serving sessions in fairness order (the one whose work
    /// has waited longest first, up to `per_session_limit` heads each; see
    /// [`work`](crate::work)), each under the same rules as
    /// [`claim_available`](Self::claim_available). Finding work costs
    /// O(log n) in the number of sessions; idle sessions cost nothing.
    ///
    /// With `wait_ms`, waits until something is claimable (woken by the
    /// store on appends, completions, failures, redrives, `wake_log` and
    /// expiring leases or retry delays, in any session, new ones included)
    /// or the wait ends, then answers `Busy` or `Settled` as without a
    /// wait. Dropping the future ends the wait.
    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult>;

    /// A page, by session id, of the sessions with claimable, busy or
    /// dead-lettered heads of the given consumers, with their counts. Costs
    /// what it returns, not the number of sessions.
    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>>;
}
