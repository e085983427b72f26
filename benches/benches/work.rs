//! Work across sessions for memory, SQLite on a file (durability NORMAL) and,
//! when `A2_POSTGRES_URL` is set, PostgreSQL:
//! - `work_scaling`: one `claim_work` (limit 1) on a store of 100, 10k and
//!   100k sessions of which 1% have work (function id = backend), next to
//!   one `claim_available` of a known session with work on the same store
//!   (`<backend>-claim_available`); parameter = sessions. Only the claim is
//!   timed. `A2_BENCH_MAX_SESSIONS` caps the sizes (1,000 in `--test` mode,
//!   so only 100 runs there).
//! - `work_fairness`: the time from the first of 199 appends (one per small
//!   session) to the claim of the last of them by 3 workers calling
//!   `claim_work`, beside a session with a backlog of `A2_BENCH_BACKLOG`
//!   (default 10,000; 1,000 in `--test` mode) claimable messages, and
//!   without it (parameter 0).

use a2_benches::backends::{MemoryFactory, SqliteFileFactory};
use a2_benches::postgres::PostgresFactory;
use a2_benches::settings;
use a2_conformance::bench::{work_fairness, WorkScaling, WorkScalingOp};
use a2_conformance::StoreFactory;

/// The session counts of `work_scaling`.
const SESSIONS: [u64; 3] = [100, 10_000, 100_000];

/// The sizes of [`SESSIONS`] up to `max`, or only `max` itself when every
/// size is larger.
fn sizes_up_to(max: u64) -> Vec<u64> {
    let sizes = SESSIONS
        .iter()
        .copied()
        .filter(|size| *size <= max)
        .collect::<Vec<_>>();
    if sizes.is_empty() {
        vec![max.max(1)]
    } else {
        sizes
    }
}

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let work = settings::work_settings();
    let file = match SqliteFileFactory::normal() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let postgres = PostgresFactory::from_env("work");
    let mut backends: Vec<&dyn StoreFactory> = vec![&MemoryFactory, &file];
    if let Some(postgres) = &postgres {
        backends.push(postgres);
    }

    let mut group = c.benchmark_group("work_scaling");
    for backend in &backends {
        let mut series = WorkScaling::new(*backend);
        for sessions in sizes_up_to(work.max_sessions) {
            series.bench(&mut group, &rt, sessions, WorkScalingOp::ClaimWork);
            series.bench(&mut group, &rt, sessions, WorkScalingOp::ClaimAvailable);
        }
        series.release();
    }
    group.finish();

    let mut group = c.benchmark_group("work_fairness");
    for backend in &backends {
        let mut backlogs = vec![0];
        if work.backlog > 0 {
            backlogs.push(work.backlog);
        }
        for backlog in backlogs {
            work_fairness(&mut group, &rt, *backend, backlog);
        }
    }
    group.finish();
    c.final_summary();
}
