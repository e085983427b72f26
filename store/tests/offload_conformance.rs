//! The whole conformance suite through the offloading layer
//! (`OffloadStore`, 64-byte threshold, a temporary local object store), on
//! memory, SQLite files and PostgreSQL: trials named
//! `<backend>+offload::<case>`. The PostgreSQL trials run only when
//! `A2_POSTGRES_URL` is set; otherwise they are reported as ignored (and
//! said so on stderr), so the counts never claim cases that did not run.

mod offload_support;

use offload_support::{postgres_url, with_offload, Memory, Postgres, Sqlite};

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = a2_conformance::trials("memory+offload", Some(|| with_offload(Memory)));
    trials.extend(a2_conformance::trials(
        "sqlite+offload",
        Some(|| with_offload(Sqlite::new())),
    ));
    let postgres = postgres_url().map(|url| move || with_offload(Postgres::new(&url)));
    if postgres.is_none() {
        eprintln!(
            "offload_conformance: the PostgreSQL trials were NOT run: {} is not set",
            offload_support::POSTGRES_URL_VAR
        );
    }
    trials.extend(a2_conformance::trials("postgres+offload", postgres));
    libtest_mimic::run(&args, trials).exit();
}
