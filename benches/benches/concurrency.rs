//! Claim + complete throughput with 1, 2, 4 and 8 tokio tasks sharing one
//! store (each task on its own session), and with the tasks split over two
//! stores on one database (`sqlite-file-2stores`: one file;
//! `postgres-2stores`: one schema, two pools, when `A2_POSTGRES_URL` is set).
//! Group `concurrent_claim_complete`, function id = backend, parameter = tasks.

use a2_benches::backends::{self, SqliteFileFactory};
use a2_benches::postgres::PostgresFactory;
use a2_benches::settings;
use a2_conformance::bench;

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let backends = match backends::standard() {
        Ok(backends) => backends,
        Err(error) => panic!("cannot set up the backends: {error}"),
    };
    let file = match SqliteFileFactory::normal() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let postgres = PostgresFactory::from_env("concurrency");
    let mut group = c.benchmark_group("concurrent_claim_complete");
    for tasks in [1, 2, 4, 8] {
        for backend in &backends {
            bench::concurrent_claim_complete(&mut group, &rt, backend.as_ref(), tasks, false);
        }
        bench::concurrent_claim_complete(&mut group, &rt, &file, tasks, true);
        if let Some(postgres) = &postgres {
            bench::concurrent_claim_complete(&mut group, &rt, postgres, tasks, false);
            bench::concurrent_claim_complete(&mut group, &rt, postgres, tasks, true);
        }
    }
    group.finish();
    c.final_summary();
}
