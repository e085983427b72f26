//! Criterion benchmarks of every a2 store backend.
//!
//! The benchmark bodies live in `a2_conformance::bench`, generic over a
//! [`StoreFactory`](a2_conformance::StoreFactory); this crate supplies the
//! factories of this workspace's backends ([`backends`], and [`postgres`] when
//! `A2_POSTGRES_URL` names a server), the bare baselines
//! each figure is compared with ([`baseline`], and [`bare_queue`] for
//! PostgreSQL), and the shared criterion and runtime settings ([`settings`]).
//! The targets in `benches/` and the examples run them; `benches/README.md`
//! says how and shows the latest figures.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backends;
pub mod bare_queue;
pub mod baseline;
pub mod postgres;
pub mod settings;
