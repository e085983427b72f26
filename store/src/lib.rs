//! Durable agent session stores behind one facade: pick a backend with a
//! Cargo feature and a URL, then use the [`Store`] trait.
//!
//! New to the store? The [`guide`] explains the concepts, the lifecycle of
//! a head (claim, renew, complete or fail, dead letter, redrive), what every
//! answer means, and walks through a worked example.
//!
//! ```toml
//! [dependencies]
//! a2-store = { version = "0.1", features = ["sqlite"] }  # `memory` is on by default
//! ```
//!
//! | URL | backend | feature |
//! |---|---|---|
//! | `memory:` | in-memory reference backend | `memory` (default) |
//! | `sqlite:PATH?durability=full` | SQLite file, created when missing | `sqlite` |
//! | `sqlite::memory:` | private in-memory SQLite database | `sqlite` |
//! | `postgres://USER@HOST/DB?schema=app` | PostgreSQL, tables in schema `app` | `postgres` |
//!
//! See [`StoreUrl`] for every option. A URL whose backend is not compiled in
//! is an [`InvalidInput`](ErrorCode::InvalidInput) error naming the feature
//! to enable.
//!
//! ```
//! use a2_store::{NewEvent, OpenOptions, ReadOptions, Target};
//! use serde_json::json;
//!
//! # #[cfg(feature = "memory")]
//! # async fn demo() -> Result<(), a2_store::StoreError> {
//! let store = a2_store::open("memory:", OpenOptions::default()).await?;
//! let appended = store
//!     .append(
//!         "session-1",
//!         vec![NewEvent::new("msg", json!({"text": "hi"})).with_target(Target::lane("agent", "main"))],
//!         Default::default(),
//!     )
//!     .await?;
//! assert!(appended.has_pending);
//! let rows = store.read("session-1", ReadOptions::default()).await?;
//! assert_eq!(rows[0].index, 1);
//! # Ok(())
//! # }
//! # #[cfg(feature = "memory")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! # Claiming work across sessions
//!
//! A worker serves consumers, not sessions: [`Store::claim_work`] finds the
//! claimable heads of those consumers in every session (fairly: the session
//! whose work has waited longest first, one head per session per round by
//! default) and, with `wait_ms`, waits until the store says there is work
//! (an append, a completion, a failure, a redrive, an expiring lease, in any
//! session, new ones included). An idle worker makes no calls while it
//! waits. [`Store::list_work`] pages the sessions that have work.
//!
//! ```
//! use a2_store::{ClaimWorkRequest, ClaimWorkResult, CompleteRequest, ConsumerDeclaration, NewEvent, OpenOptions, Target};
//! use serde_json::json;
//!
//! # #[cfg(feature = "memory")]
//! # async fn demo() -> Result<(), a2_store::StoreError> {
//! let store = a2_store::open("memory:", OpenOptions::default()).await?;
//! for session in ["chat-1", "chat-2"] {
//!     let event = NewEvent::new("msg", json!({"text": "hi"})).with_target(Target::lane("agent", "main"));
//!     store.append(session, vec![event], Default::default()).await?;
//! }
//! // Up to 8 heads across sessions, 30 s leases, waiting up to 5 s for work.
//! let request = ClaimWorkRequest::new("worker-1", vec![ConsumerDeclaration::targeted("agent")], 30_000)
//!     .with_limit(8)
//!     .with_wait_ms(5_000);
//! let mut handled = 0;
//! while handled < 2 {
//!     match store.claim_work(request.clone()).await? {
//!         ClaimWorkResult::Claimed { sessions } => {
//!             for session in sessions {
//!                 for head in session.heads {
//!                     // ... run the handler, then complete with what it returned:
//!                     store.complete_attempt(CompleteRequest::for_head(&head, vec![])).await?;
//!                     handled += 1;
//!                 }
//!             }
//!         }
//!         // Busy or Settled: the wait ended with nothing claimable, so wait
//!         // again (or stop). The enum is non-exhaustive: a later version may
//!         // add outcomes, so a match keeps a wildcard arm.
//!         _ => {}
//!     }
//! }
//! # Ok(())
//! # }
//! # #[cfg(feature = "memory")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! With the `postgres` feature, module `postgres` adds what tools need beyond
//! `open`: the options a URL asks for, a schema-exists check and scratch
//! schemas that are dropped again.
//!
//! # Observability
//!
//! Features `tracing` and `metrics` add the `layer` module: an
//! `ObservedStore` wrapper that gives every call of any backend a `tracing`
//! span (operation, backend, session, consumer, lane, index, attempt,
//! outcome, duration; never payloads) and `metrics` counters and a latency
//! histogram (claims, completions, failures, dead letters, busy answers,
//! superseded attempts). `open` applies it when the options ask:
//!
//! ```
//! # #[cfg(all(feature = "memory", feature = "tracing", feature = "metrics"))]
//! # async fn demo() -> Result<(), a2_store::StoreError> {
//! use a2_store::OpenOptions;
//!
//! let options = OpenOptions::default().with_tracing(true).with_metrics(true);
//! let store = a2_store::open("memory:", options).await?;
//! store.reclaim("session-1").await?; // span `a2_store.reclaim`, outcome `ok`
//! # Ok(())
//! # }
//! # #[cfg(all(feature = "memory", feature = "tracing", feature = "metrics"))]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! The layer's names and labels are listed in the `layer` module docs; `examples/prometheus.rs`
//! serves them to Prometheus.
//!
//! # Running workers
//!
//! Feature `worker` re-exports the `a2-worker` crate as `a2_store::worker`: a
//! runtime that runs handlers for declared consumers over any store, with
//! leases renewed while a handler runs, retries with backoff and dead
//! letters, ids derived from the attempt (so a retried completion is a
//! replay, never a duplicate) and graceful shutdown. Its docs hold the guide.
//!
//! ```toml
//! a2-store = { version = "0.1", features = ["sqlite", "worker"] }
//! ```
//!
//! Everything `a2-store-api` defines for apps (the trait, its types, errors,
//! clocks and id generators) is re-exported here, with [`json!`]/[`Value`]
//! and [`StreamExt`], so an app depends on this crate alone; [`prelude`]
//! imports the everyday names at once. The shared rules backends call are in
//! [`backend`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(any(
    feature = "tracing",
    feature = "metrics",
    feature = "encryption",
    feature = "offload"
))]
pub mod layer;
mod open;
mod options;
#[cfg(feature = "postgres")]
pub mod postgres;
mod redact;
mod url;

/// The contract in the project's own words: concepts, the lifecycle of a
/// head, a glossary and the worked example (the `a2-store-api` guide).
pub use a2_store_api::guide;
pub use a2_store_api::{
    duration_ms, AppendOptions, AppendResult, BoxError, Cause, ClaimRequest, ClaimResult,
    ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, Clock, CompleteRequest,
    CompleteResult, ConsumerDeclaration, CounterIds, Cursor, CursorKind, CursorRef, Dispatch,
    ErrorCode, EventStream, FailOutcome, FailRequest, FailResult, Head, HeldClaim, IdGenerator,
    ListSessions, ListWork, LogDeclaration, ManualClock, NewEvent, Payload, PresenceMeta,
    PresenceResult, PresenceRow, RandomIds, ReadOptions, ReadStateOptions, ReclaimResult,
    RedriveAction, RedriveRequest, RedriveResult, RenewRequest, RenewResult, Result, SessionClaim,
    SessionInfo, SessionWork, Snapshot, StateRead, StateWrite, Store, StoreError, StoredEvent,
    SystemClock, Target, WakeLogResult, CLEAR_EVENT_TYPE, MAX_WAIT_MS, MAX_WORK_LIMIT,
    RECLAIM_BATCH,
};
pub use a2_store_api::{
    BulkRedrive, BulkRedriveResult, ForkOrigin, ForkRequest, ForkResult, NotBefore, Pause,
    PauseRequest, RedrivenHead, RescheduleRequest, RescheduleResult, ResumeRequest, ResumeResult,
    ScheduleChange,
};
pub use a2_store_api::{
    DeleteSessionRequest, DeleteSessionResult, PruneFrom, PruneRequest, PruneResult, Removed,
    DEFAULT_PRUNE_LIMIT, MAX_PRUNE_LIMIT,
};
pub use a2_store_api::{
    EventRewrite, PresenceRewrite, RewritePayloadsRequest, RewritePayloadsResult, StateRewrite,
    MAX_REWRITE_ITEMS,
};

/// Payloads, states and presence values are JSON: `serde_json`'s
/// [`Value`] and its [`json!`] macro, re-exported so an app needs no
/// `serde_json` dependency of its own to call the store.
pub use serde_json::{json, Value};

/// [`Store::subscribe`] returns an [`EventStream`], a `futures` [`Stream`];
/// [`StreamExt`] gives it `next().await`.
pub use futures::stream::{Stream, StreamExt};

/// The everyday names in one import: `use a2_store::prelude::*;`.
///
/// The [`Store`] trait (so its methods can be called on an
/// `Arc<dyn Store>`), [`open`] and [`OpenOptions`], the events and targets
/// to append, the requests of the work loop with their results, the error
/// type, and [`json!`]/[`Value`] and [`StreamExt`] for payloads and
/// subscriptions. `Result` is left out so it never shadows the standard one:
/// write [`a2_store::Result`](crate::Result).
///
/// ```
/// use a2_store::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> a2_store::Result<()> {
/// let store = a2_store::open("memory:", OpenOptions::default()).await?;
/// let event = NewEvent::new("msg", json!({"text": "hi"})).with_target(Target::lane("agent", "main"));
/// store.append("chat-1", vec![event], AppendOptions::default()).await?;
/// let claim = ClaimRequest::new("chat-1", "worker-1", Duration::from_secs(30));
/// for head in store.claim_available(claim).await?.into_heads() {
///     store.complete_attempt(CompleteRequest::for_head(&head, vec![])).await?;
/// }
/// # Ok(())
/// # }
/// ```
pub mod prelude {
    pub use crate::{
        open, AppendOptions, AppendResult, ClaimRequest, ClaimResult, ClaimWorkRequest,
        ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest, CompleteResult,
        ConsumerDeclaration, ErrorCode, FailOutcome, FailRequest, FailResult, Head, NewEvent,
        OpenOptions, ReadOptions, RedriveAction, RedriveRequest, RenewRequest, Store, StoreError,
        StoredEvent, Target,
    };
    pub use crate::{
        BulkRedrive, ForkRequest, NotBefore, PauseRequest, RescheduleRequest, RescheduleResult,
        ResumeRequest, ScheduleChange,
    };
    pub use crate::{
        DeleteSessionRequest, DeleteSessionResult, ListSessions, ManualClock, PruneRequest,
        PruneResult,
    };
    pub use futures::stream::StreamExt;
    pub use serde_json::{json, Value};
    pub use std::time::Duration;
}

/// For backend authors and tools: the shared rules every backend calls
/// (re-exported from `a2-store-api`). An app never needs them; they change
/// with the backends, not with the [`Store`] contract.
pub mod backend {
    pub use a2_store_api::{
        dispatch, fork, log, order, pause, presence, redrive, replay, retention, rewrite, schedule,
        sql, validate, work, ClaimStep, CompleteVerdict, ForkPlan, Hold, ReadyWork, RenewVerdict,
        RescheduleStep, ScheduledAt, WorkRow, WorkSignal, WorkSource, WorkSummary,
    };
}

/// The top-level README's Rust snippets, compiled (and the runnable ones
/// run) as doctests, so the README an app developer copies from keeps
/// working. Needs the features the snippets use; `.ci/run` enables them.
#[cfg(all(
    doctest,
    feature = "memory",
    feature = "worker",
    feature = "tracing",
    feature = "metrics"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The rule modules stay reachable at their old paths for code written
// against them, off the front page.
#[doc(hidden)]
pub use a2_store_api::{
    dispatch, log, order, presence, replay, sql, validate, work, ClaimStep, CompleteVerdict,
    RenewVerdict, WorkRow, WorkSignal, WorkSource, WorkSummary,
};
/// The worker runtime (the `a2-worker` crate, feature `worker`): run handlers
/// for declared consumers over any `Arc<dyn Store>`, with leases renewed,
/// retries with backoff, dead letters, idempotent outputs and graceful shutdown.
#[cfg(feature = "worker")]
pub use a2_worker as worker;
#[cfg(feature = "encryption")]
pub use layer::codec::{EncryptedStore, KeyProvider, Keyring, RecyclingIds, SecretKey};
#[cfg(feature = "offload")]
pub use layer::offload::OffloadStore;
#[cfg(any(feature = "tracing", feature = "metrics"))]
pub use layer::{ObservedStore, Operation};
pub use open::{open, open_layered, open_url};
pub use options::OpenOptions;
#[cfg(feature = "offload")]
pub use options::{OffloadLocation, OffloadOptions};
pub use url::{
    KeySource, LayerUrlOptions, LayeredUrl, PostgresUrlOptions, SqliteDurability, SqliteLocation,
    SqliteUrlOptions, StoreUrl, URL_FORMS,
};

/// What an operator tool shows in place of a payload the payload layers
/// left as stored (features `encryption`, `offload`): `encrypted (key k2)`
/// for an envelope whose key was not given, `offloaded (N bytes, sha256
/// …)` for a reference whose object was not fetched; `None` for any other
/// value (show it as it is). Reads no key and fetches nothing. The CLI's
/// `inspect` and the web console use it.
///
/// ```
/// use a2_store::json;
///
/// let sealed = json!({"$a2enc": 1, "kid": "k2", "sid": "chat-1", "ct": "AAAA"});
/// assert_eq!(a2_store::stored_payload_placeholder(&sealed).as_deref(), Some("encrypted (key k2)"));
/// let offloaded = json!({"$a2ref": 1, "sha256": "0f".repeat(32), "len": 70000});
/// assert_eq!(
///     a2_store::stored_payload_placeholder(&offloaded).as_deref(),
///     Some("offloaded (70000 bytes, sha256 0f0f0f0f0f0f…)")
/// );
/// assert_eq!(a2_store::stored_payload_placeholder(&json!({"text": "hi"})), None);
/// ```
#[cfg(any(feature = "encryption", feature = "offload"))]
pub fn stored_payload_placeholder(value: &Value) -> Option<String> {
    #[cfg(feature = "encryption")]
    if let Some(kid) = layer::codec::sealed_key_id(value) {
        return Some(format!("encrypted (key {kid})"));
    }
    #[cfg(feature = "offload")]
    if let Some(reference) = layer::offload::offload_reference(value) {
        return Some(reference.to_string());
    }
    None
}
