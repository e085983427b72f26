//! The SQLite writer: claim + complete with 1 and 8 tokio tasks sharing one
//! store on a file (each task on its own session), with durability NORMAL
//! (`sqlite-file`) and FULL (`sqlite-file-full`), so the cost of a cycle
//! alone and under concurrency, and what grouping commits saves when every
//! commit syncs, are compared in one run. Group `sqlite_writer`, function
//! id = backend, parameter = tasks. The NORMAL cases are the same bodies
//! as `concurrent_claim_complete/sqlite-file/(1|8)` of the `concurrency`
//! target.

use a2_benches::backends::SqliteFileFactory;
use a2_benches::settings;
use a2_conformance::bench;

fn main() {
    let mut c = settings::criterion();
    let rt = settings::runtime();
    let normal = match SqliteFileFactory::normal() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let full = match SqliteFileFactory::full() {
        Ok(file) => file,
        Err(error) => panic!("cannot set up the SQLite file backend: {error}"),
    };
    let mut group = c.benchmark_group("sqlite_writer");
    for tasks in [1, 8] {
        bench::concurrent_claim_complete(&mut group, &rt, &normal, tasks, false);
        bench::concurrent_claim_complete(&mut group, &rt, &full, tasks, false);
    }
    group.finish();
    c.final_summary();
}
