//! Scheduled work for memory, SQLite on a file (durability NORMAL) and, when
//! `A2_POSTGRES_URL` is set, PostgreSQL: `scheduled_claim`, one `claim_work`
//! at a head's due time while 1,000, 10,000 and 100,000 heads are scheduled
//! over the hour (`<backend>-due`, parameter = scheduled heads), next to
//! the claim of an unscheduled head on a store of the same sessions with
//! nothing scheduled (`<backend>-unscheduled`). Only the claim is timed.
//! `A2_BENCH_MAX_SCHEDULED` caps the sizes (1,000 in `--test` mode).

use a2_benches::backends::{MemoryFactory, SqliteFileFactory};
use a2_benches::postgres::PostgresFactory;
use a2_benches::settings;
use a2_conformance::bench::{scheduled_claim, ScheduledOp};
use a2_conformance::StoreFactory;

/// The scheduled-head counts of the series.
const SIZES: [u64; 3] = [1_000, 10_000, 100_000];

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let max = settings::max_scheduled();
    let file = match SqliteFileFactory::normal() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let postgres = PostgresFactory::from_env("scheduled");
    let mut backends: Vec<&dyn StoreFactory> = vec![&MemoryFactory, &file];
    if let Some(postgres) = &postgres {
        backends.push(postgres);
    }
    let mut group = c.benchmark_group("scheduled_claim");
    for backend in &backends {
        let sizes: Vec<u64> = SIZES.iter().copied().filter(|size| *size <= max).collect();
        let largest = sizes.last().copied().unwrap_or(max.max(1));
        for size in &sizes {
            scheduled_claim(&mut group, &rt, *backend, *size, ScheduledOp::Due);
        }
        scheduled_claim(&mut group, &rt, *backend, largest, ScheduledOp::Unscheduled);
    }
    group.finish();
    c.final_summary();
}
