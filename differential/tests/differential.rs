//! The differential test of every backend against the memory reference.
//! `A2_DIFF_CASES`, `A2_DIFF_OPS` and `A2_DIFF_SEED` change the run (see the README).
//!
//! While a backend has a known open divergence, its run here avoids the
//! input pattern that triggers it (so new divergences are still found) and
//! `tests/regressions.rs` holds a test that fails until the bug is fixed.
//! Drop the `Avoid` flag when the fix lands.

mod support;

use a2_conformance::StoreFactory;
use a2_differential::{run_differential, Avoid, Config};

async fn differential(factory: &dyn StoreFactory, cases: u32, avoid: Avoid) {
    let config = Config {
        avoid,
        ..Config::from_env(cases, 40)
    };
    match run_differential(factory, config).await {
        Ok(summary) => println!("{}: {summary}", factory.name()),
        Err(divergence) => panic!("{divergence}"),
    }
}

/// When a divergence is found, add its reproduction to
/// `tests/regressions.rs` and set the matching flag here until the fix lands.
const SQLITE_KNOWN: Avoid = Avoid {
    log_type_changes: false,
    target_lane_conflicts: false,
    ambiguous_redrives: false,
    unlisted_work_claims: false,
};
const POSTGRES_KNOWN: Avoid = Avoid {
    log_type_changes: false,
    target_lane_conflicts: false,
    ambiguous_redrives: false,
    unlisted_work_claims: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_matches_the_reference() {
    differential(&support::SqliteMemory, 256, SQLITE_KNOWN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_matches_the_reference() {
    differential(&support::SqliteFile::new(), 64, SQLITE_KNOWN).await;
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_matches_the_reference() {
    let Some(factory) = support::Postgres::from_env("postgres_matches_the_reference") else {
        return;
    };
    differential(&factory, 32, POSTGRES_KNOWN).await;
}
