//! The [`Store`] trait: the whole session-store contract in one object-safe trait.

use std::collections::BTreeMap;
use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;
use serde_json::Value;

use crate::error::Result;
use crate::retention::{DeleteSessionRequest, DeleteSessionResult, PruneRequest, PruneResult};
use crate::rewrite::{RewritePayloadsRequest, RewritePayloadsResult};
use crate::types::{
    AppendOptions, AppendResult, BulkRedrive, BulkRedriveResult, ClaimRequest, ClaimResult,
    ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, Cursor, FailRequest, FailResult, ForkRequest, ForkResult, Head,
    ListSessions, ListWork, NewEvent, Pause, PauseRequest, PresenceMeta, PresenceResult,
    PresenceRow, ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult,
    RenewRequest, RenewResult, RescheduleRequest, RescheduleResult, ResumeRequest, ResumeResult,
    SessionInfo, SessionWork, StateRead, StateWrite, StoredEvent, WakeLogResult,
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
///
/// # The methods as written
///
/// The trait is declared with `#[async_trait]`, which keeps it object safe
/// (`Arc<dyn Store>`); rustdoc shows that expansion (`'life0`,
/// `Pin<Box<dyn Future…>>`) below. Each method is written, implemented
/// (with `#[async_trait]` on the `impl`) and called as the plain `async fn`
/// it is:
///
/// ```
/// # #![allow(async_fn_in_trait, dead_code)]
/// # use std::collections::BTreeMap;
/// # use a2_store_api::*;
/// # use serde_json::Value;
/// # trait Store {
/// async fn append(&self, session_id: &str, events: Vec<NewEvent>, options: AppendOptions) -> Result<AppendResult>;
/// async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult>;
/// async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult>;
/// async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteResult>;
/// async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult>;
/// async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>>;
/// async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult>;
/// async fn clear(&self, request: ClearRequest) -> Result<ClearResult>;
/// async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult>;
/// async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>>;
/// async fn wake_log(&self, session_id: &str, consumer: &ConsumerDeclaration) -> Result<WakeLogResult>;
/// async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>>;
/// async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream>;
/// async fn write_state(&self, session_id: &str, reducer: &str, writes: Vec<StateWrite>) -> Result<()>;
/// async fn read_state(&self, session_id: &str, reducer: &str, options: ReadStateOptions) -> Result<StateRead>;
/// async fn set_presence(&self, session_id: &str, participant: &str, values: BTreeMap<String, Value>, meta: PresenceMeta) -> Result<PresenceResult>;
/// async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>>;
/// async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>>;
/// async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult>;
/// async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>>;
/// async fn reschedule(&self, request: RescheduleRequest) -> Result<RescheduleResult>;
/// async fn pause(&self, request: PauseRequest) -> Result<Pause>;
/// async fn resume(&self, request: ResumeRequest) -> Result<ResumeResult>;
/// async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>>;
/// async fn redrive_all(&self, request: BulkRedrive) -> Result<BulkRedriveResult>;
/// async fn fork(&self, request: ForkRequest) -> Result<ForkResult>;
/// async fn delete_session(&self, request: DeleteSessionRequest) -> Result<DeleteSessionResult>;
/// async fn prune(&self, request: PruneRequest) -> Result<PruneResult>;
/// async fn rewrite_payloads(&self, request: RewritePayloadsRequest) -> Result<RewritePayloadsResult>;
/// # }
/// ```
#[async_trait]
pub trait Store: Send + Sync {
    /// Appends a batch atomically (or replays it idempotently when every id
    /// is already stored), creating cursors for its targets and declared log
    /// consumers, and notifying subscribers.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let event = NewEvent::new("msg", json!({"text": "hi"}))
    ///     .with_id("m1")
    ///     .with_target(Target::lane("agent", "main"));
    /// let first = store.append("chat-1", vec![event.clone()], AppendOptions::default()).await?;
    /// assert_eq!(first.events[0].index, 1);
    /// assert!(first.has_pending); // the agent has work
    /// // Every id already stored: a replay, nothing is written.
    /// let again = store.append("chat-1", vec![event], AppendOptions::default()).await?;
    /// assert_eq!(again.events, first.events);
    /// # Ok(())
    /// # }
    /// ```
    async fn append(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult>;

    /// Claims every claimable head of the served cursors (up to `limit`),
    /// counting expired claims as failures first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// let request = ClaimRequest::new("chat-1", "worker-1", Duration::from_secs(30))
    ///     .with_consumers(vec![ConsumerDeclaration::targeted("agent")]);
    /// let ClaimResult::Claimed { heads, .. } = store.claim_available(request.clone()).await? else {
    ///     panic!("nothing claimed");
    /// };
    /// assert_eq!((heads[0].event.index, heads[0].dispatch.attempt_count), (1, 1));
    /// // Claimed heads are busy until their lease ends.
    /// assert!(matches!(store.claim_available(request).await?, ClaimResult::Busy { .. }));
    /// # Ok(())
    /// # }
    /// ```
    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult>;

    /// Extends leases still held by `holder`; reports claims that can never complete.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// let renewed = store.renew_claims(RenewRequest::for_head(&head, Duration::from_secs(60))).await?;
    /// assert_eq!(renewed.renewed, vec![head.cursor_ref()]);
    /// assert!(renewed.superseded.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult>;

    /// Completes a claimed head: appends the returned events with the attempt
    /// as cause, records the completion and advances the cursor, atomically.
    /// Repeating a completion replays it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// let reply = NewEvent::new("reply", json!("hello")).with_id("reply-1");
    /// let done = store.complete_attempt(CompleteRequest::for_head(&head, vec![reply.clone()])).await?;
    /// let CompleteResult::Completed { events } = &done else { panic!("superseded") };
    /// assert_eq!(events[0].cause, Some(head.cause())); // appended as the attempt's output
    /// // Asking again (say, after a timeout) replays the same answer.
    /// assert_eq!(store.complete_attempt(CompleteRequest::for_head(&head, vec![reply])).await?, done);
    /// # Ok(())
    /// # }
    /// ```
    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteResult>;

    /// Records a failed attempt (with optional retry delay), dead-lettering at
    /// `max_failures`. Repeating the same failure is idempotent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// let request = FailRequest::for_head(&head, "model timed out", 3)
    ///     .with_retry_after(Duration::from_secs(5));
    /// let failed = store.fail_attempt(request).await?;
    /// assert_eq!((failed.outcome, failed.failure_count), (FailOutcome::Failed, 1));
    /// // The retry delay keeps the head busy.
    /// assert!(matches!(
    ///     store.claim_available(ClaimRequest::new("chat-1", "worker-2", lease)).await?,
    ///     ClaimResult::Busy { .. }
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult>;

    /// Dead-lettered heads above the clear, by `(index, consumer, lane)`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// store.fail_attempt(FailRequest::for_head(&head, "bad input", 1)).await?;
    /// let dead = store.dead_letters("chat-1").await?;
    /// assert_eq!(dead.len(), 1);
    /// assert_eq!(dead[0].dispatch.last_error.as_deref(), Some("bad input"));
    /// # Ok(())
    /// # }
    /// ```
    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>>;

    /// Retries or skips a consumer's dead-lettered head.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// store.append("chat-1", vec![msg(2)], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// store.fail_attempt(FailRequest::for_head(&head, "bad input", 1)).await?;
    /// // Skip the poisoned message: the lane moves on to index 2.
    /// let dead = store.dead_letters("chat-1").await?.remove(0);
    /// let redriven = store.redrive(RedriveRequest::for_head(&dead, RedriveAction::Skip)).await?;
    /// assert!(redriven.redriven && redriven.has_pending);
    /// let next = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?;
    /// assert_eq!(next.heads()[0].event.index, 2);
    /// # Ok(())
    /// # }
    /// ```
    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult>;

    /// Appends the `a2.cleared` marker: drops event and lane cursors, parks log
    /// cursors at the marker and releases every pin.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// store.append("chat-1", vec![msg(2)], AppendOptions::default()).await?;
    /// // Only if nothing was appended since index 1 was seen: refused.
    /// let refused = store.clear(ClearRequest::new("chat-1").with_if_last_index(1)).await?;
    /// assert_eq!(refused, ClearResult::NotCleared { head: 2 });
    /// let ClearResult::Cleared { marker } = store.clear(ClearRequest::new("chat-1")).await? else {
    ///     panic!("not cleared");
    /// };
    /// assert_eq!((marker.index, marker.event_type.as_str()), (3, a2_store::CLEAR_EVENT_TYPE));
    /// assert!(store.cursors("chat-1").await?.is_empty()); // the pending work is dropped
    /// # Ok(())
    /// # }
    /// ```
    async fn clear(&self, request: ClearRequest) -> Result<ClearResult>;

    /// Deletes up to [`RECLAIM_BATCH`](crate::RECLAIM_BATCH) rows below the clear marker.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// store.append("chat-1", vec![msg(2)], AppendOptions::default()).await?;
    /// store.clear(ClearRequest::new("chat-1")).await?;
    /// let reclaimed = store.reclaim("chat-1").await?;
    /// assert_eq!((reclaimed.reclaimed, reclaimed.done), (2, true));
    /// assert_eq!(store.read("chat-1", ReadOptions::default()).await?.len(), 1); // the marker
    /// # Ok(())
    /// # }
    /// ```
    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult>;

    /// Stored rows with `after < index <= through`, in order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// store.append("chat-1", vec![msg(2), msg(3)], AppendOptions::default()).await?;
    /// let page = store.read("chat-1", ReadOptions::new().with_after(1).with_limit(1)).await?;
    /// assert_eq!(page.len(), 1);
    /// assert_eq!((page[0].index, page[0].payload.as_value()), (2, &json!(2)));
    /// # Ok(())
    /// # }
    /// ```
    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>>;

    /// Makes sure a declared log consumer's cursor exists and points at its
    /// next taken event.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// // Events appended before anyone declared the audit log consumer.
    /// let note = |n: u64| NewEvent::new("note", json!(n));
    /// store.append("chat-1", vec![note(1), note(2)], AppendOptions::default()).await?;
    /// // Backfill from the start: its cursor is created with head 1.
    /// let audit = ConsumerDeclaration::log("audit", "audit-log", None, true);
    /// let woken = store.wake_log("chat-1", &audit).await?;
    /// assert_eq!((woken.cursor.head, woken.head), (Some(1), 2));
    /// let claim = ClaimRequest::new("chat-1", "auditor", Duration::from_secs(30))
    ///     .with_consumers(vec![audit]);
    /// assert_eq!(store.claim_available(claim).await?.heads()[0].consumer, "audit");
    /// # Ok(())
    /// # }
    /// ```
    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult>;

    /// Every unfinished cursor, by consumer then lane (laneless last by head).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// let cursors = store.cursors("chat-1").await?;
    /// assert_eq!(cursors.len(), 1);
    /// assert_eq!((cursors[0].kind, cursors[0].lane.as_deref()), (a2_store::CursorKind::Lane, Some("main")));
    /// assert_eq!((cursors[0].position, cursors[0].head), (0, Some(1)));
    /// # Ok(())
    /// # }
    /// ```
    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>>;

    /// The stored events after `after`, then live appends.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// let mut events = store.subscribe("chat-1", 0).await?;
    /// assert_eq!(events.next().await.transpose()?.map(|e| e.index), Some(1)); // the backlog
    /// store.append("chat-1", vec![msg(2)], AppendOptions::default()).await?;
    /// assert_eq!(events.next().await.transpose()?.map(|e| e.index), Some(2)); // then live
    /// # Ok(())
    /// # }
    /// ```
    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream>;

    /// Caches reducer snapshots; each write is a checkpoint kept while a pin holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// store.append("chat-1", vec![msg(2)], AppendOptions::default()).await?;
    /// let write = a2_store::StateWrite::new(2, json!({"messages": 2}));
    /// store.write_state("chat-1", "counter", vec![write]).await?;
    /// let read = store.read_state("chat-1", "counter", Default::default()).await?;
    /// assert_eq!(read.snapshot.map(|s| (s.index, s.state)), Some((2, json!({"messages": 2}))));
    /// # Ok(())
    /// # }
    /// ```
    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<()>;

    /// The best cached snapshot at or below `at` and above the clear.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = |n: u64| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg(1)], AppendOptions::default()).await?;
    /// store.append("chat-1", vec![msg(2)], AppendOptions::default()).await?;
    /// store.write_state("chat-1", "counter", vec![a2_store::StateWrite::new(2, json!(2))]).await?;
    /// // Nothing cached at or below index 1 (the head snapshot is at 2).
    /// let early = store.read_state("chat-1", "counter", a2_store::ReadStateOptions::at(1)).await?;
    /// assert_eq!((early.snapshot, early.clear_index), (None, 0));
    /// let now = store.read_state("chat-1", "counter", Default::default()).await?;
    /// assert_eq!(now.snapshot.map(|s| s.index), Some(2));
    /// # Ok(())
    /// # }
    /// ```
    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead>;

    /// Writes presence fields, last writer wins per field by `meta.at`; a
    /// `null` value is a tombstone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// use a2_store::PresenceMeta;
    /// let fields = [("typing".to_owned(), json!(true))].into_iter().collect();
    /// let meta = PresenceMeta::new(1_000, Duration::from_secs(10)).with_seen(4);
    /// let written = store.set_presence("chat-1", "alice", fields, meta).await?;
    /// assert_eq!(written.applied_count, 1);
    /// // An older write of the same field loses.
    /// let stale = [("typing".to_owned(), json!(false))].into_iter().collect();
    /// let older = PresenceMeta::new(999, Duration::from_secs(10));
    /// assert_eq!(store.set_presence("chat-1", "alice", stale, older).await?.applied_count, 0);
    /// # Ok(())
    /// # }
    /// ```
    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult>;

    /// Live (unexpired, non-tombstone) presence fields by participant, then field.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let fields = [("typing".to_owned(), json!(true))].into_iter().collect();
    /// let meta = a2_store::PresenceMeta::new(1_000, Duration::from_secs(10));
    /// store.set_presence("chat-1", "alice", fields, meta).await?;
    /// let rows = store.read_presence("chat-1").await?;
    /// assert_eq!((rows[0].participant.as_str(), rows[0].field.as_str()), ("alice", "typing"));
    /// assert_eq!(rows[0].value, json!(true));
    /// # Ok(())
    /// # }
    /// ```
    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>>;

    /// Sessions with at least one appended event, by id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// for session in ["chat-2", "chat-1", "chat-3"] {
    ///     store.append(session, vec![NewEvent::new("msg", json!(1))], AppendOptions::default()).await?;
    /// }
    /// let page = store.sessions(a2_store::ListSessions::new().with_after("chat-1").with_limit(10)).await?;
    /// let ids: Vec<_> = page.iter().map(|s| s.session_id.as_str()).collect();
    /// assert_eq!(ids, ["chat-2", "chat-3"]);
    /// # Ok(())
    /// # }
    /// ```
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
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// for session in ["chat-1", "chat-2"] {
    ///     let event = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    ///     store.append(session, vec![event], AppendOptions::default()).await?;
    /// }
    /// let request = ClaimWorkRequest::for_consumers(
    ///     "worker-1",
    ///     vec![ConsumerDeclaration::targeted("agent")],
    ///     Duration::from_secs(30),
    /// )
    /// .with_limit(8)
    /// .with_wait(Duration::from_millis(100));
    /// let heads = store.claim_work(request.clone()).await?.into_heads();
    /// assert_eq!(heads.len(), 2); // one from each session
    /// for head in &heads {
    ///     store.complete_attempt(CompleteRequest::for_head(head, vec![])).await?;
    /// }
    /// // Nothing left: the wait ends and the answer is `Settled`.
    /// assert_eq!(store.claim_work(request).await?, ClaimWorkResult::Settled);
    /// # Ok(())
    /// # }
    /// ```
    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult>;

    /// Whether one [`claim_work`](Self::claim_work) of many heads costs
    /// about what a claim of one does, because the backend claims them in
    /// one step (PostgreSQL: one transaction for the whole batch). A worker
    /// then asks for all its free slots in one claim rather than keeping
    /// several claims in flight. A hint about cost only, never about what a
    /// claim answers; `false` by default.
    fn claims_in_one_step(&self) -> bool {
        false
    }

    /// A page, by session id, of the sessions with claimable, busy or
    /// dead-lettered heads of the given consumers, with their counts. Costs
    /// what it returns, not the number of sessions.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let event = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![event], AppendOptions::default()).await?;
    /// let page = store.list_work(a2_store::ListWork::new(["agent"])).await?;
    /// assert_eq!(page.len(), 1);
    /// assert_eq!((page[0].session_id.as_str(), page[0].claimable, page[0].busy), ("chat-1", 1, 0));
    /// # Ok(())
    /// # }
    /// ```
    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>>;

    /// Moves or cancels a head that has never been claimed: a cursor's head
    /// or an index queued on a lane (see [`crate::schedule`]). A moved head
    /// is busy until its new time; a cancelled one is passed over as if
    /// processed. Fenced by `cause` when given. A head that has run answers
    /// `Started`, one the cursor has passed `Gone`; nothing changes then.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// // A reminder in ten minutes: the head is busy until then.
    /// let reminder = NewEvent::new("remind", json!("follow up"))
    ///     .with_target(Target::event("agent").delayed(Duration::from_secs(600)));
    /// store.append("chat-1", vec![reminder], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let claim = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?;
    /// assert!(matches!(claim, ClaimResult::Busy { .. }));
    /// // Bring it forward: a time already reached makes it claimable at once.
    /// let now = RescheduleRequest::new("chat-1", "agent", None, 1, ScheduleChange::To(NotBefore::AtMs(0)));
    /// assert_eq!(store.reschedule(now).await?, RescheduleResult::Rescheduled { not_before: None });
    /// let claim = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?;
    /// assert_eq!(claim.heads().len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    async fn reschedule(&self, request: RescheduleRequest) -> Result<RescheduleResult>;

    /// Pauses a consumer in one session or in every session, until resumed
    /// or until a time: its heads there are not claimed and not pending;
    /// leases already held run to their end (see [`crate::pause`]).
    /// Pausing the same scope again replaces the pause. Returns the pause
    /// stored.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg], AppendOptions::default()).await?;
    /// // A person takes over chat-1: the agent stops there.
    /// store.pause(PauseRequest::in_session("agent", "chat-1")).await?;
    /// let lease = Duration::from_secs(30);
    /// let claim = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?;
    /// assert_eq!(claim, ClaimResult::Settled);
    /// store.resume(ResumeRequest::in_session("agent", "chat-1")).await?;
    /// let claim = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?;
    /// assert_eq!(claim.heads().len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    async fn pause(&self, request: PauseRequest) -> Result<Pause>;

    /// Lifts the pause of a consumer in one session, or its store-wide
    /// pause (each scope is lifted on its own), and wakes waiting claimers.
    /// `resumed` says whether a pause in force was lifted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// store.pause(PauseRequest::everywhere("billing")).await?;
    /// assert!(store.resume(ResumeRequest::everywhere("billing")).await?.resumed);
    /// assert!(!store.resume(ResumeRequest::everywhere("billing")).await?.resumed);
    /// # Ok(())
    /// # }
    /// ```
    async fn resume(&self, request: ResumeRequest) -> Result<ResumeResult>;

    /// The pauses in force: with a session, the store-wide ones and that
    /// session's; without, every one. By consumer, store-wide first, then
    /// by session id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// store.pause(PauseRequest::everywhere("billing").with_until_ms(i64::MAX)).await?;
    /// let pauses = store.pauses(None).await?;
    /// assert_eq!((pauses[0].consumer.as_str(), pauses[0].until_ms), ("billing", Some(i64::MAX)));
    /// # Ok(())
    /// # }
    /// ```
    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>>;

    /// Redrives every dead-lettered head matching the request's filters, up
    /// to its limit, by `(session_id, index, consumer, lane)`, each exactly
    /// as a lane-exact [`redrive`](Store::redrive) would, in one atomic step
    /// (see [`crate::redrive`]). Returns what it changed and whether more
    /// match.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// for session in ["chat-1", "chat-2"] {
    ///     let msg = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    ///     store.append(session, vec![msg], AppendOptions::default()).await?;
    ///     let head = store.claim_available(ClaimRequest::new(session, "worker-1", lease)).await?.into_heads().remove(0);
    ///     store.fail_attempt(FailRequest::for_head(&head, "downstream was down", 1)).await?;
    /// }
    /// let mut bulk = BulkRedrive::new(RedriveAction::Retry);
    /// bulk.consumer = Some("agent".into());
    /// let done = store.redrive_all(bulk).await?;
    /// assert_eq!((done.redriven.len(), done.more), (2, false));
    /// assert!(store.dead_letters("chat-1").await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    async fn redrive_all(&self, request: BulkRedrive) -> Result<BulkRedriveResult>;

    /// Copies a session's log after its clear, through an index (the head
    /// by default), into a session never written to, atomically: ids,
    /// types, payloads, times and causes kept; no cursors, snapshots or
    /// presence (see [`crate::fork`]). The fork records where it came from.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let turns = (1..=3).map(|n| NewEvent::new("turn", json!(n))).collect();
    /// store.append("chat-1", turns, AppendOptions::default()).await?;
    /// // Rewind to turn 2 and branch.
    /// let fork = store.fork(ForkRequest::new("chat-1", "chat-1b").through(2)).await?;
    /// assert_eq!((fork.session.head, fork.copied), (2, 2));
    /// assert_eq!(fork.session.forked_from.unwrap().session_id, "chat-1");
    /// assert_eq!(store.read("chat-1b", ReadOptions::default()).await?.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    async fn fork(&self, request: ForkRequest) -> Result<ForkResult>;

    /// Deletes every row of one session in one atomic step: events,
    /// cursors and their completion records, lane queues, work rows,
    /// snapshots and pins, presence, pauses of the session; its open
    /// `subscribe` streams end with [`ErrorCode::SessionDeleted`](crate::ErrorCode::SessionDeleted).
    /// Refused with [`ErrorCode::SessionInUse`](crate::ErrorCode::SessionInUse)
    /// while a head still has work, unless `force`. Forks of the session
    /// keep their copy. The id can be used again at once, by a new
    /// incarnation no request of the old one reaches (see [`crate::retention`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let msg = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![msg], AppendOptions::default()).await?;
    /// // The message is still waiting for the agent: refused without force.
    /// let refused = store.delete_session(DeleteSessionRequest::new("chat-1")).await;
    /// assert_eq!(refused.unwrap_err().code(), ErrorCode::SessionInUse);
    /// let done = store.delete_session(DeleteSessionRequest::new("chat-1").forced()).await?;
    /// assert!(matches!(done, DeleteSessionResult::Deleted { removed } if removed.events == 1));
    /// assert!(store.sessions(ListSessions::default()).await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    async fn delete_session(&self, request: DeleteSessionRequest) -> Result<DeleteSessionResult>;

    /// Deletes, a page at a time, the sessions nothing was appended to for
    /// `idle_for_ms` that have nothing left to do (no head leased,
    /// claimable, waiting or scheduled; no dead letter unless asked), each
    /// as [`Store::delete_session`] would. Also removes expired presence
    /// fields and unpinned snapshot checkpoints. Examines at most `limit`
    /// idle sessions, oldest activity first, at a cost in proportion to
    /// that page, not to the number of sessions; `next` continues.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let clock = ManualClock::new(1_000);
    /// let store = a2_store::open("memory:", OpenOptions::default().with_clock(clock.clone())).await?;
    /// store.append("chat-1", vec![NewEvent::new("msg", json!("hi"))], AppendOptions::default()).await?;
    /// clock.advance(3_600_000); // an hour later
    /// let preview = store.prune(PruneRequest::idle_for(Duration::from_secs(60)).dry_run()).await?;
    /// assert_eq!(preview.sessions, ["chat-1"]);
    /// let pruned = store.prune(PruneRequest::idle_for(Duration::from_secs(60))).await?;
    /// assert_eq!((pruned.sessions.len(), pruned.more()), (1, false));
    /// # Ok(())
    /// # }
    /// ```
    async fn prune(&self, request: PruneRequest) -> Result<PruneResult>;

    /// Rewrites stored payloads of one session in place, all or nothing:
    /// event payloads by index, reducer snapshot states by reducer and
    /// index, presence values by participant and field, each only if what
    /// is stored is still the `expected` payload (else the call is refused
    /// with [`ErrorCode::PayloadMismatch`](crate::ErrorCode::PayloadMismatch)
    /// naming the first item that changed, and nothing changes). Made for
    /// re-encrypting old rows under a new key, a page of at most
    /// [`MAX_REWRITE_ITEMS`](crate::MAX_REWRITE_ITEMS) items at a time.
    /// Only the payload bytes change: ids, types, indexes, causes, times,
    /// cursors, leases and completion records stay. Open subscriptions are
    /// sent nothing; later reads, claims, streams and replays see the new
    /// payloads (see [`crate::rewrite`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// use a2_store_api::RewritePayloadsRequest;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// store.append("chat-1", vec![NewEvent::new("msg", json!({"v": 1}))], AppendOptions::default()).await?;
    /// let rewrite = RewritePayloadsRequest::new("chat-1").event(1, json!({"v": 1}), json!({"v": 2}));
    /// assert_eq!(store.rewrite_payloads(rewrite.clone()).await?.events, 1);
    /// assert_eq!(store.read("chat-1", ReadOptions::default()).await?[0].payload, json!({"v": 2}));
    /// // The stored payload is no longer the expected one: refused, nothing changes.
    /// let stale = store.rewrite_payloads(rewrite).await.unwrap_err();
    /// assert_eq!(stale.code(), ErrorCode::PayloadMismatch);
    /// # Ok(())
    /// # }
    /// ```
    async fn rewrite_payloads(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult>;
}

#[cfg(test)]
mod tests {
    /// `text` with runs of whitespace as one space, and no space just inside
    /// parentheses (how rustfmt's multi-line signatures read on one line).
    fn one_line(text: &str) -> String {
        text.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace("( ", "(")
            .replace(", )", ")")
    }

    #[test]
    fn the_overview_lists_every_method_as_declared() {
        let source = include_str!("store.rs");
        let (docs, body) = source
            .split_once("pub trait Store: Send + Sync {")
            .expect("the trait is declared in this file");
        let listed: Vec<String> = docs
            .lines()
            .filter_map(|line| line.strip_prefix("/// async fn "))
            .map(|line| format!("async fn {}", one_line(line)))
            .collect();
        let declared: Vec<String> = body
            .split("\n    async fn ")
            .skip(1)
            .map(|rest| {
                let signature = rest.split(';').next().unwrap_or(rest);
                format!("async fn {};", one_line(signature))
            })
            .collect();
        assert!(declared.len() >= 29, "found {declared:?}");
        assert_eq!(listed, declared);
    }
}
