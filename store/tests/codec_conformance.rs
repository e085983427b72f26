//! The whole conformance suite through the encryption layer
//! (`EncryptedStore`), on memory, SQLite files and PostgreSQL: trials named
//! `<backend>+encryption::<case>`. The PostgreSQL trials run only when
//! `A2_POSTGRES_URL` is set; otherwise they are reported as ignored, so the
//! counts never claim cases that did not run.

mod codec_support;

use codec_support::{postgres_url, with_encryption, Memory, Postgres, Sqlite};

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = a2_conformance::trials("memory+encryption", Some(|| with_encryption(Memory)));
    trials.extend(a2_conformance::trials(
        "sqlite+encryption",
        Some(|| with_encryption(Sqlite::new())),
    ));
    let postgres = postgres_url().map(|url| move || with_encryption(Postgres::new(&url)));
    if postgres.is_none() {
        eprintln!(
            "codec_conformance: the PostgreSQL trials were NOT run: {} is not set",
            codec_support::POSTGRES_URL_VAR
        );
    }
    trials.extend(a2_conformance::trials("postgres+encryption", postgres));
    libtest_mimic::run(&args, trials).exit();
}
