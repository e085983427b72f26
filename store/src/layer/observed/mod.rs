//! One store wrapper that adds `tracing` spans and `metrics` to every call of
//! any backend (an opendal-style layer).
//!
//! [`ObservedStore`] wraps an `Arc<dyn Store>` and implements [`Store`] by
//! delegating each method unchanged: results and errors pass through as they
//! are. It records, per call, the operation (the method name), the backend
//! label, the session and, where the call has them, the consumer, lane,
//! index, attempt and holder; then the outcome, the error code and the
//! duration. It never records payloads, snapshot states, presence values,
//! error messages or event ids.
//!
//! [`open`](crate::open) applies it when [`OpenOptions`](crate::OpenOptions)
//! asks (`with_tracing(true)` with the `tracing` feature, `with_metrics(true)`
//! with the `metrics` feature), labelled with the URL's backend (`memory`,
//! `sqlite`, `postgres`). Without either feature this module is not compiled.
//!
//! # Outcomes
//!
//! | operation | outcomes |
//! |---|---|
//! | `claim_available` | `claimed`, `busy`, `settled` |
//! | `complete_attempt` | `completed`, `superseded` |
//! | `fail_attempt` | `failed`, `dead_lettered`, `superseded` |
//! | `redrive` | `redriven`, `not_found` |
//! | `clear` | `cleared`, `not_cleared` |
//! | `delete_session` | `deleted`, `not_deleted`, `not_found` |
//! | every other operation | `ok` |
//! | any call that returns an error | `error` (the code is recorded apart) |
//!
//! # Tracing (feature `tracing`)
//!
//! One span per call at level INFO, target `a2_store`, named
//! `a2_store.<operation>` (for example `a2_store.claim_available`), entered
//! while the backend runs the call, so the backend's own events nest in it.
//! Fields set when the span opens: `operation`, `backend`, `session`, and
//! `consumer`, `lane`, `index`, `attempt`, `holder` where the call names
//! them. Fields recorded when the call returns: `outcome`, `duration_ms`,
//! `error` (the [`ErrorCode`], on errors only),
//! `claimed` and `dead_lettered` (head counts of `claim_available`) and
//! `superseded` (refs `renew_claims` reports superseded), `deleted`
//! (sessions `delete_session` and `prune` deleted, or with a dry run would
//! have) and `examined` (idle sessions a `prune` page looked at).
//! `delete_session` spans name the session; `prune` spans name none and
//! carry `dry_run`. `subscribe` spans
//! the call that opens the stream, not the items it later yields. Filter with
//! the target, e.g. `RUST_LOG=a2_store=info`, or `a2_store=off` to drop the
//! spans of an app that logs at INFO otherwise.
//!
//! # Metrics (feature `metrics`)
//!
//! Recorded through the [`metrics`](https://docs.rs/metrics) facade, so any
//! recorder works (see `examples/prometheus.rs` for a Prometheus endpoint).
//! Session ids are never labels (they are unbounded). Each store registers
//! a series with the recorder the first time it records it and keeps the
//! handle, so install the recorder before the store's first call.
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `a2_store_calls_total` | counter | `operation`, `backend`, `outcome` | every call |
//! | `a2_store_errors_total` | counter | `operation`, `backend`, `code` | calls that returned an error, by [`ErrorCode`] |
//! | `a2_store_call_duration_seconds` | histogram | `operation`, `backend` | each call's latency |
//! | `a2_store_claimed_heads_total` | counter | `backend` | heads handed out by `claim_available` |
//! | `a2_store_completions_total` | counter | `backend` | attempts `complete_attempt` completed |
//! | `a2_store_failures_total` | counter | `backend` | failures `fail_attempt` counted (including the one that dead-letters) |
//! | `a2_store_dead_letters_total` | counter | `backend` | heads dead-lettered, by `fail_attempt` or by `claim_available` on an expired claim |
//! | `a2_store_busy_total` | counter | `backend` | `Busy` answers of `claim_available` |
//! | `a2_store_superseded_total` | counter | `operation`, `backend` | superseded attempts: answers of `complete_attempt` and `fail_attempt`, refs of `renew_claims` |
//! | `a2_store_sessions_deleted_total` | counter | `operation`, `backend` | sessions deleted by `delete_session` or by `prune` (the `operation` label says which; dry runs delete nothing and are not counted) |
//! | `a2_store_prune_pages_total` | counter | `backend`, `dry_run` | pages `prune` returned (`dry_run` is `true` or `false`) |
//!
//! # Example
//!
//! ```
//! # #[cfg(feature = "memory")]
//! # async fn demo() -> Result<(), a2_store::StoreError> {
//! use std::sync::Arc;
//!
//! use a2_store::{ObservedStore, OpenOptions, Store};
//!
//! // Through `open`:
//! let options = OpenOptions::default();
//! # #[cfg(feature = "tracing")]
//! let options = options.with_tracing(true);
//! # #[cfg(feature = "metrics")]
//! let options = options.with_metrics(true);
//! let store = a2_store::open("memory:", options).await?;
//! store.reclaim("session-1").await?;
//!
//! // Or around a store built by hand, with a label of your choice:
//! let observed = ObservedStore::new(store, "primary");
//! # #[cfg(feature = "tracing")]
//! let observed = observed.with_tracing(true);
//! let store: Arc<dyn Store> = Arc::new(observed);
//! store.reclaim("session-1").await?;
//! # Ok(())
//! # }
//! # #[cfg(feature = "memory")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use a2_store_api::{
    AppendOptions, AppendResult, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult,
    ClearRequest, ClearResult, CompleteRequest, CompleteResult, ConsumerDeclaration, Cursor,
    ErrorCode, EventStream, FailOutcome, FailRequest, FailResult, Head, ListSessions, ListWork,
    NewEvent, PresenceMeta, PresenceResult, PresenceRow, ReadOptions, ReadStateOptions,
    ReclaimResult, RedriveRequest, RedriveResult, RenewRequest, RenewResult, Result, SessionInfo,
    SessionWork, StateRead, StateWrite, Store, StoredEvent, WakeLogResult,
};
use a2_store_api::{
    BulkRedrive, BulkRedriveResult, DeleteSessionRequest, DeleteSessionResult, ForkRequest,
    ForkResult, Pause, PauseRequest, PruneRequest, PruneResult, RescheduleRequest,
    RescheduleResult, ResumeRequest, ResumeResult, RewritePayloadsRequest, RewritePayloadsResult,
};
use async_trait::async_trait;
use serde_json::Value;

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "tracing")]
mod tracing;

/// A [`Store`] method, as spans and metric labels name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// [`Store::append`].
    Append,
    /// [`Store::claim_available`].
    ClaimAvailable,
    /// [`Store::renew_claims`].
    RenewClaims,
    /// [`Store::complete_attempt`].
    CompleteAttempt,
    /// [`Store::fail_attempt`].
    FailAttempt,
    /// [`Store::dead_letters`].
    DeadLetters,
    /// [`Store::redrive`].
    Redrive,
    /// [`Store::clear`].
    Clear,
    /// [`Store::reclaim`].
    Reclaim,
    /// [`Store::read`].
    Read,
    /// [`Store::wake_log`].
    WakeLog,
    /// [`Store::cursors`].
    Cursors,
    /// [`Store::subscribe`] (the call that opens the stream).
    Subscribe,
    /// [`Store::write_state`].
    WriteState,
    /// [`Store::read_state`].
    ReadState,
    /// [`Store::set_presence`].
    SetPresence,
    /// [`Store::read_presence`].
    ReadPresence,
    /// [`Store::sessions`].
    Sessions,
    /// [`Store::claim_work`].
    ClaimWork,
    /// [`Store::list_work`].
    ListWork,
    /// [`Store::reschedule`].
    Reschedule,
    /// [`Store::pause`].
    Pause,
    /// [`Store::resume`].
    Resume,
    /// [`Store::pauses`].
    Pauses,
    /// [`Store::redrive_all`].
    RedriveAll,
    /// [`Store::fork`].
    Fork,
    /// [`Store::delete_session`].
    DeleteSession,
    /// [`Store::prune`].
    Prune,
    /// [`Store::rewrite_payloads`].
    RewritePayloads,
}

impl Operation {
    /// How many operations there are.
    const COUNT: usize = 29;

    /// Every operation, in the trait's order.
    pub const ALL: [Operation; Self::COUNT] = [
        Self::Append,
        Self::ClaimAvailable,
        Self::RenewClaims,
        Self::CompleteAttempt,
        Self::FailAttempt,
        Self::DeadLetters,
        Self::Redrive,
        Self::Clear,
        Self::Reclaim,
        Self::Read,
        Self::WakeLog,
        Self::Cursors,
        Self::Subscribe,
        Self::WriteState,
        Self::ReadState,
        Self::SetPresence,
        Self::ReadPresence,
        Self::Sessions,
        Self::ClaimWork,
        Self::ListWork,
        Self::Reschedule,
        Self::Pause,
        Self::Resume,
        Self::Pauses,
        Self::RedriveAll,
        Self::Fork,
        Self::DeleteSession,
        Self::Prune,
        Self::RewritePayloads,
    ];

    /// The method name, e.g. `claim_available`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::ClaimAvailable => "claim_available",
            Self::RenewClaims => "renew_claims",
            Self::CompleteAttempt => "complete_attempt",
            Self::FailAttempt => "fail_attempt",
            Self::DeadLetters => "dead_letters",
            Self::Redrive => "redrive",
            Self::Clear => "clear",
            Self::Reclaim => "reclaim",
            Self::Read => "read",
            Self::WakeLog => "wake_log",
            Self::Cursors => "cursors",
            Self::Subscribe => "subscribe",
            Self::WriteState => "write_state",
            Self::ReadState => "read_state",
            Self::SetPresence => "set_presence",
            Self::ReadPresence => "read_presence",
            Self::Sessions => "sessions",
            Self::ClaimWork => "claim_work",
            Self::ListWork => "list_work",
            Self::Reschedule => "reschedule",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Pauses => "pauses",
            Self::RedriveAll => "redrive_all",
            Self::Fork => "fork",
            Self::DeleteSession => "delete_session",
            Self::Prune => "prune",
            Self::RewritePayloads => "rewrite_payloads",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one call names, recorded when it starts (never payloads).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "tracing"), allow(dead_code))] // ids feed spans
struct Call<'a> {
    operation: Operation,
    session: Option<&'a str>,
    consumer: Option<&'a str>,
    lane: Option<&'a str>,
    index: Option<u64>,
    attempt: Option<u32>,
    holder: Option<&'a str>,
    /// Whether a `prune` only counts (`None` for every other call).
    dry_run: Option<bool>,
}

impl<'a> Call<'a> {
    fn new(operation: Operation, session: &'a str) -> Self {
        Self {
            operation,
            session: Some(session),
            consumer: None,
            lane: None,
            index: None,
            attempt: None,
            holder: None,
            dry_run: None,
        }
    }
}

/// A call under way: what [`ObservedStore::run`] records when it returns.
struct Begun {
    operation: Operation,
    #[cfg(feature = "tracing")]
    span: Option<::tracing::Span>,
    start: Instant,
}

/// The `outcome` a call is recorded with (see the table in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    /// `ok`.
    Ok,
    /// `claimed`.
    Claimed,
    /// `busy`.
    Busy,
    /// `settled`.
    Settled,
    /// `completed`.
    Completed,
    /// `superseded`.
    Superseded,
    /// `failed`.
    Failed,
    /// `dead_lettered`.
    DeadLettered,
    /// `redriven`.
    Redriven,
    /// `not_found`.
    NotFound,
    /// `cleared`.
    Cleared,
    /// `not_cleared`.
    NotCleared,
    /// `deleted`.
    Deleted,
    /// `not_deleted`.
    NotDeleted,
    /// `error`.
    Error,
}

impl Label {
    /// How many labels there are.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    const COUNT: usize = 15;

    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Claimed => "claimed",
            Self::Busy => "busy",
            Self::Settled => "settled",
            Self::Completed => "completed",
            Self::Superseded => "superseded",
            Self::Failed => "failed",
            Self::DeadLettered => "dead_lettered",
            Self::Redriven => "redriven",
            Self::NotFound => "not_found",
            Self::Cleared => "cleared",
            Self::NotCleared => "not_cleared",
            Self::Deleted => "deleted",
            Self::NotDeleted => "not_deleted",
            Self::Error => "error",
        }
    }
}

/// How a call ended, recorded when it returns.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))] // counts feed metrics
struct Outcome {
    /// `ok`, `claimed`, `busy`, … or `error`.
    label: Label,
    /// The error's code when the call failed.
    error: Option<ErrorCode>,
    /// Heads claimed.
    claimed: u64,
    /// Heads dead-lettered.
    dead_lettered: u64,
    /// Superseded attempts (answers or renew refs).
    superseded: u64,
    /// Completions applied.
    completed: u64,
    /// Failures counted.
    failed: u64,
    /// A `Busy` claim answer.
    busy: bool,
    /// Sessions deleted (by `delete_session` or a `prune` page that is no dry run).
    deleted: u64,
    /// Sessions a `prune` page listed (deleted, or with a dry run would be).
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))] // feeds spans
    listed: u64,
    /// Idle sessions a `prune` page examined.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))] // feeds spans
    examined: u64,
    /// A `prune` page returned: `Some(dry_run)`.
    pruned_page: Option<bool>,
}

impl Outcome {
    const OK: Outcome = Outcome::labelled(Label::Ok);

    const fn labelled(label: Label) -> Self {
        Self {
            label,
            error: None,
            claimed: 0,
            dead_lettered: 0,
            superseded: 0,
            completed: 0,
            failed: 0,
            busy: false,
            deleted: 0,
            listed: 0,
            examined: 0,
            pruned_page: None,
        }
    }

    fn of_claim(result: &ClaimResult) -> Self {
        match result {
            ClaimResult::Claimed {
                heads,
                dead_lettered,
                ..
            } => Self {
                claimed: count(heads.len()),
                dead_lettered: count(dead_lettered.len()),
                ..Self::labelled(Label::Claimed)
            },
            ClaimResult::Busy { .. } => Self {
                busy: true,
                ..Self::labelled(Label::Busy)
            },
            ClaimResult::Settled => Self::labelled(Label::Settled),
            // An outcome added to the API later: counted, not labelled.
            _ => Self::OK,
        }
    }

    fn of_claim_work(result: &ClaimWorkResult) -> Self {
        match result {
            ClaimWorkResult::Claimed { sessions } => Self {
                claimed: count(sessions.iter().map(|s| s.heads.len()).sum()),
                dead_lettered: count(sessions.iter().map(|s| s.dead_lettered.len()).sum()),
                ..Self::labelled(Label::Claimed)
            },
            ClaimWorkResult::Busy { .. } => Self {
                busy: true,
                ..Self::labelled(Label::Busy)
            },
            ClaimWorkResult::Settled => Self::labelled(Label::Settled),
            // An outcome added to the API later: counted, not labelled.
            _ => Self::OK,
        }
    }

    fn of_renew(result: &RenewResult) -> Self {
        Self {
            superseded: count(result.superseded.len()),
            ..Self::OK
        }
    }

    fn of_complete(result: &CompleteResult) -> Self {
        match result {
            CompleteResult::Completed { .. } => Self {
                completed: 1,
                ..Self::labelled(Label::Completed)
            },
            CompleteResult::Superseded => Self {
                superseded: 1,
                ..Self::labelled(Label::Superseded)
            },
            // An outcome added to the API later: counted, not labelled.
            _ => Self::OK,
        }
    }

    fn of_fail(result: &FailResult) -> Self {
        match result.outcome {
            FailOutcome::Failed => Self {
                failed: 1,
                ..Self::labelled(Label::Failed)
            },
            FailOutcome::DeadLettered => Self {
                failed: 1,
                dead_lettered: 1,
                ..Self::labelled(Label::DeadLettered)
            },
            FailOutcome::Superseded => Self {
                superseded: 1,
                ..Self::labelled(Label::Superseded)
            },
            // An outcome added to the API later: counted, not labelled.
            _ => Self::OK,
        }
    }

    fn of_redrive(result: &RedriveResult) -> Self {
        Self::labelled(if result.redriven {
            Label::Redriven
        } else {
            Label::NotFound
        })
    }

    fn of_clear(result: &ClearResult) -> Self {
        match result {
            ClearResult::Cleared { .. } => Self::labelled(Label::Cleared),
            ClearResult::NotCleared { .. } => Self::labelled(Label::NotCleared),
            // An outcome added to the API later: counted, not labelled.
            _ => Self::OK,
        }
    }

    fn of_delete(result: &DeleteSessionResult) -> Self {
        match result {
            DeleteSessionResult::Deleted { .. } => Self {
                deleted: 1,
                listed: 1,
                ..Self::labelled(Label::Deleted)
            },
            DeleteSessionResult::NotDeleted { .. } => Self::labelled(Label::NotDeleted),
            DeleteSessionResult::NotFound => Self::labelled(Label::NotFound),
            // An outcome added to the API later: counted, not labelled.
            _ => Self::OK,
        }
    }

    fn of_prune(dry_run: bool, result: &PruneResult) -> Self {
        let listed = count(result.sessions.len());
        Self {
            deleted: if dry_run { 0 } else { listed },
            listed,
            examined: count(result.examined),
            pruned_page: Some(dry_run),
            ..Self::OK
        }
    }

    fn of_error(code: ErrorCode) -> Self {
        Self {
            error: Some(code),
            ..Self::labelled(Label::Error)
        }
    }
}

fn count(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// A [`Store`] that records a `tracing` span and `metrics` for every call
/// of the store it wraps, and otherwise behaves exactly like it. See the
/// [module docs](self) for the span fields and metric names.
///
/// Each of `with_tracing` (feature `tracing`) and
/// `with_metrics` (feature `metrics`) is off until
/// turned on; with both off the wrapper only delegates.
#[derive(Clone)]
pub struct ObservedStore {
    inner: Arc<dyn Store>,
    backend: Arc<str>,
    #[cfg(feature = "tracing")]
    tracing: bool,
    #[cfg(feature = "metrics")]
    metrics: Option<Arc<metrics::Handles>>,
}

impl fmt::Debug for ObservedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("ObservedStore");
        debug.field("backend", &self.backend);
        #[cfg(feature = "tracing")]
        debug.field("tracing", &self.tracing);
        #[cfg(feature = "metrics")]
        debug.field("metrics", &self.metrics.is_some());
        debug.finish_non_exhaustive()
    }
}

impl ObservedStore {
    /// Wraps `inner`, labelling its spans and metrics with `backend` (for
    /// example `sqlite`, or a name of your own such as `primary`).
    pub fn new(inner: Arc<dyn Store>, backend: impl Into<Arc<str>>) -> Self {
        Self {
            inner,
            backend: backend.into(),
            #[cfg(feature = "tracing")]
            tracing: false,
            #[cfg(feature = "metrics")]
            metrics: None,
        }
    }

    /// Turns the per-call `tracing` spans on or off.
    #[cfg(feature = "tracing")]
    pub fn with_tracing(mut self, enabled: bool) -> Self {
        self.tracing = enabled;
        self
    }

    /// Turns the `metrics` counters and histograms on or off.
    #[cfg(feature = "metrics")]
    pub fn with_metrics(mut self, enabled: bool) -> Self {
        self.metrics = enabled.then(|| Arc::new(metrics::Handles::new(&self.backend)));
        self
    }

    /// The label spans and metrics carry as `backend`.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Starts recording `call` (its span opens here, so the request it
    /// borrows from can move into the backend afterwards).
    fn begin(&self, call: Call<'_>) -> Begun {
        Begun {
            operation: call.operation,
            #[cfg(feature = "tracing")]
            span: self.tracing.then(|| tracing::span(&call, &self.backend)),
            start: Instant::now(),
        }
    }

    /// Runs `work` as the call `begun` started, recording it with what
    /// `outcome` reads from its result.
    async fn run<T>(
        &self,
        begun: Begun,
        work: impl Future<Output = Result<T>>,
        outcome: impl FnOnce(&T) -> Outcome,
    ) -> Result<T> {
        #[cfg(feature = "tracing")]
        let result = match &begun.span {
            Some(span) => ::tracing::Instrument::instrument(work, span.clone()).await,
            None => work.await,
        };
        #[cfg(not(feature = "tracing"))]
        let result = work.await;
        let elapsed = begun.start.elapsed();
        let ended = match &result {
            Ok(value) => outcome(value),
            Err(error) => Outcome::of_error(error.code()),
        };
        #[cfg(feature = "tracing")]
        if let Some(span) = &begun.span {
            tracing::finish(span, begun.operation, &ended, elapsed);
        }
        #[cfg(feature = "metrics")]
        if let Some(handles) = &self.metrics {
            handles.record(begun.operation, &ended, elapsed);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (begun.operation, elapsed);
        result
    }

    fn ok<T>(_: &T) -> Outcome {
        Outcome::OK
    }
}

#[async_trait]
impl Store for ObservedStore {
    async fn append(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult> {
        let begun = self.begin(Call::new(Operation::Append, session_id));
        self.run(
            begun,
            self.inner.append(session_id, events, options),
            Self::ok,
        )
        .await
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult> {
        let begun = self.begin(Call {
            holder: Some(&request.holder),
            ..Call::new(Operation::ClaimAvailable, &request.session_id)
        });
        self.run(
            begun,
            self.inner.claim_available(request),
            Outcome::of_claim,
        )
        .await
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult> {
        let begun = self.begin(Call {
            holder: Some(&request.holder),
            ..Call::new(Operation::RenewClaims, &request.session_id)
        });
        self.run(begun, self.inner.renew_claims(request), Outcome::of_renew)
            .await
    }

    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteResult> {
        let begun = self.begin(Call {
            consumer: Some(&request.consumer),
            lane: request.lane.as_deref(),
            index: Some(request.index),
            attempt: Some(request.attempt),
            ..Call::new(Operation::CompleteAttempt, &request.session_id)
        });
        self.run(
            begun,
            self.inner.complete_attempt(request),
            Outcome::of_complete,
        )
        .await
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult> {
        let begun = self.begin(Call {
            consumer: Some(&request.consumer),
            lane: request.lane.as_deref(),
            index: Some(request.index),
            attempt: Some(request.attempt),
            ..Call::new(Operation::FailAttempt, &request.session_id)
        });
        self.run(begun, self.inner.fail_attempt(request), Outcome::of_fail)
            .await
    }

    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>> {
        let begun = self.begin(Call::new(Operation::DeadLetters, session_id));
        self.run(begun, self.inner.dead_letters(session_id), Self::ok)
            .await
    }

    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult> {
        let begun = self.begin(Call {
            consumer: Some(&request.consumer),
            index: Some(request.index),
            ..Call::new(Operation::Redrive, &request.session_id)
        });
        self.run(begun, self.inner.redrive(request), Outcome::of_redrive)
            .await
    }

    async fn clear(&self, request: ClearRequest) -> Result<ClearResult> {
        let begun = self.begin(Call::new(Operation::Clear, &request.session_id));
        self.run(begun, self.inner.clear(request), Outcome::of_clear)
            .await
    }

    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult> {
        let begun = self.begin(Call::new(Operation::Reclaim, session_id));
        self.run(begun, self.inner.reclaim(session_id), Self::ok)
            .await
    }

    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>> {
        let begun = self.begin(Call::new(Operation::Read, session_id));
        self.run(begun, self.inner.read(session_id, options), Self::ok)
            .await
    }

    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult> {
        let begun = self.begin(Call {
            consumer: Some(&consumer.name),
            ..Call::new(Operation::WakeLog, session_id)
        });
        self.run(begun, self.inner.wake_log(session_id, consumer), Self::ok)
            .await
    }

    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>> {
        let begun = self.begin(Call::new(Operation::Cursors, session_id));
        self.run(begun, self.inner.cursors(session_id), Self::ok)
            .await
    }

    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream> {
        let begun = self.begin(Call {
            index: Some(after),
            ..Call::new(Operation::Subscribe, session_id)
        });
        self.run(begun, self.inner.subscribe(session_id, after), Self::ok)
            .await
    }

    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<()> {
        let begun = self.begin(Call::new(Operation::WriteState, session_id));
        self.run(
            begun,
            self.inner.write_state(session_id, reducer, writes),
            Self::ok,
        )
        .await
    }

    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead> {
        let begun = self.begin(Call::new(Operation::ReadState, session_id));
        self.run(
            begun,
            self.inner.read_state(session_id, reducer, options),
            Self::ok,
        )
        .await
    }

    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult> {
        let begun = self.begin(Call::new(Operation::SetPresence, session_id));
        self.run(
            begun,
            self.inner
                .set_presence(session_id, participant, values, meta),
            Self::ok,
        )
        .await
    }

    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>> {
        let begun = self.begin(Call::new(Operation::ReadPresence, session_id));
        self.run(begun, self.inner.read_presence(session_id), Self::ok)
            .await
    }

    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>> {
        let begun = self.begin(Call {
            session: None,
            ..Call::new(Operation::Sessions, "")
        });
        self.run(begun, self.inner.sessions(options), Self::ok)
            .await
    }

    fn claims_in_one_step(&self) -> bool {
        self.inner.claims_in_one_step()
    }

    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        let begun = self.begin(Call {
            session: None,
            holder: Some(&request.holder),
            ..Call::new(Operation::ClaimWork, "")
        });
        self.run(
            begun,
            self.inner.claim_work(request),
            Outcome::of_claim_work,
        )
        .await
    }

    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>> {
        let begun = self.begin(Call {
            session: None,
            ..Call::new(Operation::ListWork, "")
        });
        self.run(begun, self.inner.list_work(request), Self::ok)
            .await
    }

    async fn reschedule(&self, request: RescheduleRequest) -> Result<RescheduleResult> {
        let begun = self.begin(Call {
            consumer: Some(&request.consumer),
            lane: request.lane.as_deref(),
            index: Some(request.index),
            ..Call::new(Operation::Reschedule, &request.session_id)
        });
        self.run(begun, self.inner.reschedule(request), Self::ok)
            .await
    }

    async fn pause(&self, request: PauseRequest) -> Result<Pause> {
        let begun = self.begin(Call {
            session: request.session_id.as_deref(),
            consumer: Some(&request.consumer),
            ..Call::new(Operation::Pause, "")
        });
        self.run(begun, self.inner.pause(request), Self::ok).await
    }

    async fn resume(&self, request: ResumeRequest) -> Result<ResumeResult> {
        let begun = self.begin(Call {
            session: request.session_id.as_deref(),
            consumer: Some(&request.consumer),
            ..Call::new(Operation::Resume, "")
        });
        self.run(begun, self.inner.resume(request), Self::ok).await
    }

    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>> {
        let begun = self.begin(Call {
            session: session_id,
            ..Call::new(Operation::Pauses, "")
        });
        self.run(begun, self.inner.pauses(session_id), Self::ok)
            .await
    }

    async fn redrive_all(&self, request: BulkRedrive) -> Result<BulkRedriveResult> {
        let begun = self.begin(Call {
            session: request.session_id.as_deref(),
            consumer: request.consumer.as_deref(),
            lane: request.lane.as_deref(),
            ..Call::new(Operation::RedriveAll, "")
        });
        self.run(begun, self.inner.redrive_all(request), Self::ok)
            .await
    }

    async fn fork(&self, request: ForkRequest) -> Result<ForkResult> {
        let begun = self.begin(Call::new(Operation::Fork, &request.session_id));
        self.run(begun, self.inner.fork(request), Self::ok).await
    }

    async fn delete_session(&self, request: DeleteSessionRequest) -> Result<DeleteSessionResult> {
        let begun = self.begin(Call {
            index: request.if_last_index,
            ..Call::new(Operation::DeleteSession, &request.session_id)
        });
        self.run(
            begun,
            self.inner.delete_session(request),
            Outcome::of_delete,
        )
        .await
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneResult> {
        let dry_run = request.dry_run;
        let begun = self.begin(Call {
            session: None,
            dry_run: Some(dry_run),
            ..Call::new(Operation::Prune, "")
        });
        self.run(begun, self.inner.prune(request), |result| {
            Outcome::of_prune(dry_run, result)
        })
        .await
    }

    async fn rewrite_payloads(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult> {
        let begun = self.begin(Call::new(Operation::RewritePayloads, &request.session_id));
        self.run(begun, self.inner.rewrite_payloads(request), Self::ok)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_and_labels_index_their_tables() {
        for (position, operation) in Operation::ALL.iter().enumerate() {
            assert_eq!(*operation as usize, position, "{operation}");
        }
        // `Error` is the last label: every label indexes below the count.
        assert_eq!(Label::Error as usize + 1, Label::COUNT);
        assert_eq!(Label::Error.as_str(), "error");
    }
}
