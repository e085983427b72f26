//! The session-store contract for durable agent sessions.
//!
//! An agent runtime keeps each session as an append-only event log and
//! processes events through cursors under leases. This crate holds the
//! object-safe async [`Store`] trait every backend implements, its request
//! and response types (serde, JSON round-trip; event payloads are a shared
//! [`Payload`], so copies of events never copy their JSON), the one
//! [`StoreError`] type with stable [`ErrorCode`]s, the injected [`Clock`]
//! and [`IdGenerator`], and the [`codec`] helpers backends share.
//!
//! Backends: `a2-store-memory` (the reference), `a2-store-sqlite`,
//! `a2-store-postgres`. The `a2-conformance` suite proves a backend
//! implements the contract.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod clock;
pub mod codec;
mod error;
mod ids;
mod payload;
mod store;
mod types;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{BoxError, ErrorCode, Result, StoreError};
pub use ids::{CounterIds, IdGenerator, RandomIds};
pub use payload::Payload;
pub use store::{EventStream, Store};
pub use types::*;
