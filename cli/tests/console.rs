//! `a2-store console` through the real binary: the argument checks that
//! keep it safe (no token off loopback, token files that hold none, a
//! store URL's password never shown), and a start, a page and a clean stop
//! on SIGTERM. The browser tests are in `console_browser.rs`.

#[path = "fixture/console.rs"]
mod console;
#[path = "fixture/postgres.rs"]
mod postgres;

use std::process::{Command, Output};
use std::time::Duration;

use console::{http, Console};

fn a2(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(args)
        .env_remove("A2_STORE_URL")
        .output()
        .expect("run a2-store")
}

/// Asserts `args` fail with status 2 and one line on stderr holding every
/// one of `needles`; returns the line.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let output = a2(args);
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{args:?}\nstderr: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: one line expected:\n{err}"
    );
    for needle in needles {
        assert!(err.contains(needle), "{args:?}: no '{needle}' in: {err}");
    }
    assert!(
        output.stdout.is_empty(),
        "{args:?}: nothing may be served or printed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    err
}

#[test]
fn a_non_loopback_address_without_a_token_is_refused() {
    for listen in ["0.0.0.0:0", "[::]:0", "192.0.2.1:7800"] {
        refused(
            &["console", "memory:", "--listen", listen],
            &["refusing to listen", "without a token", "--token-file"],
        );
    }
}

#[test]
fn token_files_must_hold_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let blank = dir.path().join("blank");
    std::fs::write(&blank, "\n   \n\t\n").unwrap();
    for file in [&empty, &blank] {
        let file = file.to_str().unwrap();
        refused(
            &["console", "memory:", "--token-file", file],
            &["holds no token", "one token per line"],
        );
    }
    let missing = dir.path().join("missing");
    refused(
        &[
            "console",
            "memory:",
            "--token-file",
            missing.to_str().unwrap(),
        ],
        &["--token-file", "cannot read it"],
    );
    // A token that cannot travel in a header is refused without being shown.
    let spaced = dir.path().join("spaced");
    std::fs::write(&spaced, "good-token\nsecret with space\n").unwrap();
    let line = refused(
        &[
            "console",
            "memory:",
            "--token-file",
            spaced.to_str().unwrap(),
        ],
        &["token 2 of"],
    );
    assert!(!line.contains("secret"), "{line}");
}

#[test]
fn a_token_variable_must_be_set_and_not_empty() {
    let output = Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(["console", "memory:", "--token-env", "A2_CONSOLE_TEST_TOKEN"])
        .env_remove("A2_CONSOLE_TEST_TOKEN")
        .env_remove("A2_STORE_URL")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("is not set"), "{err}");
    let output = Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(["console", "memory:", "--token-env", "A2_CONSOLE_TEST_TOKEN"])
        .env("A2_CONSOLE_TEST_TOKEN", "  ")
        .env_remove("A2_STORE_URL")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("is empty"), "{err}");
}

#[test]
fn bad_addresses_and_missing_stores_are_one_line_errors() {
    refused(
        &["console", "memory:", "--listen", "localhost"],
        &["not an address to listen on"],
    );
    let dir = tempfile::tempdir().unwrap();
    let missing = format!("sqlite:{}", dir.path().join("none.db").display());
    refused(&["console", &missing], &["no SQLite database"]);
    assert!(
        !dir.path().join("none.db").exists(),
        "the console never creates a store"
    );
}

#[test]
fn a_store_password_never_shows() {
    let secret = "pl4nted-S3cret";
    let url = format!("postgres://app:{secret}@127.0.0.1:1/db?connect_timeout=2");
    let output = a2(&["console", &url]);
    assert_eq!(output.status.code(), Some(2));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!all.contains(secret), "{all}");
}

#[test]
fn serves_pages_and_stops_on_sigterm_without_printing_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "  first-T0ken-abc \n\nsecond-T0ken-def\n").unwrap();
    let console = Console::start(
        "memory:",
        &["--token-file", tokens.to_str().unwrap(), "--hide-payloads"],
    );
    let banner = console.banner.clone();
    assert!(banner.contains("read-only"), "{banner}");
    assert!(banner.contains("2 tokens"), "{banner}");
    let ids = [
        a2_store_console::token_id("first-T0ken-abc"),
        a2_store_console::token_id("second-T0ken-def"),
    ];
    for id in &ids {
        assert!(
            banner.contains(id.as_str()),
            "no token id {id} in: {banner}"
        );
    }
    // Without a token: the 401 page; with one (trimmed): the overview.
    let (code, page) = http(&console.base, "GET", "/", &[], "");
    assert_eq!(code, 401, "{page}");
    let (code, page) = http(
        &console.base,
        "GET",
        "/",
        &[("Authorization", "Bearer second-T0ken-def")],
        "",
    );
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("data-testid=\"overview\""), "{page}");
    let (status, rest, stderr) = console.terminate(Duration::from_secs(10));
    assert!(
        status.success(),
        "{status}\nstdout: {rest}\nstderr: {stderr}"
    );
    assert!(rest.contains("stopped"), "{rest}");
    for output in [&banner, &rest, &stderr] {
        assert!(!output.contains("T0ken"), "a token was printed: {output}");
    }
}

#[test]
fn the_url_may_come_from_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(["console", "--listen", "0.0.0.0:0"])
        .env("A2_STORE_URL", "memory:")
        .output()
        .unwrap();
    // Parsed with the URL from the environment: the listen check speaks.
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("without a token"), "{err}");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn a_postgres_store_has_a_health_page_and_its_sessions() {
    let Some(scratch) = postgres::scratch("a_postgres_store_has_a_health_page") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = a2_store::open(&scratch.url, a2_store::OpenOptions::default())
            .await
            .unwrap();
        let msg = a2_store::NewEvent::new("msg", serde_json::json!({"n": 1}));
        store
            .append("s1", vec![msg], a2_store::AppendOptions::default())
            .await
            .unwrap();
    });
    // A password in the URL (the local server's trust auth ignores it)
    // never shows in what the console prints.
    let secret = "pl4nted-S3cret";
    let url = format!("{}&password={secret}", scratch.url);
    let console = Console::start(&url, &["--consumer", "agent"]);
    assert!(!console.banner.contains(secret), "{}", console.banner);
    let (code, page) = http(&console.base, "GET", "/health", &[], "");
    assert_eq!(code, 200, "{page}");
    for shown in ["dead_tuples", "oldest_transaction", "events"] {
        assert!(
            page.contains(shown),
            "no {shown} on the health page: {page}"
        );
    }
    let (code, page) = http(&console.base, "GET", "/sessions/s1", &[], "");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("data-testid=\"event\""), "{page}");
    let (status, rest, stderr) = console.terminate(Duration::from_secs(10));
    assert!(status.success(), "{stderr}");
    assert!(
        !format!("{rest}{stderr}").contains(secret),
        "{rest}{stderr}"
    );
    drop(scratch);
}
