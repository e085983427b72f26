//! Retention for memory, SQLite on a file (durability NORMAL) and, when
//! `A2_POSTGRES_URL` is set, PostgreSQL:
//! - `prune_scaling`: one `prune` deleting 1,000 idle sessions (added untimed
//!   before each iteration, a day older than the rest) among 10k, 100k and
//!   1M recent sessions; parameter = recent sessions. The contract: the
//!   figure stays within 2x from 10k to 1M. `A2_BENCH_MAX_SESSIONS` caps
//!   the sizes (1,000 in `--test` mode, so only 1,000 runs there).
//! - `delete_session`: one `delete_session` of a session of 10,000 messages
//!   (built untimed, a fresh session each iteration); 1,000 in `--test` mode.

use a2_benches::backends::{MemoryFactory, SqliteFileFactory};
use a2_benches::postgres::PostgresFactory;
use a2_benches::settings;
use a2_conformance::bench::{delete_session_events, PruneScaling};
use a2_conformance::StoreFactory;

/// The recent-session counts of `prune_scaling`.
const SESSIONS: [u64; 3] = [10_000, 100_000, 1_000_000];

/// The session length of `delete_session`.
const EVENTS: u64 = 10_000;

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let max_sessions = settings::work_settings().max_sessions;
    let file = match SqliteFileFactory::normal() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let postgres = PostgresFactory::from_env("retention");
    let mut backends: Vec<&dyn StoreFactory> = vec![&MemoryFactory, &file];
    if let Some(postgres) = &postgres {
        backends.push(postgres);
    }
    let mut sizes: Vec<u64> = SESSIONS
        .iter()
        .copied()
        .filter(|size| *size <= max_sessions)
        .collect();
    if sizes.is_empty() {
        sizes.push(max_sessions.max(1));
    }

    let mut group = c.benchmark_group("prune_scaling");
    for backend in &backends {
        let mut series = PruneScaling::new(*backend);
        for sessions in &sizes {
            series.bench(&mut group, &rt, *sessions);
        }
        series.release();
    }
    group.finish();

    let events = EVENTS.min(settings::bench_settings().max_events);
    let mut group = c.benchmark_group("delete_session");
    for backend in &backends {
        delete_session_events(&mut group, &rt, *backend, events);
    }
    group.finish();
    c.final_summary();
}
