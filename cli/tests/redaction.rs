//! A password planted in PostgreSQL URLs (in the user part and as a
//! `password=` parameter) never shows: not in the CLI's errors or output
//! (stdout and stderr of every command that takes a URL, against a closed
//! port and, when `A2_POSTGRES_URL` is set, a live server), not in the
//! facade's open errors, not in the `Display`/`Debug` of URLs and options.
//!
//! The live-server cases write (bench sessions, repairs) only to fresh
//! scratch schemas, dropped when the test ends.

use std::process::Command;

use a2_store::postgres::ScratchSchemas;
use a2_store::{OpenOptions, StoreUrl};

const SECRET: &str = "pl4nted-S3cret";

/// URLs carrying the secret, against a port nothing listens on.
fn closed_port_urls() -> Vec<String> {
    vec![
        format!("postgres://app:{SECRET}@127.0.0.1:1/db?connect_timeout=2"),
        format!("postgresql://app@127.0.0.1:1/db?password={SECRET}&connect_timeout=2"),
        format!("postgres://app:{SECRET}@127.0.0.1:1/db?connect_timeout=2&sslmode=require"),
        format!("postgres://app:{SECRET}@127.0.0.1:1/db?pool_size=0"),
        format!("postgres://app:{SECRET}@127.0.0.1:1/db?sslmode=bogus"),
        format!("postgres:app:{SECRET}@127.0.0.1:1/db"),
    ]
}

/// The same secret on a live server (trust auth ignores it) as the password
/// parameter, so commands get past connecting: each URL on a fresh scratch
/// schema (not created yet, so repairs also meet a missing schema), all
/// dropped when the returned guard is.
fn live_urls() -> (Option<ScratchSchemas>, Vec<String>) {
    let base = match std::env::var("A2_POSTGRES_URL") {
        Ok(base) if !base.is_empty() => base,
        _ => {
            eprintln!(
                "redaction: live-server cases not run: A2_POSTGRES_URL was unset after the build"
            );
            return (None, Vec::new());
        }
    };
    let scratch = ScratchSchemas::new(base.clone(), "a2_redaction_");
    let join = if base.contains('?') { '&' } else { '?' };
    let schema = || scratch.fresh_schema().expect("a scratch schema name");
    let urls = vec![
        format!("{base}{join}password={SECRET}&schema={}", schema()),
        format!(
            "{base}{join}password={SECRET}&schema={}&pool_size=1&pool_timeout_ms=1",
            schema()
        ),
    ];
    (Some(scratch), urls)
}

/// Every command shape that takes a URL.
fn commands(url: &str) -> Vec<Vec<String>> {
    let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        args(&["check", url, "--only", "append_assigns"]),
        args(&["check", url, "--json", "--only", "append_assigns"]),
        args(&["inspect", url, "sessions"]),
        args(&["inspect", url, "--json", "log", "s"]),
        args(&["inspect", url, "cursors", "s"]),
        args(&["inspect", url, "dead-letters", "s"]),
        args(&["inspect", url, "presence", "s"]),
        args(&["inspect", url, "paused"]),
        args(&["redrive", url, "s", "c", "1"]),
        args(&["redrive", url, "s", "c", "1", "--lane", "L", "--retry"]),
        args(&["redrive", url, "--all", "--retry", "--yes"]),
        args(&["pause", url, "c", "--for", "1m"]),
        args(&["resume", url, "c", "--session", "s"]),
        args(&["fork", url, "s", "t", "--through", "1"]),
        args(&["reschedule", url, "s", "c", "1", "--cancel"]),
        args(&["clear", url, "s"]),
        args(&["reclaim", url, "s"]),
        args(&["delete", url, "s", "--yes"]),
        args(&["prune", url, "--idle", "30d", "--dry-run"]),
        args(&["bench", url, "--seconds", "0.2", "--sessions", "1"]),
        args(&[
            "bench",
            url,
            "--seconds",
            "0.2",
            "--sessions",
            "1",
            "--json",
        ]),
    ]
}

fn assert_hidden(context: &str, text: &str) {
    assert!(
        !text.contains(SECRET),
        "the password shows in {context}:\n{text}"
    );
}

/// Runs every command shape on each of `urls` and checks that neither
/// stream shows the secret; returns how many commands ran.
fn run_every_command(urls: &[String]) -> usize {
    let mut ran = 0;
    for url in urls {
        for args in commands(url) {
            let output = Command::new(env!("CARGO_BIN_EXE_a2-store"))
                .args(&args)
                .output()
                .expect("run a2-store");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_hidden(&format!("stdout of {:?}", args[0]), &stdout);
            assert_hidden(&format!("stderr of {:?}", args[0]), &stderr);
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            ran += 1;
        }
    }
    ran
}

#[test]
fn the_cli_never_prints_the_password() {
    let urls = closed_port_urls();
    assert_eq!(run_every_command(&urls), urls.len() * commands("x").len());
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn the_cli_never_prints_the_password_on_a_live_server() {
    let (scratch, live) = live_urls();
    let Some(scratch) = scratch else {
        return;
    };
    assert_eq!(run_every_command(&live), live.len() * commands("x").len());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime
        .block_on(scratch.drop_all())
        .expect("drop the scratch schemas");
}

#[test]
fn the_facade_never_shows_the_password() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for url in closed_port_urls() {
        if let Ok(parsed) = StoreUrl::parse(&url) {
            assert_hidden("Display", &parsed.to_string());
            assert_hidden("Debug", &format!("{parsed:?}"));
            assert_hidden("pretty Debug", &format!("{parsed:#?}"));
            if let StoreUrl::Postgres { options, .. } = &parsed {
                let backend = a2_store::postgres::options(options, OpenOptions::default());
                assert_hidden("PostgresOptions Debug", &format!("{backend:?}"));
            }
        }
        let Err(error) = runtime.block_on(a2_store::open(&url, OpenOptions::default())) else {
            panic!(
                "nothing listens on port 1, yet {} opened",
                StoreUrl::redact(&url)
            );
        };
        assert_hidden("open's error", &error.to_string());
        assert_hidden("open's error Debug", &format!("{error:?}"));
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&error);
        while let Some(inner) = source {
            assert_hidden("an error source", &inner.to_string());
            source = inner.source();
        }
    }
}
