//! Bare baselines in the same groups as the backends: what SQLite itself, or
//! plain Rust collections, need for the same rows. Each backend figure reads
//! as a ratio of its baseline (`memory` against `baseline-collections`,
//! `sqlite-*` against `baseline-rusqlite-*` of the same storage).

pub mod collections;
pub mod sqlite;

/// Cycles prepared per untimed setup step of the claim baselines, as in the
/// shared bodies.
pub(crate) const CHUNK: u64 = 100;
