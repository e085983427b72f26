//! Load: 2 processes of 4 worker tasks each share one SQLite file and drain
//! targeted work across 100 sessions (lanes, event cursors, a log consumer)
//! with injected handler failures and stalled leases; every event is
//! completed exactly once per targeted consumer, in lane order, and the
//! failures and dead letters are exactly the injected ones.
//!
//! 2,000 events by default; `A2_LOAD_FULL=1` runs 50,000, `A2_LOAD_EVENTS=N` N. The children are
//! this test binary re-executed with `A2_LOAD_ROLE` naming the database file.

mod load_harness;

use std::path::Path;
use std::sync::Arc;

use a2_store_api::{RandomIds, Store, SystemClock};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};

const PROCESSES: usize = 2;
const TEST: &str = "sqlite_processes_drain_targeted_load_exactly_once";

fn open(path: &Path) -> Arc<dyn Store> {
    Arc::new(
        SqliteStore::open(
            path,
            SqliteOptions {
                clock: Arc::new(SystemClock),
                ids: Arc::new(RandomIds),
                durability: Durability::Normal,
                ..SqliteOptions::default()
            },
        )
        .expect("open the shared database"),
    )
}

#[test]
fn sqlite_processes_drain_targeted_load_exactly_once() {
    if let Some(db) = load_harness::worker_database() {
        load_harness::work(async move { open(Path::new(&db)) });
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("load.db");
    let database = db.to_str().expect("a UTF-8 temporary path");
    load_harness::run(
        "sqlite",
        TEST,
        PROCESSES,
        async { open(&db) },
        database,
        dir.path(),
    );
}
