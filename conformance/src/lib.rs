//! The conformance suite every a2 store backend runs.
//!
//! Every behaviour of the session-store contract (the guide of
//! `a2-store-api`, [`a2_store_api::guide`], and the decisions of its
//! CONTRACT.md) is a named *case*. A backend proves it implements
//! [`Store`](a2_store_api::Store) by passing them all.
//!
//! # Using it from a backend's tests
//!
//! Add the suite as a dev-dependency:
//!
//! ```toml
//! [dev-dependencies]
//! a2-conformance = "0.1"
//! ```
//!
//! Implement [`StoreFactory`] for your backend: `create` builds a fresh store
//! on the clock and id generator the suite passes (the suite drives time with
//! a manual clock and never sleeps for a lease). Cases use session ids of
//! their own (random suffixes), so a factory may hand out stores over one
//! shared database. Then, in `tests/conformance.rs`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use a2_conformance::{Capabilities, StoreFactory};
//! use a2_store_api::{Clock, IdGenerator, Result, Store};
//! # use a2_store_memory::{MemoryOptions, MemoryStore as MyStore};
//!
//! struct MyFactory;
//!
//! #[async_trait::async_trait]
//! impl StoreFactory for MyFactory {
//!     fn name(&self) -> &str {
//!         "mine"
//!     }
//!
//!     // Optional: what your backend supports beyond the contract.
//!     fn capabilities(&self) -> Capabilities {
//!         Capabilities::NONE
//!     }
//!
//!     async fn create(
//!         &self,
//!         clock: Arc<dyn Clock>,
//!         ids: Arc<dyn IdGenerator>,
//!     ) -> Result<Arc<dyn Store>> {
//!         # let my_store = MyStore::with_options(MemoryOptions { clock, ids });
//!         // A fresh store on the suite's clock and ids.
//!         Ok(Arc::new(my_store))
//!     }
//! }
//!
//! a2_conformance::suite!(mine, MyFactory);
//! # fn main() {}
//! ```
//!
//! [`suite!`] expands to a module named after its first argument holding one
//! test per case, so `cargo test` lists `mine::append_generates_ids_when_absent`
//! and so on, and a failure names the backend, the case, the file and line of
//! the broken expectation and both values. Nothing needs importing: the tests
//! start their own multi-thread tokio runtime.
//!
//! # Capabilities and skipped cases
//!
//! A backend declares optional behaviour in [`Capabilities`] (returned by
//! [`StoreFactory::capabilities`]): `shared_database` (then implement
//! [`StoreFactory::create_pair`], two stores on one fresh database) and
//! `cross_instance_subscribe`. A case needing a capability the backend lacks
//! is *skipped*: in `cargo test` it passes and prints `skipped: <reason>`
//! (Rust tests cannot report a skip), while [`run`] counts it as skipped,
//! never as passed.
//!
//! # Running outside a test harness
//!
//! [`run`] runs every case against a factory and returns a [`Report`]
//! (case, [`Outcome`] — passed, failed with the reason, skipped with the
//! reason — and duration, plus counts); [`run_case`] runs one case by name
//! and [`case_names`] lists them. Each case runs in its own tokio task, so a
//! panicking or hanging backend yields a failed row, not a crash: this is
//! what a CLI `check` command calls.
//!
//! ```no_run
//! # async fn check(factory: &dyn a2_conformance::StoreFactory) -> bool {
//! let report = a2_conformance::run(factory).await;
//! println!("{report}"); // one line per case, then the counts
//! for failure in report.failures() {
//!     eprintln!("{}: {:?}", failure.name, failure.outcome);
//! }
//! let one = a2_conformance::run_case(factory, "spec_worked_example").await;
//! report.is_success() && one.is_some()
//! # }
//! ```
//!
//! # Stability of the case list
//!
//! The case list moves with the `Store` trait's version (`a2-store-api`):
//! cases are added in minor versions (a backend that passed may then fail a
//! new case, which always pins behaviour the contract already required or
//! newly adds), and a case is renamed or removed only with a breaking API
//! version.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod check;
#[cfg(feature = "bench")]
pub mod bench;
mod cases;
mod factory;
mod layered;
mod report;
mod support;

pub use factory::{Capabilities, StoreFactory};
pub use layered::{Layered, StoreLayer};
pub use report::{
    case_names, run, run_case, run_matching, trials, CaseReport, Outcome, Report, CASE_TIMEOUT,
};

/// Internals the macros expand to; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::report::run_test;
}

/// Expands to `mod $backend { #[test] fn <case>() ... }`: one test per
/// conformance case, run against the [`StoreFactory`] that `$factory`
/// evaluates to (evaluated once per test, in the caller's scope).
///
/// ```ignore
/// a2_conformance::suite!(memory, MemoryFactory);
/// ```
///
/// See the crate docs for a complete `tests/conformance.rs`.
#[macro_export]
macro_rules! suite {
    ($backend:ident, $factory:expr $(,)?) => {
        $crate::__a2_cases!(__a2_suite_tests { $backend, $factory });
    };
}

/// Expands the case list into one test per case (see [`suite!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __a2_suite_tests {
    (
        { $backend:ident, $factory:expr }
        single: [$($sa:ident :: $sc:ident),* $(,)?]
        pair: [$($pa:ident :: $pc:ident),* $(,)?]
    ) => {
        /// The conformance suite run against this backend, one test per case.
        mod $backend {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[test]
                fn $sc() {
                    let factory = $factory;
                    $crate::__private::run_test(&factory, stringify!($backend), stringify!($sc));
                }
            )*
            $(
                #[test]
                fn $pc() {
                    let factory = $factory;
                    $crate::__private::run_test(&factory, stringify!($backend), stringify!($pc));
                }
            )*
        }
    };
}
