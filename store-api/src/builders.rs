//! Constructors and builder methods for the request types.
//!
//! Every request can still be written as a struct literal; these give the
//! required fields as arguments (so a request that is missing one does not
//! compile), times as [`Duration`]s, and `with_*` methods for the optional
//! fields. `for_head` constructors copy the session, consumer, lane, index
//! and attempt from the [`Head`] a claim returned.

use std::time::Duration;

use serde_json::Value;

use crate::types::{
    AppendOptions, Cause, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult,
    ClearRequest, CompleteRequest, ConsumerDeclaration, CursorRef, FailRequest, Head, HeldClaim,
    ListSessions, ListWork, NewEvent, PauseRequest, PresenceMeta, ReadOptions, ReadStateOptions,
    RedriveAction, RedriveRequest, RenewRequest, RescheduleRequest, ResumeRequest, ScheduleChange,
    StateWrite,
};

/// `duration` in whole milliseconds as the `i64` the requests carry: rounded
/// up (a positive duration is never 0 ms) and saturating at `i64::MAX`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(a2_store_api::duration_ms(Duration::from_secs(30)), 30_000);
/// assert_eq!(a2_store_api::duration_ms(Duration::from_micros(1)), 1);
/// assert_eq!(a2_store_api::duration_ms(Duration::MAX), i64::MAX);
/// ```
pub fn duration_ms(duration: Duration) -> i64 {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    i64::try_from(millis).unwrap_or(i64::MAX)
}

impl AppendOptions {
    /// No declarations and no origin: what `AppendOptions::default()` gives.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares the consumers served: `has_pending` counts only their heads,
    /// and a log declaration creates (or wakes) its log cursor.
    ///
    /// ```
    /// use a2_store_api::{AppendOptions, ConsumerDeclaration};
    /// let options = AppendOptions::new()
    ///     .with_consumers(vec![ConsumerDeclaration::log("audit", "audit-log", None, true)]);
    /// assert_eq!(options.consumers.unwrap()[0].name, "audit");
    /// ```
    pub fn with_consumers(mut self, consumers: Vec<ConsumerDeclaration>) -> Self {
        self.consumers = Some(consumers);
        self
    }

    /// Names the event this append was scheduled from: the append is
    /// `SessionCleared` when that index is at or below the clear.
    pub fn with_origin_index(mut self, origin_index: u64) -> Self {
        self.origin_index = Some(origin_index);
        self
    }
}

impl ClaimRequest {
    /// A claim in `session_id` by `holder` under a `ttl` lease, serving every
    /// cursor, with no limit, exclusions or `max_failures`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use a2_store_api::{ClaimRequest, ConsumerDeclaration};
    /// let request = ClaimRequest::new("chat-1", "worker-1", Duration::from_secs(30))
    ///     .with_consumers(vec![ConsumerDeclaration::targeted("agent")])
    ///     .with_max_failures(3)
    ///     .with_limit(10);
    /// assert_eq!(request.ttl_ms, Some(30_000));
    /// assert_eq!(request.expires_at_ms, None);
    /// ```
    pub fn new(session_id: impl Into<String>, holder: impl Into<String>, ttl: Duration) -> Self {
        Self {
            session_id: session_id.into(),
            holder: holder.into(),
            ttl_ms: Some(duration_ms(ttl)),
            ..Self::default()
        }
    }

    /// The same claim with its lease ending at `expires_at_ms` (ms since the
    /// epoch) instead of after a ttl.
    pub fn with_expires_at_ms(mut self, expires_at_ms: i64) -> Self {
        self.ttl_ms = None;
        self.expires_at_ms = Some(expires_at_ms);
        self
    }

    /// Serves only these consumers (log declarations also refresh types).
    pub fn with_consumers(mut self, consumers: Vec<ConsumerDeclaration>) -> Self {
        self.consumers = Some(consumers);
        self
    }

    /// Skips this head: an event cursor's by index, a lane or log cursor's
    /// whatever its head.
    pub fn with_exclude(mut self, cursor: CursorRef) -> Self {
        self.exclude.push(cursor);
        self
    }

    /// Dead-letters a head whose expired claim brings it to `max_failures`.
    pub fn with_max_failures(mut self, max_failures: u32) -> Self {
        self.max_failures = Some(max_failures);
        self
    }

    /// Skips heads above `through`.
    pub fn with_through(mut self, through: u64) -> Self {
        self.through = Some(through);
        self
    }

    /// Claims at most `limit` heads (at least 1).
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

impl ClaimResult {
    /// The claimed heads (empty unless `Claimed`).
    pub fn heads(&self) -> &[Head] {
        match self {
            Self::Claimed { heads, .. } => heads,
            _ => &[],
        }
    }

    /// The claimed heads, owned (empty unless `Claimed`).
    pub fn into_heads(self) -> Vec<Head> {
        match self {
            Self::Claimed { heads, .. } => heads,
            _ => Vec::new(),
        }
    }
}

impl ClaimWorkRequest {
    /// A request by `holder` serving `consumers` under a `ttl` lease,
    /// claiming one head without waiting: [`ClaimWorkRequest::new`] with a
    /// [`Duration`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use a2_store_api::{ClaimWorkRequest, ConsumerDeclaration};
    /// let request = ClaimWorkRequest::for_consumers(
    ///     "worker-1",
    ///     vec![ConsumerDeclaration::targeted("agent")],
    ///     Duration::from_secs(30),
    /// )
    /// .with_limit(8)
    /// .with_wait(Duration::from_secs(5));
    /// assert_eq!((request.ttl_ms, request.wait_ms), (Some(30_000), Some(5_000)));
    /// ```
    pub fn for_consumers(
        holder: impl Into<String>,
        consumers: Vec<ConsumerDeclaration>,
        ttl: Duration,
    ) -> Self {
        Self::new(holder, consumers, duration_ms(ttl))
    }

    /// The same request waiting up to `wait` for work (at most
    /// [`MAX_WAIT_MS`](crate::MAX_WAIT_MS)).
    pub fn with_wait(self, wait: Duration) -> Self {
        self.with_wait_ms(duration_ms(wait))
    }

    /// The same request serving only these sessions.
    pub fn with_sessions(mut self, sessions: Vec<String>) -> Self {
        self.sessions = Some(sessions);
        self
    }

    /// The same request dead-lettering an expired claim at `max_failures`.
    pub fn with_max_failures(mut self, max_failures: u32) -> Self {
        self.max_failures = Some(max_failures);
        self
    }

    /// The same request serving at most `session_limit` sessions.
    pub fn with_session_limit(mut self, session_limit: usize) -> Self {
        self.session_limit = Some(session_limit);
        self
    }

    /// The same request claiming at most `per_session_limit` heads of one session.
    pub fn with_per_session_limit(mut self, per_session_limit: usize) -> Self {
        self.per_session_limit = Some(per_session_limit);
        self
    }
}

impl ClaimWorkResult {
    /// Every claimed head, owned, session by session (each head's
    /// `event.session_id` names its session).
    pub fn into_heads(self) -> Vec<Head> {
        match self {
            Self::Claimed { sessions } => sessions.into_iter().flat_map(|s| s.heads).collect(),
            _ => Vec::new(),
        }
    }
}

impl HeldClaim {
    /// The claim of `attempt` on the head `cursor` names.
    ///
    /// ```
    /// use a2_store_api::{CursorRef, HeldClaim};
    /// let claim = HeldClaim::new(CursorRef::new("agent", Some("main"), 4), 2);
    /// assert_eq!((claim.cursor.index, claim.attempt), (4, 2));
    /// ```
    pub fn new(cursor: CursorRef, attempt: u32) -> Self {
        Self { cursor, attempt }
    }

    /// The claim a claimed `head` stands for: its ref and current attempt.
    pub fn for_head(head: &Head) -> Self {
        Self::new(head.cursor_ref(), head.dispatch.attempt_count)
    }
}

impl RenewRequest {
    /// The same request, fenced by the session's incarnation `incarnation`
    /// (`None`: not fenced by it; see [`crate::retention`]).
    pub fn with_incarnation(mut self, incarnation: Option<u64>) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Renews `claims` held by `holder` in `session_id` for another `ttl`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use a2_store_api::{CursorRef, HeldClaim, RenewRequest};
    /// let claims = vec![HeldClaim::new(CursorRef::new("agent", Some("main"), 4), 2)];
    /// let request = RenewRequest::new("chat-1", "worker-1", claims, Duration::from_secs(30));
    /// assert_eq!((request.ttl_ms, request.expires_at_ms), (Some(30_000), None));
    /// ```
    pub fn new(
        session_id: impl Into<String>,
        holder: impl Into<String>,
        claims: Vec<HeldClaim>,
        ttl: Duration,
    ) -> Self {
        Self {
            incarnation: None,
            session_id: session_id.into(),
            holder: holder.into(),
            claims,
            ttl_ms: Some(duration_ms(ttl)),
            expires_at_ms: None,
        }
    }

    /// Renews the claim on `head` (its session, holder and attempt) for
    /// another `ttl`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let event = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![event], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// let renewed = store.renew_claims(RenewRequest::for_head(&head, lease)).await?;
    /// assert_eq!(renewed.renewed, vec![head.cursor_ref()]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_head(head: &Head, ttl: Duration) -> Self {
        Self::new(
            head.event.session_id.clone(),
            head.dispatch.claim_holder.clone().unwrap_or_default(),
            vec![HeldClaim::for_head(head)],
            ttl,
        )
        .with_incarnation(head.fence())
    }

    /// The same renewal ending at `expires_at_ms` (ms since the epoch)
    /// instead of after a ttl.
    pub fn with_expires_at_ms(mut self, expires_at_ms: i64) -> Self {
        self.ttl_ms = None;
        self.expires_at_ms = Some(expires_at_ms);
        self
    }

    /// Adds another held claim of the same session and holder.
    pub fn with_claim(mut self, claim: HeldClaim) -> Self {
        self.claims.push(claim);
        self
    }
}

impl CompleteRequest {
    /// The same request, fenced by the session's incarnation `incarnation`
    /// (`None`: not fenced by it; see [`crate::retention`]).
    pub fn with_incarnation(mut self, incarnation: Option<u64>) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Completes `attempt` on the head `cursor` names in `session_id`,
    /// returning no events.
    ///
    /// ```
    /// use a2_store_api::{CompleteRequest, CursorRef, NewEvent};
    /// let request = CompleteRequest::new("chat-1", CursorRef::new("agent", Some("main"), 4), 2)
    ///     .with_events(vec![NewEvent::new("reply", serde_json::json!("hello"))]);
    /// assert_eq!((request.index, request.attempt, request.events.len()), (4, 2, 1));
    /// ```
    pub fn new(session_id: impl Into<String>, cursor: CursorRef, attempt: u32) -> Self {
        Self {
            incarnation: None,
            session_id: session_id.into(),
            consumer: cursor.consumer,
            lane: cursor.lane,
            index: cursor.index,
            attempt,
            events: Vec::new(),
            consumers: None,
        }
    }

    /// Completes the current attempt on a claimed `head`, appending `events`
    /// (the handler's output) with that attempt as their cause.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let event = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![event], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// let reply = NewEvent::new("reply", json!("hello"));
    /// let done = store.complete_attempt(CompleteRequest::for_head(&head, vec![reply])).await?;
    /// assert!(matches!(done, CompleteResult::Completed { ref events } if events[0].index == 2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_head(head: &Head, events: Vec<NewEvent>) -> Self {
        Self::new(
            head.event.session_id.clone(),
            head.cursor_ref(),
            head.dispatch.attempt_count,
        )
        .with_events(events)
        .with_incarnation(head.fence())
    }

    /// The same completion appending `events`.
    pub fn with_events(mut self, events: Vec<NewEvent>) -> Self {
        self.events = events;
        self
    }

    /// Declares the consumers served (log cursors for the returned events).
    pub fn with_consumers(mut self, consumers: Vec<ConsumerDeclaration>) -> Self {
        self.consumers = Some(consumers);
        self
    }
}

impl FailRequest {
    /// The same request, fenced by the session's incarnation `incarnation`
    /// (`None`: not fenced by it; see [`crate::retention`]).
    pub fn with_incarnation(mut self, incarnation: Option<u64>) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Records that `attempt` on the head `cursor` names in `session_id`
    /// failed with `error`; never dead-letters, no retry delay.
    ///
    /// ```
    /// use std::time::Duration;
    /// use a2_store_api::{CursorRef, FailRequest};
    /// let request = FailRequest::new("chat-1", CursorRef::new("agent", None, 4), 1, "boom")
    ///     .with_max_failures(5)
    ///     .with_retry_after(Duration::from_secs(2));
    /// assert_eq!((request.max_failures, request.retry_after_ms), (Some(5), Some(2_000)));
    /// ```
    pub fn new(
        session_id: impl Into<String>,
        cursor: CursorRef,
        attempt: u32,
        error: impl Into<String>,
    ) -> Self {
        Self {
            incarnation: None,
            session_id: session_id.into(),
            consumer: cursor.consumer,
            lane: cursor.lane,
            index: cursor.index,
            attempt,
            error: error.into(),
            max_failures: None,
            retry_after_ms: None,
        }
    }

    /// Records that the current attempt on a claimed `head` failed with
    /// `error`, dead-lettering it when its failures reach `max_failures`
    /// (`None`: never).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let event = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![event], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// // max_failures 1: this failure dead-letters the head.
    /// let failed = store.fail_attempt(FailRequest::for_head(&head, "bad input", 1)).await?;
    /// assert_eq!(failed.outcome, FailOutcome::DeadLettered);
    /// // None: count the failure, never dead-letter.
    /// assert_eq!(FailRequest::for_head(&head, "later", None).max_failures, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_head(
        head: &Head,
        error: impl Into<String>,
        max_failures: impl Into<Option<u32>>,
    ) -> Self {
        let mut request = Self::new(
            head.event.session_id.clone(),
            head.cursor_ref(),
            head.dispatch.attempt_count,
            error,
        );
        request.max_failures = max_failures.into();
        request.with_incarnation(head.fence())
    }

    /// Dead-letters the head when its failures reach `max_failures`.
    pub fn with_max_failures(mut self, max_failures: u32) -> Self {
        self.max_failures = Some(max_failures);
        self
    }

    /// Keeps the head busy for `delay` before it can be claimed again.
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after_ms = Some(duration_ms(delay));
        self
    }
}

impl RedriveRequest {
    /// The same request, fenced by the session's incarnation `incarnation`
    /// (`None`: not fenced by it; see [`crate::retention`]).
    pub fn with_incarnation(mut self, incarnation: Option<u64>) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Retries or skips `consumer`'s dead-lettered head at `index` in `session_id`.
    ///
    /// ```
    /// use a2_store_api::{RedriveAction, RedriveRequest};
    /// let request = RedriveRequest::new("chat-1", "agent", 4, RedriveAction::Retry);
    /// assert_eq!((request.index, request.action), (4, RedriveAction::Retry));
    /// ```
    pub fn new(
        session_id: impl Into<String>,
        consumer: impl Into<String>,
        index: u64,
        action: RedriveAction,
    ) -> Self {
        Self {
            incarnation: None,
            session_id: session_id.into(),
            consumer: consumer.into(),
            index,
            action,
            lane: None,
            consumers: None,
        }
    }

    /// The same request naming the dead-lettered cursor's lane exactly.
    pub fn on_lane(mut self, lane: impl Into<String>) -> Self {
        self.lane = Some(lane.into());
        self
    }

    /// Retries or skips exactly the dead-lettered `head` (as
    /// [`Store::dead_letters`](crate::Store::dead_letters) lists it), naming its lane.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_store::Result<()> {
    /// use a2_store::prelude::*;
    /// let store = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let event = NewEvent::new("msg", json!("hi")).with_target(Target::lane("agent", "main"));
    /// store.append("chat-1", vec![event], AppendOptions::default()).await?;
    /// let lease = Duration::from_secs(30);
    /// let head = store.claim_available(ClaimRequest::new("chat-1", "worker-1", lease)).await?.into_heads().remove(0);
    /// store.fail_attempt(FailRequest::for_head(&head, "bad input", 1)).await?;
    /// let dead = store.dead_letters("chat-1").await?.remove(0);
    /// let result = store.redrive(RedriveRequest::for_head(&dead, RedriveAction::Retry)).await?;
    /// assert!(result.redriven);
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_head(head: &Head, action: RedriveAction) -> Self {
        Self {
            lane: head.lane.clone(),
            ..Self::new(
                head.event.session_id.clone(),
                head.consumer.clone(),
                head.event.index,
                action,
            )
        }
        .with_incarnation(head.fence())
    }

    /// Declares the consumers served (restricts `has_pending`).
    pub fn with_consumers(mut self, consumers: Vec<ConsumerDeclaration>) -> Self {
        self.consumers = Some(consumers);
        self
    }
}

impl ClearRequest {
    /// The same request, fenced by the session's incarnation `incarnation`
    /// (`None`: not fenced by it; see [`crate::retention`]).
    pub fn with_incarnation(mut self, incarnation: Option<u64>) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Clears `session_id` unconditionally.
    ///
    /// ```
    /// use a2_store_api::ClearRequest;
    /// let request = ClearRequest::new("chat-1").with_if_last_index(7);
    /// assert_eq!((request.if_last_index, request.cause), (Some(7), None));
    /// ```
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            ..Self::default()
        }
    }

    /// Clears only if the session's head is still `index`.
    pub fn with_if_last_index(mut self, index: u64) -> Self {
        self.if_last_index = Some(index);
        self
    }

    /// Fences the clear by the attempt that asks for it (as an append's cause).
    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }
}

impl ReadOptions {
    /// Every stored row: what `ReadOptions::default()` gives.
    ///
    /// ```
    /// use a2_store_api::ReadOptions;
    /// let page = ReadOptions::new().with_after(10).with_through(20).with_limit(5);
    /// assert_eq!((page.after, page.through, page.limit), (Some(10), Some(20), Some(5)));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows after index `after` (exclusive).
    pub fn with_after(mut self, after: u64) -> Self {
        self.after = Some(after);
        self
    }

    /// Rows through index `through` (inclusive).
    pub fn with_through(mut self, through: u64) -> Self {
        self.through = Some(through);
        self
    }

    /// At most `limit` rows.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

impl ReadStateOptions {
    /// The best snapshot at or below `at`.
    ///
    /// ```
    /// assert_eq!(a2_store_api::ReadStateOptions::at(9).at, Some(9));
    /// ```
    pub fn at(at: u64) -> Self {
        Self { at: Some(at) }
    }
}

impl StateWrite {
    /// The reducer's `state` folded through `index`, unpinned.
    ///
    /// ```
    /// use a2_store_api::{CursorRef, StateWrite};
    /// let write = StateWrite::new(12, serde_json::json!({"turns": 3}))
    ///     .with_pin(CursorRef::new("agent", Some("main"), 13));
    /// assert_eq!((write.index, write.pins.len()), (12, 1));
    /// ```
    pub fn new(index: u64, state: Value) -> Self {
        Self {
            index,
            state,
            pins: Vec::new(),
        }
    }

    /// Keeps the checkpoint readable while the head `pin` names holds.
    pub fn with_pin(mut self, pin: CursorRef) -> Self {
        self.pins.push(pin);
        self
    }
}

impl PresenceMeta {
    /// A write stamped `at` (the writer's time, ms) living `ttl` on the
    /// store's clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use a2_store_api::PresenceMeta;
    /// let meta = PresenceMeta::new(1_700_000_000_000, Duration::from_secs(15)).with_seen(42);
    /// assert_eq!((meta.ttl_ms, meta.seen), (15_000, Some(42)));
    /// ```
    pub fn new(at: i64, ttl: Duration) -> Self {
        Self {
            at,
            seen: None,
            ttl_ms: duration_ms(ttl),
        }
    }

    /// Records the log index the participant has seen.
    pub fn with_seen(mut self, seen: u64) -> Self {
        self.seen = Some(seen);
        self
    }
}

impl ListSessions {
    /// The first page: what `ListSessions::default()` gives.
    ///
    /// ```
    /// use a2_store_api::ListSessions;
    /// let page = ListSessions::new().with_after("chat-100").with_limit(50);
    /// assert_eq!((page.after.as_deref(), page.limit), (Some("chat-100"), Some(50)));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Only sessions whose id sorts after `after`.
    pub fn with_after(mut self, after: impl Into<String>) -> Self {
        self.after = Some(after.into());
        self
    }

    /// At most `limit` sessions.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

impl ListWork {
    /// The first page of sessions with work for `consumers`.
    ///
    /// ```
    /// use a2_store_api::ListWork;
    /// let page = ListWork::new(["agent", "notifier"]).with_limit(20);
    /// assert_eq!((page.consumers.len(), page.page_size()), (2, 20));
    /// ```
    pub fn new<I, S>(consumers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            consumers: consumers.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Only sessions whose id sorts after `after`.
    pub fn with_after(mut self, after: impl Into<String>) -> Self {
        self.after = Some(after.into());
        self
    }

    /// At most `limit` sessions.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

impl RescheduleRequest {
    /// The same request, fenced by the session's incarnation `incarnation`
    /// (`None`: not fenced by it; see [`crate::retention`]).
    pub fn with_incarnation(mut self, incarnation: Option<u64>) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Applies `change` to `consumer`'s head (or queued index) at `index` on
    /// `lane` (`None`: its event cursor) in `session_id`, unfenced.
    ///
    /// ```
    /// use a2_store_api::{RescheduleRequest, ScheduleChange};
    /// let request = RescheduleRequest::new("chat-1", "agent", Some("main"), 4, ScheduleChange::Cancel);
    /// assert_eq!((request.index, request.cause), (4, None));
    /// ```
    pub fn new(
        session_id: impl Into<String>,
        consumer: impl Into<String>,
        lane: Option<&str>,
        index: u64,
        change: ScheduleChange,
    ) -> Self {
        Self {
            incarnation: None,
            session_id: session_id.into(),
            consumer: consumer.into(),
            lane: lane.map(str::to_owned),
            index,
            change,
            cause: None,
        }
    }

    /// The same request fenced by `cause` (the attempt that scheduled the head).
    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }
}

impl PauseRequest {
    /// Pauses `consumer` in `session_id` only, until resumed.
    ///
    /// ```
    /// use a2_store_api::PauseRequest;
    /// let request = PauseRequest::in_session("agent", "chat-1").with_until_ms(1_900_000_000_000);
    /// assert_eq!(request.session_id.as_deref(), Some("chat-1"));
    /// ```
    pub fn in_session(consumer: impl Into<String>, session_id: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            session_id: Some(session_id.into()),
            until_ms: None,
        }
    }

    /// Pauses `consumer` in every session, until resumed.
    pub fn everywhere(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            session_id: None,
            until_ms: None,
        }
    }

    /// The same pause, ending by itself at `until_ms` (ms since the epoch).
    pub fn with_until_ms(mut self, until_ms: i64) -> Self {
        self.until_ms = Some(until_ms);
        self
    }
}

impl ResumeRequest {
    /// Lifts `consumer`'s pause in `session_id`.
    ///
    /// ```
    /// use a2_store_api::ResumeRequest;
    /// assert_eq!(ResumeRequest::everywhere("agent").session_id, None);
    /// ```
    pub fn in_session(consumer: impl Into<String>, session_id: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            session_id: Some(session_id.into()),
        }
    }

    /// Lifts `consumer`'s store-wide pause.
    pub fn everywhere(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            session_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Dispatch, StoredEvent};

    fn head() -> Head {
        Head {
            incarnation: 0,
            event: StoredEvent {
                id: "e".into(),
                event_type: "msg".into(),
                payload: Value::Null.into(),
                index: 4,
                session_id: "s".into(),
                created_at: 0,
                cause: None,
            },
            consumer: "agent".into(),
            lane: Some("L1".into()),
            dispatch: Dispatch {
                attempt_count: 2,
                claim_holder: Some("w1".into()),
                ..Dispatch::default()
            },
            clear_index: None,
        }
    }

    #[test]
    fn for_head_copies_the_head() {
        let head = head();
        let complete = CompleteRequest::for_head(&head, vec![NewEvent::new("reply", Value::Null)]);
        assert_eq!(
            complete,
            CompleteRequest {
                incarnation: None,
                session_id: "s".into(),
                consumer: "agent".into(),
                lane: Some("L1".into()),
                index: 4,
                attempt: 2,
                events: vec![NewEvent::new("reply", Value::Null)],
                consumers: None,
            }
        );
        let fail =
            FailRequest::for_head(&head, "boom", 3).with_retry_after(Duration::from_millis(1500));
        assert_eq!(
            fail,
            FailRequest {
                incarnation: None,
                session_id: "s".into(),
                consumer: "agent".into(),
                lane: Some("L1".into()),
                index: 4,
                attempt: 2,
                error: "boom".into(),
                max_failures: Some(3),
                retry_after_ms: Some(1500),
            }
        );
        assert_eq!(FailRequest::for_head(&head, "x", None).max_failures, None);
        let renew = RenewRequest::for_head(&head, Duration::from_secs(1));
        assert_eq!(renew.holder, "w1");
        assert_eq!(
            renew.claims,
            vec![HeldClaim::new(CursorRef::new("agent", Some("L1"), 4), 2)]
        );
        assert_eq!(renew.ttl_ms, Some(1000));
        let redrive = RedriveRequest::for_head(&head, RedriveAction::Skip);
        assert_eq!(
            (
                redrive.session_id.as_str(),
                redrive.consumer.as_str(),
                redrive.index
            ),
            ("s", "agent", 4)
        );
    }

    #[test]
    fn durations_round_up_and_saturate() {
        assert_eq!(duration_ms(Duration::ZERO), 0);
        assert_eq!(duration_ms(Duration::from_nanos(1_000_001)), 2);
        assert_eq!(duration_ms(Duration::from_millis(7)), 7);
        assert_eq!(duration_ms(Duration::MAX), i64::MAX);
        let claim = ClaimRequest::new("s", "w", Duration::from_secs(2)).with_expires_at_ms(9);
        assert_eq!((claim.ttl_ms, claim.expires_at_ms), (None, Some(9)));
    }
}
