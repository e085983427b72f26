//! A worker runtime for a2 session stores (guide below).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod handler;
pub mod ids;
mod job;
mod retry;
mod worker;

pub use handler::{handler_fn, FailureKind, FnHandler, Handler, HandlerError, HandlerResult};
pub use job::{Job, LeaseToken};
pub use retry::{Backoff, RetryPolicy};
pub use worker::{
    ShutdownSummary, ShutdownTrigger, Worker, WorkerBuilder, WorkerHandle, WorkerStats,
    CLAIM_ERROR_PAUSE, CLAIM_ERROR_PAUSE_MAX, RENEW_FRACTION,
};
