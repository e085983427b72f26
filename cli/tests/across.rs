//! The cross-session views (`inspect work`, store-wide `inspect
//! dead-letters`, `inspect blocked`) and `redrive --all`, through the real
//! binary, against SQLite files, PostgreSQL (a fresh schema per test, when
//! `A2_POSTGRES_URL` is set) and memory.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use a2_store::{Clock, ManualClock, OpenOptions, SystemClock};
use serde_json::{json, Value};

#[path = "fixture/postgres.rs"]
mod postgres;
#[path = "fixture/seed.rs"]
mod seed;

use seed::{seed_store, MINUTE};

/// A dead letter as `(session, consumer, lane, index)`.
type Key = (String, String, Option<String>, u64);

fn a2(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(args)
        .env_remove("A2_STORE_URL")
        .output()
        .expect("run a2-store")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts success and returns stdout and stderr.
fn ok_with_stderr(args: &[&str]) -> (String, String) {
    let output = a2(args);
    let (out, err) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}\nstdout: {out}\nstderr: {err}"
    );
    (out, err)
}

fn ok(args: &[&str]) -> String {
    ok_with_stderr(args).0
}

fn json_ok(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{out}"))
}

/// Asserts status 2 with one line on stderr containing `needle`; returns
/// stdout and that line.
fn fails(args: &[&str], needle: &str) -> (String, String) {
    let output = a2(args);
    let (out, err) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(2), "{args:?}\nstderr: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: one line expected:\n{err}"
    );
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains(needle),
        "{args:?}: '{needle}' missing in {err}"
    );
    (out, err)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Seeds the store at `url`; returns `t0`.
fn seed(url: &str) -> i64 {
    let t0 = SystemClock.now_ms() - 120 * MINUTE;
    runtime().block_on(async {
        let clock = Arc::new(ManualClock::new(t0));
        let options = OpenOptions::default().with_shared_clock(clock.clone());
        let store = a2_store::open(url, options).await.unwrap();
        seed_store(store.as_ref(), &clock, t0).await;
    });
    t0
}

fn seeded_file(dir: &Path, name: &str) -> (String, i64) {
    let url = format!("sqlite:{}", dir.join(name).display());
    let t0 = seed(&url);
    (url, t0)
}

/// `(session, consumer, lane, index)` of each dead letter of a view's JSON.
fn keys(view: &Value, list: &str) -> Vec<Key> {
    view[list]
        .as_array()
        .unwrap_or_else(|| panic!("no '{list}' in {view}"))
        .iter()
        .map(|item| {
            let head = if item.get("head").is_some_and(Value::is_object) {
                &item["head"]
            } else {
                item
            };
            (
                item["session_id"].as_str().unwrap().to_owned(),
                head["consumer"].as_str().unwrap().to_owned(),
                head["lane"].as_str().map(str::to_owned),
                head["event"]["index"]
                    .as_u64()
                    .or_else(|| item["index"].as_u64())
                    .unwrap(),
            )
        })
        .collect()
}

fn key(session: &str, consumer: &str, lane: Option<&str>, index: u64) -> Key {
    (
        session.to_owned(),
        consumer.to_owned(),
        lane.map(str::to_owned),
        index,
    )
}

fn all_dead() -> Vec<Key> {
    vec![
        key("s0", "agent", Some("L1"), 1),
        key("s1", "agent", Some("L1"), 1),
        key("s1", "audit", Some("audit-log"), 1),
        key("s2", "notifier", None, 2),
    ]
}

/// The store-wide dead letters as `(session, consumer, lane, index)`, one
/// page of at most `limit` sessions at a time.
fn dead_keys_paged(url: &str, limit: &str, extra: &[&str]) -> (Vec<Key>, usize) {
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = vec!["inspect", url, "dead-letters", "--json", "--limit", limit];
        args.extend(extra);
        if let Some(after) = &after {
            args.extend(["--after", after.as_str()]);
        }
        let page = json_ok(&args);
        pages += 1;
        seen.extend(keys(&page, "dead_letters"));
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return (seen, pages),
        }
        assert!(pages < 20, "paging does not end");
    }
}

/// The work view's rows as `(session, consumer, claimable, busy, dead)`.
fn work_rows(view: &Value) -> Vec<(String, String, u64, u64, u64)> {
    view["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["session_id"].as_str().unwrap().to_owned(),
                r["consumer"].as_str().unwrap().to_owned(),
                r["claimable"].as_u64().unwrap(),
                r["busy"].as_u64().unwrap(),
                r["dead_lettered"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn row(
    session: &str,
    consumer: &str,
    claimable: u64,
    busy: u64,
    dead: u64,
) -> (String, String, u64, u64, u64) {
    (session.into(), consumer.into(), claimable, busy, dead)
}

/// The views on a seeded store at `url` list the right rows in the right order.
fn views_list_the_seeded_store(url: &str, t0: i64) {
    // Work: claimable longest waiting first, then busy, then dead letters only.
    let (out, err) = ok_with_stderr(&["inspect", url, "work", "--json"]);
    let work: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(work["version"], 1, "{work}");
    assert_eq!(work["view"], "work");
    assert_eq!(work["consumers"], json!(["agent", "audit", "notifier"]));
    assert_eq!(work["consumers_found_by_scan"], true);
    assert!(
        err.contains("no --consumer given") && err.contains("5 session(s)"),
        "{err}"
    );
    let expected = vec![
        row("s2", "agent", 1, 0, 0),
        row("s3", "agent", 1, 1, 0),
        row("s4", "agent", 0, 1, 0),
        row("s0", "agent", 0, 0, 1),
        row("s1", "agent", 0, 0, 1),
        row("s1", "audit", 0, 0, 1),
        row("s2", "notifier", 0, 0, 1),
    ];
    assert_eq!(work_rows(&work), expected, "{work}");
    assert_eq!(work["total"], 7);
    assert_eq!(work["rows"][0]["ready_since"], t0 + 30 * MINUTE);
    assert_eq!(work["rows"][1]["ready_since"], t0 + 90 * MINUTE);
    assert_eq!(
        work["rows"][1]["next_expiry"],
        t0 + 90 * MINUTE + 24 * 60 * MINUTE
    );
    assert_eq!(work["rows"][2]["ready_since"], Value::Null);
    assert_eq!(
        work["rows"][2]["next_expiry"],
        t0 + 100 * MINUTE + 24 * 60 * MINUTE
    );

    let (out, err) = ok_with_stderr(&[
        "inspect",
        url,
        "work",
        "--consumer",
        "notifier",
        "--consumer",
        "agent",
        "--limit",
        "2",
        "--json",
    ]);
    assert!(err.is_empty(), "no scan, no note: {err}");
    let work: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(work["consumers_found_by_scan"], false);
    assert_eq!(work_rows(&work), expected[..2].to_vec());
    assert_eq!(work["total"], 6, "audit is not asked for");
    let table = ok(&["inspect", url, "work", "--consumer", "agent"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("session") && lines[0].contains("ready since"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("s2") && lines[2].contains("1h 30m"),
        "waited 90 minutes: {table}"
    );
    assert_eq!(lines.len(), 2 + 5, "{table}");
    let table = ok(&[
        "inspect",
        url,
        "work",
        "--consumer",
        "agent",
        "--limit",
        "1",
    ]);
    assert!(table.contains("(4 more row(s) not shown"), "{table}");

    // Every dead letter of the store, by session, with what waits behind.
    let dead = json_ok(&["inspect", url, "dead-letters", "--json"]);
    assert_eq!(dead["version"], 1);
    assert_eq!(dead["view"], "dead-letters");
    assert_eq!(keys(&dead, "dead_letters"), all_dead(), "{dead}");
    assert_eq!(dead["next_after"], Value::Null);
    let items = dead["dead_letters"].as_array().unwrap();
    let shape: Vec<(Value, Value, Value)> = items
        .iter()
        .map(|i| {
            (
                i["kind"].clone(),
                i["waiting_behind"].clone(),
                i["later_events"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (json!("lane"), json!(0), json!(0)),
            (json!("lane"), Value::Null, json!(3)),
            (json!("log"), json!(2), json!(3)),
            (json!("event"), json!(0), Value::Null),
        ],
        "{dead}"
    );
    assert_eq!(items[1]["head"]["dispatch"]["last_error"], "agent failed");
    assert_eq!(items[1]["head"]["dispatch"]["failed_at"], t0 + MINUTE);

    // Paging, one and two sessions a page: no gap, no repeat.
    for limit in ["1", "2"] {
        let (seen, pages) = dead_keys_paged(url, limit, &[]);
        assert_eq!(seen, all_dead(), "--limit {limit}");
        assert_eq!(pages, if limit == "1" { 3 } else { 2 }, "--limit {limit}");
    }
    let (seen, pages) = dead_keys_paged(url, "1", &["--consumer", "agent"]);
    assert_eq!(seen, all_dead()[..2].to_vec());
    assert_eq!(pages, 2);
    let page = json_ok(&["inspect", url, "dead-letters", "--json", "--after", "s1"]);
    assert_eq!(keys(&page, "dead_letters"), all_dead()[3..].to_vec());

    let table = ok(&["inspect", url, "dead-letters"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("behind") && lines[0].contains("kind"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("s0") && lines[2].contains("  0  "),
        "{table}"
    );
    assert_eq!(lines.len(), 2 + 4, "{table}");
    assert!(
        lines[3].starts_with("s1") && lines[3].contains("<=3"),
        "{table}"
    );
    assert!(
        lines[4].contains("audit") && lines[4].contains(" 2 "),
        "{table}"
    );
    let table = ok(&["inspect", url, "dead-letters", "--limit", "1"]);
    assert!(table.contains("continue with --after 's0'"), "{table}");
    let table = ok(&["inspect", url, "dead-letters", "--after", "s2"]);
    assert!(table.contains("no more dead letters"), "{table}");

    // The per-session form is as before.
    let one: Value =
        serde_json::from_str(&ok(&["inspect", url, "dead-letters", "s1", "--json"])).unwrap();
    assert_eq!(one.as_array().unwrap().len(), 2, "{one}");
    assert!(ok(&["inspect", url, "dead-letters", "s2"]).contains("notifier"));

    // Blocked lanes: the lane and log heads, not the event cursor's.
    let blocked = json_ok(&["inspect", url, "blocked", "--json"]);
    assert_eq!(blocked["view"], "blocked");
    assert_eq!(keys(&blocked, "dead_letters"), all_dead()[..3].to_vec());
    let blocked = json_ok(&["inspect", url, "blocked", "--json", "--consumer", "audit"]);
    assert_eq!(keys(&blocked, "dead_letters"), all_dead()[2..3].to_vec());
    assert_eq!(blocked["consumers"], json!(["audit"]));
    let table = ok(&["inspect", url, "blocked"]);
    assert!(table.lines().next().unwrap().contains("behind"), "{table}");
    assert_eq!(table.lines().count(), 2 + 3, "{table}");
}

/// `redrive --all` on a seeded store at `url` (consumed: it redrives).
fn bulk_redrive_acts_on_the_filtered_set(url: &str) {
    // --older-than: only s1's two heads died more than 100 minutes ago.
    let done = json_ok(&[
        "redrive",
        url,
        "--all",
        "--older-than",
        "100m",
        "--retry",
        "--yes",
        "--json",
    ]);
    assert_eq!(done["mode"], "applied");
    assert_eq!(done["action"], "retry");
    assert_eq!(done["redriven"], 2);
    assert_eq!(keys(&done, "items"), all_dead()[1..3].to_vec(), "{done}");
    assert!(done["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["outcome"] == "retried"));
    let dead = json_ok(&["inspect", url, "dead-letters", "--json"]);
    assert_eq!(
        keys(&dead, "dead_letters"),
        vec![all_dead()[0].clone(), all_dead()[3].clone()]
    );
    // The retried lane is claimable again.
    let work = json_ok(&["inspect", url, "work", "--consumer", "agent", "--json"]);
    assert!(
        work_rows(&work).contains(&row("s1", "agent", 1, 0, 0)),
        "{work}"
    );

    // --consumer, --session, --limit, --skip: the first agent dead letter of
    // the given sessions only.
    let out = ok(&[
        "redrive",
        url,
        "--all",
        "--consumer",
        "agent",
        "--consumer",
        "notifier",
        "--session",
        "s2",
        "--session",
        "s0",
        "--limit",
        "1",
        "--skip",
        "--yes",
    ]);
    assert!(
        out.contains("skipped 1 dead letter(s) in 1 session(s)"),
        "{out}"
    );
    assert!(out.lines().nth(2).unwrap().starts_with("s0"), "{out}");
    let dead = json_ok(&["inspect", url, "dead-letters", "--json"]);
    assert_eq!(keys(&dead, "dead_letters"), vec![all_dead()[3].clone()]);

    // Nothing left that matches: nothing to do, no --yes needed.
    let out = ok(&["redrive", url, "--all", "--consumer", "agent", "--retry"]);
    assert!(out.contains("nothing to redrive"), "{out}");
    let done = json_ok(&["redrive", url, "--all", "--retry", "--yes", "--json"]);
    assert_eq!(keys(&done, "items"), vec![all_dead()[3].clone()]);
    assert!(ok(&["inspect", url, "dead-letters"]).contains("no dead letters in the store"));
}

#[test]
fn cross_session_views_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let (url, t0) = seeded_file(dir.path(), "views.db");
    views_list_the_seeded_store(&url, t0);
}

#[test]
fn bulk_redrive_preview_changes_nothing_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = seeded_file(dir.path(), "preview.db");
    let path = dir.path().join("preview.db");
    let before = std::fs::read(&path).unwrap();
    let (out, err) = fails(&["redrive", &url, "--all", "--retry"], "--yes");
    assert!(
        err.contains("--dry-run") && err.contains("nothing changed"),
        "{err}"
    );
    assert!(err.contains("retry the 4 dead letter(s)"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("session") && lines[0].contains("last error"),
        "{out}"
    );
    assert_eq!(lines.len(), 2 + 4 + 1, "{out}");
    assert!(
        out.contains("would retry these 4 dead letter(s) in 3 session(s)"),
        "{out}"
    );
    let out = ok(&[
        "redrive",
        &url,
        "--all",
        "--skip",
        "--dry-run",
        "--older-than",
        "80m",
    ]);
    assert!(
        out.contains("would skip these 3 dead letter(s) in 2 session(s) (dry run"),
        "{out}"
    );
    let preview = json_ok(&[
        "redrive",
        &url,
        "--all",
        "--skip",
        "--dry-run",
        "--json",
        "--consumer",
        "agent",
    ]);
    assert_eq!(preview["version"], 1);
    assert_eq!(preview["mode"], "dry_run");
    assert_eq!(preview["redriven"], Value::Null);
    assert_eq!(preview["filters"]["consumers"], json!(["agent"]));
    assert_eq!(keys(&preview, "items"), all_dead()[..2].to_vec());
    assert!(preview["items"][0]["outcome"].is_null());
    let (out, _) = fails(&["redrive", &url, "--all", "--retry", "--json"], "--yes");
    let preview: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(preview["mode"], "preview");
    assert_eq!(keys(&preview, "items"), all_dead());
    assert_eq!(std::fs::read(&path).unwrap(), before, "byte-identical");
    // The previewed store still holds every dead letter.
    let dead = json_ok(&["inspect", &url, "dead-letters", "--json"]);
    assert_eq!(keys(&dead, "dead_letters"), all_dead());
}

#[test]
fn bulk_redrive_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = seeded_file(dir.path(), "bulk.db");
    bulk_redrive_acts_on_the_filtered_set(&url);
}

#[test]
fn single_redrive_and_bulk_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = seeded_file(dir.path(), "args.db");
    // The single-item form works as before.
    let out = ok(&["redrive", &url, "s2", "notifier", "2", "--retry"]);
    assert!(out.contains("redrove notifier at index 2"), "{out}");
    for args in [
        vec!["redrive", url.as_str(), "--all", "s1", "--retry"],
        vec![
            "redrive",
            url.as_str(),
            "s1",
            "agent",
            "1",
            "--retry",
            "--yes",
        ],
        vec![
            "redrive",
            url.as_str(),
            "s1",
            "agent",
            "1",
            "--retry",
            "--older-than",
            "1h",
        ],
        vec![
            "redrive",
            url.as_str(),
            "s1",
            "agent",
            "1",
            "--retry",
            "--consumer",
            "agent",
        ],
        vec![
            "redrive",
            url.as_str(),
            "--all",
            "--retry",
            "--yes",
            "--dry-run",
        ],
        vec!["redrive", url.as_str(), "--all", "--yes"],
        vec![
            "redrive",
            url.as_str(),
            "--all",
            "--retry",
            "--older-than",
            "soon",
        ],
        vec!["redrive", url.as_str(), "--all", "--retry", "--limit", "0"],
        vec![
            "inspect",
            url.as_str(),
            "dead-letters",
            "s1",
            "--after",
            "s0",
        ],
        vec!["inspect", url.as_str(), "dead-letters", "--limit", "0"],
        vec!["inspect", url.as_str(), "work", "--limit", "x"],
    ] {
        let output = a2(&args);
        let err = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    fails(
        &["inspect", &url, "work", "--consumer", ""],
        "invalid input",
    );
    fails(
        &["redrive", &url, "s1", "agent", "1", "--skip", "--yes"],
        "--yes goes with --all",
    );
}

#[test]
fn cross_session_views_on_memory() {
    let (out, err) = ok_with_stderr(&["inspect", "memory:", "work"]);
    assert!(out.contains("no work"), "{out}");
    assert!(
        err.contains("0 session(s)") && err.contains("found no consumer"),
        "{err}"
    );
    let work = json_ok(&[
        "inspect",
        "memory:",
        "work",
        "--consumer",
        "agent",
        "--json",
    ]);
    assert_eq!(work["rows"], json!([]));
    assert!(ok(&["inspect", "memory:", "dead-letters"]).contains("no dead letters in the store"));
    assert!(ok(&["inspect", "memory:", "blocked"]).contains("no lane is held"));
    let dead = json_ok(&[
        "inspect",
        "memory:",
        "dead-letters",
        "--json",
        "--consumer",
        "agent",
    ]);
    assert_eq!(dead["dead_letters"], json!([]));
    assert_eq!(dead["next_after"], Value::Null);
    assert!(ok(&["redrive", "memory:", "--all", "--retry"]).contains("nothing to redrive"));
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn cross_session_views_and_bulk_redrive_on_postgres() {
    let Some(postgres::Scratch {
        schemas: _schemas,
        url,
        ..
    }) = postgres::scratch("cross_session_views_and_bulk_redrive_on_postgres")
    else {
        return;
    };
    let t0 = seed(&url);
    views_list_the_seeded_store(&url, t0);
    let (_, err) = fails(&["redrive", &url, "--all", "--skip"], "--yes");
    assert!(err.contains("skip the 4 dead letter(s)"), "{err}");
    let dead = json_ok(&["inspect", &url, "dead-letters", "--json"]);
    assert_eq!(
        keys(&dead, "dead_letters"),
        all_dead(),
        "the preview changed nothing"
    );
    bulk_redrive_acts_on_the_filtered_set(&url);
}

#[test]
fn views_and_previews_leave_a_read_only_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = seeded_file(dir.path(), "ro.db");
    let path = dir.path().join("ro.db");
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&path, permissions).unwrap();
    let before = std::fs::read(&path).unwrap();
    for args in [
        vec!["inspect", url.as_str(), "work"],
        vec!["inspect", url.as_str(), "work", "--consumer", "agent"],
        vec!["inspect", url.as_str(), "dead-letters"],
        vec![
            "inspect",
            url.as_str(),
            "dead-letters",
            "--consumer",
            "agent",
        ],
        vec!["inspect", url.as_str(), "blocked"],
        vec!["redrive", url.as_str(), "--all", "--retry", "--dry-run"],
    ] {
        ok(&args);
    }
    fails(&["redrive", &url, "--all", "--skip"], "--yes");
    assert_eq!(std::fs::read(&path).unwrap(), before, "byte-identical");
    // Acting writes: a read-only file is refused, and nothing changes.
    fails(&["redrive", &url, "--all", "--skip", "--yes"], "read-only");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn the_url_of_the_new_commands_comes_from_a2_store_url() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = seeded_file(dir.path(), "env.db");
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_a2-store"))
            .args(args)
            .env("A2_STORE_URL", &url)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&output.stderr)
        );
        serde_json::from_str::<Value>(&text(&output.stdout)).unwrap()
    };
    let work = run(&["inspect", "work", "--consumer", "agent", "--json"]);
    assert_eq!(work["rows"][0]["session_id"], "s2");
    let dead = run(&["inspect", "dead-letters", "--json"]);
    assert_eq!(keys(&dead, "dead_letters"), all_dead());
    let blocked = run(&["inspect", "blocked", "--json", "--limit", "1"]);
    assert_eq!(blocked["next_after"], "s0");
    let preview = run(&["redrive", "--all", "--retry", "--dry-run", "--json"]);
    assert_eq!(keys(&preview, "items"), all_dead());
}

#[test]
fn views_read_past_the_first_page_of_sessions_and_of_work() {
    // More sessions, and more with work, than one `sessions()` or
    // `list_work` page holds (1,000).
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite:{}?durability=normal",
        dir.path().join("big.db").display()
    );
    let t0 = SystemClock.now_ms() - 120 * MINUTE;
    runtime().block_on(async {
        let clock = Arc::new(ManualClock::new(t0));
        let options = OpenOptions::default().with_shared_clock(clock.clone());
        let store = a2_store::open(&url, options).await.unwrap();
        seed_store(store.as_ref(), &clock, t0).await;
        seed::seed_quiet(store.as_ref(), &clock, 1_050, true).await;
    });
    let mut expected: Vec<Key> = (0..1_050)
        .step_by(100)
        .map(|n| key(&format!("q-{n:06}"), "agent", Some("L1"), 1))
        .collect();
    expected.extend(all_dead());
    let (scanned, _) = dead_keys_paged(&url, "1000", &[]);
    assert_eq!(scanned, expected);
    let (listed, pages) = dead_keys_paged(
        &url,
        "4",
        &[
            "--consumer",
            "agent",
            "--consumer",
            "audit",
            "--consumer",
            "notifier",
        ],
    );
    assert_eq!(listed, expected);
    assert_eq!(pages, 4, "14 sessions, 4 a page");
    let work = json_ok(&["inspect", &url, "work", "--json", "--consumer", "agent"]);
    assert_eq!(work["total"], 1_050 + 5, "{work}");
    let rows = work_rows(&work);
    // Claimable in the order their work arrived: s2 (t0+30m), s3 (t0+90m),
    // then the q- sessions (t0+100m on), then s4 (busy) and the dead letters.
    assert_eq!(rows[0], row("s2", "agent", 1, 0, 0));
    assert_eq!(rows[1], row("s3", "agent", 1, 1, 0));
    assert_eq!(rows[2], row("q-000001", "agent", 1, 0, 0));
    let preview = json_ok(&[
        "redrive",
        &url,
        "--all",
        "--retry",
        "--dry-run",
        "--json",
        "--consumer",
        "agent",
    ]);
    assert_eq!(preview["items"].as_array().unwrap().len(), 11 + 2);
}

#[test]
fn bulk_redrive_reaches_a_lane_behind_another_dead_letter() {
    // Consumer `c` has two dead letters at index 1: its event cursor's
    // (recent) and its lane's (old). `redrive` without a lane would take
    // the event cursor's first; the bulk redrive names each head's lane, so
    // a filter keeping only the lane's redrives exactly that one.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("two.db").display());
    let t0 = SystemClock.now_ms() - 120 * MINUTE;
    runtime().block_on(async {
        let clock = Arc::new(ManualClock::new(t0));
        let options = OpenOptions::default().with_shared_clock(clock.clone());
        let store = a2_store::open(&url, options).await.unwrap();
        let event = a2_store::NewEvent::new("msg", json!(1))
            .with_target(a2_store::Target::event("c"))
            .with_target(a2_store::Target::lane("c", "L"));
        store
            .append("s", vec![event], Default::default())
            .await
            .unwrap();
        store
            .claim_available(a2_store::ClaimRequest {
                session_id: "s".into(),
                holder: "w".into(),
                ttl_ms: Some(MINUTE),
                ..Default::default()
            })
            .await
            .unwrap();
        for (lane, at) in [(Some("L"), t0 + MINUTE), (None, t0 + 100 * MINUTE)] {
            clock.set(at);
            store
                .fail_attempt(a2_store::FailRequest {
                    incarnation: None,
                    session_id: "s".into(),
                    consumer: "c".into(),
                    lane: lane.map(str::to_owned),
                    index: 1,
                    attempt: 1,
                    error: "boom".into(),
                    max_failures: Some(1),
                    retry_after_ms: None,
                })
                .await
                .unwrap();
        }
    });
    let args = [
        "redrive",
        &url,
        "--all",
        "--older-than",
        "1h",
        "--retry",
        "--yes",
    ];
    let out = ok(&args);
    assert!(
        out.contains("retried 1 dead letter(s) in 1 session(s)"),
        "{out}"
    );
    let dead = json_ok(&["inspect", &url, "dead-letters", "s", "--json"]);
    let lanes: Vec<&Value> = dead
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["lane"])
        .collect();
    assert_eq!(lanes, vec![&Value::Null], "the event cursor's is left");
    // Without the filter the other one is redriven too.
    let done = json_ok(&["redrive", &url, "--all", "--retry", "--yes", "--json"]);
    assert_eq!(done["redriven"], 1, "{done}");
    assert_eq!(done["items"][0]["lane"], Value::Null, "{done}");
}
