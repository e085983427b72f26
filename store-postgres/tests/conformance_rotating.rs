//! The conformance suite against PostgreSQL stores that rotate their state
//! tables every few milliseconds (each table whenever it has doubled since
//! its last rotation): every case must pass with tables truncated and
//! refilled under its calls. Listed as `postgres-rotating::<case>`; runs
//! only when `A2_POSTGRES_URL` is set (otherwise every case is reported as
//! ignored).

mod support;

use support::PgFactory;

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let make =
        support::url_or_skip("conformance_rotating").map(|url| move || PgFactory::rotating(&url));
    libtest_mimic::run(&args, a2_conformance::trials("postgres-rotating", make)).exit();
}
