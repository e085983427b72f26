//! The session-store contract for durable agent sessions.
//!
//! **Start with the [`guide`]**: the concepts (sessions, cursors, heads,
//! attempts, leases), the lifecycle of a head, what every answer means, a
//! glossary and a worked example you can run.
//!
//! An agent runtime keeps each session as an append-only event log and
//! processes events through cursors under leases. This crate holds the
//! object-safe async [`Store`] trait every backend implements, its request
//! and response types (serde, JSON round-trip; event payloads are a shared
//! [`Payload`], so copies of events never copy their JSON), the one
//! [`StoreError`] type with stable [`ErrorCode`]s, the injected [`Clock`]
//! and [`IdGenerator`], and every rule of the contract, once:
//!
//! | rule | where |
//! |---|---|
//! | what input each operation accepts | [`validate`], one function per trait method |
//! | the per-head state machine: claim, expiry, busy, renew, fence, complete, fail, redrive | [`dispatch`], methods on [`Dispatch`] |
//! | idempotent replay of appends and completions | [`replay`] |
//! | the order results come in | [`order`] |
//! | log cursors' types, read bounds, the clear marker | [`log`] |
//! | presence last-writer-wins | [`presence`] |
//! | scheduled heads, rescheduling and cancelling them | [`schedule`] |
//! | paused consumers: which heads a pause holds | [`pause`] |
//! | lane-exact and bulk redrive | [`redrive`] |
//! | what a fork copies | [`fork`] |
//! | deleting and pruning sessions, the incarnation fence | [`retention`] |
//! | rewriting stored payloads (re-encryption) | [`rewrite`] |
//! | the work index, fairness across sessions, claiming and waiting across sessions | [`work`] |
//! | how SQL backends encode values | [`sql`] |
//! | every error text | constructors on [`StoreError`] |
//!
//! A backend finds rows by its own indexes, asks these functions what to
//! do, and stores the answer; it decides nothing itself, so every backend
//! answers alike.
//!
//! Backends: `a2-store-memory` (the reference), `a2-store-sqlite`,
//! `a2-store-postgres`. The `a2-conformance` suite proves a backend
//! implements the contract.
//!
//! # Versioning
//!
//! Requests are open structs (struct literals work; their constructors,
//! like [`ClaimRequest::new`] and [`CompleteRequest::for_head`], keep
//! working when a request gains an optional field). What a store returns
//! is `#[non_exhaustive]`, so a later version can add to it without a
//! breaking change: result structs ([`Head`], [`Cursor`], [`Dispatch`],
//! [`StoredEvent`], [`AppendResult`], [`SessionInfo`], ...) are read by
//! field and built, by backends and test doubles, with their constructors
//! ([`Head::new`], [`StoredEvent::new`], [`Cursor::new`] with `with_*`
//! methods, ...); a `match` on a result enum ([`ClaimResult`],
//! [`ClaimWorkResult`], [`CompleteResult`], [`ClearResult`],
//! [`RescheduleResult`], [`FailOutcome`], [`ErrorCode`]) keeps a wildcard
//! arm.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod builders;
mod clock;
pub mod dispatch;
mod error;
pub mod fork;
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}
mod ids;
pub mod log;
pub mod order;
pub mod pause;
mod payload;
pub mod presence;
pub mod redrive;
pub mod replay;
mod results;
pub mod retention;
pub mod rewrite;
pub mod schedule;
pub mod sql;
mod store;
mod types;
pub mod validate;
pub mod work;

pub use builders::duration_ms;
pub use clock::{Clock, ManualClock, SystemClock};
pub use dispatch::{ClaimStep, CompleteVerdict, RenewVerdict};
pub use error::{BoxError, ErrorCode, Result, StoreError};
pub use fork::ForkPlan;
pub use ids::{CounterIds, IdGenerator, RandomIds};
pub use pause::Hold;
pub use payload::Payload;
pub use retention::{
    DeleteSessionRequest, DeleteSessionResult, PruneFrom, PruneRequest, PruneResult, Removed,
    DEFAULT_PRUNE_LIMIT, MAX_PRUNE_LIMIT,
};
pub use rewrite::{
    EventRewrite, PresenceRewrite, RewritePayloadsRequest, RewritePayloadsResult, StateRewrite,
    MAX_REWRITE_ITEMS,
};
pub use schedule::{RescheduleStep, ScheduledAt};
pub use store::{EventStream, Store};
pub use types::*;
pub use work::{ReadyWork, WorkRow, WorkSignal, WorkSource, WorkSummary};
