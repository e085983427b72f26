//! The differential test of every backend against the memory reference.
//! `A2_DIFF_CASES`, `A2_DIFF_OPS` and `A2_DIFF_SEED` change the run (see the README).

mod support;

use a2_conformance::StoreFactory;
use a2_differential::{run_differential, Config};

async fn differential(factory: &dyn StoreFactory, cases: u32) {
    let config = Config::from_env(cases, 40);
    match run_differential(factory, config).await {
        Ok(summary) => println!("{}: {summary}", factory.name()),
        Err(divergence) => panic!("{divergence}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_matches_the_reference() {
    differential(&support::SqliteMemory, 256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_matches_the_reference() {
    differential(&support::SqliteFile::new(), 64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_matches_the_reference() {
    let Some(factory) = support::Postgres::from_env("postgres_matches_the_reference") else {
        return;
    };
    differential(&factory, 32).await;
}
