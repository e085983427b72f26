//! Differential model testing of a2 store backends against the memory reference.
//!
//! [`run_differential`] generates random operation sequences (proptest),
//! runs each on the in-memory reference and on a store from any
//! [`StoreFactory`](a2_conformance::StoreFactory), and fails on the first
//! difference in a result, an error code or the state read after a step, or
//! on a broken invariant; the failing sequence is shrunk and rendered as
//! ready-to-paste Rust ([`Divergence::program`]).
//!
//! See the crate README for how to run it against a backend and the
//! environment variables of long runs.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod call;
mod fencing;
mod incarnation;
mod invariants;
pub mod load;
mod model;
mod op;
mod render;
mod runner;
mod snapshot;
pub mod vocab;

pub use call::{Call, Outcome, Projection};
pub use fencing::check_lease_fencing;
pub use op::{EventSpec, IfLast, LeaseSpec, Op, WhenSpec};
pub use runner::{run_differential, Config, Divergence, DivergenceKind, Summary};
pub use vocab::Avoid;
