//! The conformance suite against PostgreSQL: one test per case, listed as
//! `postgres::<case>`, each on fresh schemas dropped when the test ends.
//! Runs only when `A2_POSTGRES_URL` is set; otherwise every test passes and
//! prints that the PostgreSQL cases were not run and how to run them.

mod support;

use support::PgFactory;

a2_conformance::suite!(
    postgres,
    match PgFactory::from_env("conformance") {
        Some(factory) => factory,
        None => return,
    }
);
