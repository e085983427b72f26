//! The load test's building blocks, generic over any store: a plan of
//! targeted work with injected handler failures and stalled leases,
//! producing it, worker tasks that drain it, and the final verification.
//! The tests run the workers in several processes sharing one database.

mod plan;
mod verify;
mod worker;

pub use plan::{Action, Expected, LoadPlan};
pub use verify::verify;
pub use worker::{drain, produce, WorkerReport};
