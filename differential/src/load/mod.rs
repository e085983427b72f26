//! The load test's building blocks, generic over any store: a plan of
//! targeted work with injected handler failures and stalled leases,
//! producing it, worker tasks that drain it, and the final verification.
//! Workers claim across sessions with `claim_work` (waiting for work) and
//! stop when it answers `Settled`. The tests run the workers in several
//! processes sharing one database (memory: several groups in one process).

mod plan;
mod verify;
mod worker;

pub use plan::{Action, Expected, LoadPlan};
pub use verify::verify;
pub use worker::{
    claim_request, drain, produce, WorkerReport, CLAIM_LIMIT, CLAIM_PER_SESSION, CLAIM_WAIT_MS,
};
