//! The conformance suite against PostgreSQL: one test per case, listed as
//! `postgres::<case>`, each on fresh schemas dropped when the test ends.
//! Runs only when `A2_POSTGRES_URL` is set; otherwise every case is
//! reported as *ignored* (a libtest-mimic harness), with one line saying how
//! to run them, so the counts never claim cases that did not run.

mod support;

use support::PgFactory;

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let make = support::url_or_skip("conformance").map(|url| move || PgFactory::for_url(&url));
    libtest_mimic::run(&args, a2_conformance::trials("postgres", make)).exit();
}
