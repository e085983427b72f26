//! Runs the real `a2-store` binary against memory and SQLite files.

#[path = "fixture/postgres.rs"]
mod postgres;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use a2_store::{
    ClaimRequest, ClaimResult, Clock, CompleteRequest, FailOutcome, FailRequest, NewEvent,
    OpenOptions, PresenceMeta, Store, SystemClock, Target,
};
use serde_json::{json, Value};

fn a2(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(args)
        .env_remove("A2_STORE_URL")
        .output()
        .expect("run a2-store")
}

/// Runs a2-store with `A2_STORE_URL` set to `url`.
fn a2_with_url(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(args)
        .env("A2_STORE_URL", url)
        .output()
        .expect("run a2-store")
}

/// Asserts `output` is an error: status 2 and one line on stderr.
fn one_line_error(args: &[&str], output: &Output) -> String {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{args:?}\nstderr: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: one line expected:\n{err}"
    );
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    err
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts success and returns stdout.
fn ok(args: &[&str]) -> String {
    let output = a2(args);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}\nstdout: {}\nstderr: {}",
        stdout(&output),
        stderr(&output)
    );
    stdout(&output)
}

/// Asserts the command failed with status 2 and exactly one line on stderr
/// containing `needle`; returns that line.
fn fails(args: &[&str], needle: &str) -> String {
    let output = a2(args);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}\nstderr: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: one line expected:\n{err}"
    );
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in:\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Writes a known session `s1` (4 events, a lane cursor at 2, a dead letter
/// at 4, presence) and `s2` (1 event) into a new SQLite file.
fn seed(path: &Path) {
    runtime().block_on(async {
        let url = format!("sqlite:{}", path.display());
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        seed_store(store.as_ref()).await;
    });
}

async fn seed_store(store: &dyn Store) {
    let mut batch: Vec<NewEvent> = (1..=3)
        .map(|n| {
            NewEvent::new("msg", json!({"n": n}))
                .with_id(format!("m{n}"))
                .with_target(Target::lane("agent", "L1"))
        })
        .collect();
    batch.push(
        NewEvent::new("ping", json!(null))
            .with_id("p4")
            .with_target(Target::event("notifier")),
    );
    store.append("s1", batch, Default::default()).await.unwrap();
    store
        .append(
            "s2",
            vec![NewEvent::new("msg", json!("hi"))],
            Default::default(),
        )
        .await
        .unwrap();
    let claimed = store
        .claim_available(ClaimRequest {
            session_id: "s1".into(),
            holder: "w".into(),
            ttl_ms: Some(600_000),
            ..ClaimRequest::default()
        })
        .await
        .unwrap();
    let ClaimResult::Claimed { heads, .. } = claimed else {
        panic!("expected claims, got {claimed:?}")
    };
    assert_eq!(heads.len(), 2, "{heads:?}");
    let failed = store
        .fail_attempt(FailRequest {
            incarnation: None,
            session_id: "s1".into(),
            consumer: "notifier".into(),
            lane: None,
            index: 4,
            attempt: 1,
            error: "boom".into(),
            max_failures: Some(1),
            retry_after_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(failed.outcome, FailOutcome::DeadLettered);
    store
        .complete_attempt(CompleteRequest {
            session_id: "s1".into(),
            consumer: "agent".into(),
            lane: Some("L1".into()),
            index: 1,
            attempt: 1,
            ..CompleteRequest::default()
        })
        .await
        .unwrap();
    let mut values = BTreeMap::new();
    values.insert("typing".to_owned(), json!(true));
    store
        .set_presence(
            "s1",
            "alice",
            values,
            PresenceMeta {
                at: SystemClock.now_ms(),
                seen: Some(3),
                ttl_ms: 600_000,
            },
        )
        .await
        .unwrap();
}

#[test]
fn bench_defaults_to_memory_and_a_sqlite_file_and_writes_json() {
    let out = ok(&["bench", "--seconds", "1", "--sessions", "2", "--json"]);
    let report = json_of(&out);
    assert_eq!(report["sessions"], 2);
    assert_eq!(report["workload_version"], 1);
    let backends = report["backends"].as_array().unwrap();
    assert_eq!(backends.len(), 2, "{report}");
    assert_eq!(backends[0]["url"], "memory:");
    assert!(backends[1]["url"].as_str().unwrap().starts_with("sqlite:"));
    let best = backends
        .iter()
        .map(|b| b["total"]["ratio_to_fastest"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(best, 1.0);
    for backend in backends {
        assert!(backend["rounds"].as_u64().unwrap() > 0, "{backend}");
        let ops = backend["operations"].as_array().unwrap();
        let names: Vec<&str> = ops
            .iter()
            .map(|o| o["operation"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["append", "claim", "complete", "fail", "clear", "reclaim"]
        );
        for op in &ops[..4] {
            assert!(op["count"].as_u64().unwrap() > 0, "{op}");
            assert!(op["p50_us"].as_f64().unwrap() <= op["p99_us"].as_f64().unwrap());
        }
    }
    // The temporary SQLite file is gone.
    let path = backends[1]["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("sqlite:");
    assert!(!Path::new(path).exists(), "{path} left behind");
}

#[test]
fn bench_prints_a_side_by_side_table_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let file = format!(
        "sqlite:{}?durability=normal",
        dir.path().join("b.db").display()
    );
    let table = ok(&[
        "bench",
        "memory:",
        &file,
        "--seconds",
        "0.5",
        "--sessions",
        "2",
    ]);
    for needle in [
        "operation",
        "ops/s",
        "p50",
        "p99",
        "vs best",
        "memory:",
        &file,
        "append",
        "1.00x",
    ] {
        assert!(table.contains(needle), "'{needle}' missing:\n{table}");
    }
    let csv = ok(&[
        "bench",
        "memory:",
        "--seconds",
        "0.3",
        "--sessions",
        "1",
        "--csv",
    ]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "backend,operation,count,ops_per_sec,p50_us,p99_us,max_us,ratio_to_fastest"
    );
    assert_eq!(lines.len(), 1 + 7, "{csv}");
    assert!(lines[1].starts_with("memory:,append,"), "{csv}");
    assert!(lines[7].starts_with("memory:,all,"), "{csv}");
}

#[test]
fn bench_rejects_bad_arguments_in_one_line() {
    fails(&["bench", "memory:", "bogus"], "is not a store URL");
    fails(
        &["bench", "sqlite:x.db?speed=max"],
        "unknown option 'speed'",
    );
    fails(
        &["bench", "postgres://a2@127.0.0.1:1/db?connect_timeout=2"],
        "connecting to PostgreSQL",
    );
    fails(
        &[
            "bench",
            "sqlite:/nonexistent-dir/sub/b.db",
            "--seconds",
            "0.2",
        ],
        "does not exist",
    );
    let output = a2(&["bench", "--seconds", "0"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--seconds"));
}

#[test]
fn check_memory_passes() {
    let output = a2(&["check", "memory:"]);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{out}\n{}", stderr(&output));
    assert!(out.contains(" ... ok"), "{out}");
    assert!(out.contains(" 0 failed"), "{out}");
}

#[test]
fn check_sqlite_uses_a_scratch_database_and_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let user_file = dir.path().join("mine.db");
    let url = format!("sqlite:{}", user_file.display());
    let output = a2(&["check", &url, "--json"]);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{out}\n{}", stderr(&output));
    let report = json_of(&out);
    assert_eq!(report["backend"], "sqlite");
    let cases = report["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    assert!(
        cases.iter().all(|c| c["outcome"]["outcome"] != "failed"),
        "{report}"
    );
    assert!(
        !user_file.exists(),
        "check must never create the user's file"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "scratch files left behind: {left:?}");
}

#[test]
fn check_errors_are_one_line() {
    fails(
        &["check", "sqlite:/nonexistent-dir/x.db"],
        "scratch directory",
    );
    fails(&["check", "nonsense"], "is not a store URL");
    fails(
        &["check", "postgres://a2@127.0.0.1:1/db?connect_timeout=2"],
        "creating a scratch store",
    );
    fails(
        &["check", "memory:", "--only", "no-such-case"],
        "no conformance case",
    );
}

#[test]
fn inspect_a_seeded_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seeded.db");
    seed(&path);
    let url = format!("sqlite:{}", path.display());

    let sessions = ok(&["inspect", &url, "sessions"]);
    assert!(
        sessions.contains("session") && sessions.contains("head"),
        "{sessions}"
    );
    let sessions = json_of(&ok(&["inspect", &url, "sessions", "--json"]));
    assert_eq!(sessions[0]["session_id"], "s1");
    assert_eq!(sessions[0]["head"], 4);
    assert_eq!(sessions[1]["session_id"], "s2");
    let page = json_of(&ok(&[
        "inspect", &url, "--json", "sessions", "--after", "s1", "--limit", "5",
    ]));
    assert_eq!(page.as_array().unwrap().len(), 1);

    let log = ok(&["inspect", &url, "log", "s1"]);
    assert!(
        log.contains("m1") && log.contains("ping") && log.contains("{\"n\":2}"),
        "{log}"
    );
    let page = json_of(&ok(&[
        "inspect", &url, "log", "s1", "--after", "1", "--limit", "2", "--json",
    ]));
    let indexes: Vec<u64> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [2, 3]);

    let cursors = ok(&["inspect", &url, "cursors", "s1"]);
    assert!(
        cursors.contains("agent") && cursors.contains("L1") && cursors.contains("lane"),
        "{cursors}"
    );
    assert!(cursors.contains("boom"), "{cursors}");
    let cursors = json_of(&ok(&["inspect", &url, "cursors", "s1", "--json"]));
    assert_eq!(cursors[0]["consumer"], "agent");
    assert_eq!(cursors[0]["head"], 2);

    let dead = ok(&["inspect", &url, "dead-letters", "s1"]);
    assert!(dead.contains("notifier") && dead.contains("boom"), "{dead}");
    let dead = json_of(&ok(&["inspect", &url, "dead-letters", "s1", "--json"]));
    assert_eq!(dead[0]["event"]["index"], 4);

    let presence = ok(&["inspect", &url, "presence", "s1"]);
    assert!(
        presence.contains("alice") && presence.contains("typing") && presence.contains("true"),
        "{presence}"
    );
    let presence = json_of(&ok(&["inspect", &url, "presence", "s1", "--json"]));
    assert_eq!(presence[0]["seen"], 3);

    let empty = ok(&["inspect", &url, "log", "nobody"]);
    assert!(empty.contains("no events in session 'nobody'"), "{empty}");
}

#[test]
fn repair_a_seeded_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repair.db");
    seed(&path);
    let url = format!("sqlite:{}", path.display());

    let out = ok(&["redrive", &url, "s1", "notifier", "4", "--retry"]);
    assert!(
        out.contains("redrove notifier at index 4") && out.contains("retried"),
        "{out}"
    );
    assert!(ok(&["inspect", &url, "dead-letters", "s1"]).contains("no dead letters"));
    // Dead-letter it again through a claim, then skip it with --json.
    runtime().block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: "s1".into(),
                holder: "w".into(),
                ttl_ms: Some(600_000),
                consumers: Some(vec![a2_store::ConsumerDeclaration::targeted("notifier")]),
                ..ClaimRequest::default()
            })
            .await
            .unwrap();
        let ClaimResult::Claimed { heads, .. } = claimed else {
            panic!("expected a claim, got {claimed:?}")
        };
        let failed = store
            .fail_attempt(FailRequest {
                incarnation: None,
                session_id: "s1".into(),
                consumer: "notifier".into(),
                lane: None,
                index: 4,
                attempt: heads[0].dispatch.attempt_count,
                error: "boom again".into(),
                max_failures: Some(1),
                retry_after_ms: None,
            })
            .await
            .unwrap();
        assert_eq!(failed.outcome, FailOutcome::DeadLettered);
    });
    let skipped = json_of(&ok(&[
        "redrive", &url, "s1", "notifier", "4", "--skip", "--json",
    ]));
    assert_eq!(skipped["redriven"], true);
    assert_eq!(skipped["action"], "skip");
    assert_eq!(skipped["head"]["dispatch"]["last_error"], "boom again");
    fails(
        &["redrive", &url, "s1", "notifier", "4", "--skip"],
        "nothing changed",
    );
    let cursors = json_of(&ok(&["inspect", &url, "cursors", "s1", "--json"]));
    assert!(
        cursors
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["consumer"] != "notifier"),
        "the skipped event cursor is finished: {cursors}"
    );
    let output = a2(&["redrive", &url, "s1", "notifier", "4"]);
    assert_eq!(output.status.code(), Some(2), "an action is required");

    fails(
        &["clear", &url, "s1", "--if-last-index", "2"],
        "ends at index 4",
    );
    let out = ok(&["clear", &url, "s1", "--if-last-index", "4"]);
    assert!(out.contains("marker at index 5"), "{out}");
    assert!(out.contains("1 cursor(s) had pending work"), "{out}");
    let out = ok(&["reclaim", &url, "s1"]);
    assert!(out.contains("reclaimed 4 row(s)"), "{out}");
    let out = ok(&["reclaim", &url, "s1"]);
    assert!(out.contains("nothing to reclaim"), "{out}");
    let done = json_of(&ok(&["reclaim", &url, "s1", "--json"]));
    assert_eq!(done["reclaimed"], 0);
    assert_eq!(done["done"], true);
    let cleared = json_of(&ok(&["clear", &url, "s2", "--yes", "--json"]));
    assert_eq!(cleared["outcome"], "cleared");
    assert_eq!(cleared["marker"]["index"], 2);
    assert_eq!(cleared["marker"]["type"], "a2.cleared");
    let reclaimed = json_of(&ok(&["reclaim", &url, "s2", "--json"]));
    assert_eq!(reclaimed["reclaimed"], 1);
    let sessions = json_of(&ok(&["inspect", &url, "sessions", "--json"]));
    assert_eq!(sessions[0]["clear_index"], 5);
    assert_eq!(sessions[0]["reclaimed_through"], 4);
}

#[test]
fn every_command_runs_against_memory() {
    assert!(ok(&["inspect", "memory:", "sessions"]).contains("no sessions"));
    assert_eq!(
        json_of(&ok(&["inspect", "memory:", "log", "s", "--json"])),
        json!([])
    );
    assert!(ok(&["inspect", "memory:", "cursors", "s"]).contains("no cursors"));
    assert!(ok(&["inspect", "memory:", "dead-letters", "s"]).contains("no dead letters"));
    assert!(ok(&["inspect", "memory:", "presence", "s"]).contains("no live presence"));
    fails(
        &["redrive", "memory:", "s", "c", "1", "--skip"],
        "nothing changed",
    );
    // A fresh memory store has no session: repairs refuse it.
    fails(&["clear", "memory:", "s", "--yes"], "no session 's'");
    fails(&["reclaim", "memory:", "s"], "no session 's'");
    fails(&["delete", "memory:", "s", "--yes"], "no session 's'");
    assert!(ok(&["prune", "memory:", "--idle", "30d"]).contains("pruned 0 of 0 session(s)"));
}

#[test]
fn operator_errors_say_what_to_do_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = format!("sqlite:{}", dir.path().join("missing.db").display());
    for command in [
        vec!["inspect", missing.as_str(), "sessions"],
        vec!["redrive", missing.as_str(), "s", "c", "1", "--retry"],
        vec!["clear", missing.as_str(), "s", "--yes"],
        vec!["reclaim", missing.as_str(), "s"],
    ] {
        fails(&command, "no SQLite database at");
    }
    assert!(!dir.path().join("missing.db").exists(), "never created");
    fails(&["inspect", "app.db", "sessions"], "write sqlite:app.db");
    fails(
        &["inspect", "sqlite:x.db?pool_size=0", "sessions"],
        "at least 1",
    );
    fails(&["inspect", "memory:", "log", ""], "invalid input");

    let newer = dir.path().join("newer.db");
    let conn = rusqlite::Connection::open(&newer).unwrap();
    conn.execute_batch("PRAGMA user_version = 999;").unwrap();
    drop(conn);
    fails(
        &[
            "inspect",
            &format!("sqlite:{}", newer.display()),
            "sessions",
        ],
        "incompatible schema",
    );

    let garbage = dir.path().join("garbage.db");
    std::fs::write(
        &garbage,
        b"this is not a database, just text that is long enough",
    )
    .unwrap();
    fails(
        &[
            "inspect",
            &format!("sqlite:{}", garbage.display()),
            "sessions",
        ],
        "garbage.db",
    );
}

#[test]
fn usage_errors_exit_2() {
    let output = a2(&["inspect"]);
    assert_eq!(output.status.code(), Some(2));
    let output = a2(&["frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
    let help = ok(&["bench", "--help"]);
    assert!(help.contains("Workload"), "{help}");
}

/// Schemas on the server whose name starts with `prefix`.
fn schemas_like(url: &str, prefix: &str) -> Vec<String> {
    runtime()
        .block_on(a2_store::postgres::schemas_with_prefix(url, prefix))
        .unwrap()
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn check_postgres_runs_on_scratch_schemas_and_drops_them() {
    let Some(url) = postgres::server_url("check_postgres") else {
        return;
    };
    let before = schemas_like(&url, "a2_check_");
    let output = a2(&["check", &url, "--only", "append"]);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{out}\n{}", stderr(&output));
    assert!(out.contains("postgres::append"), "{out}");
    assert!(out.contains(" 0 failed"), "{out}");
    let after = schemas_like(&url, "a2_check_");
    assert_eq!(after, before, "scratch schemas left behind");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn bench_and_inspect_postgres() {
    let Some(url) = postgres::server_url("bench_and_inspect_postgres") else {
        return;
    };
    // Dropped when the test ends, passed or failed.
    let scratch = a2_store::postgres::ScratchSchemas::new(url.clone(), "a2_clitest_");
    let schema = scratch.fresh_schema().unwrap();
    let join = if url.contains('?') { '&' } else { '?' };
    let store_url = format!("{url}{join}schema={schema}&pool_size=4");
    let out = ok(&[
        "bench",
        &store_url,
        "--seconds",
        "0.5",
        "--sessions",
        "2",
        "--json",
    ]);
    let report = json_of(&out);
    assert_eq!(report["backends"][0]["url"], store_url.as_str());
    assert!(
        report["backends"][0]["rounds"].as_u64().unwrap() > 0,
        "{report}"
    );
    let sessions = json_of(&ok(&["inspect", &store_url, "sessions", "--json"]));
    let names: Vec<&str> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{sessions}");
    assert!(
        names.iter().all(|n| n.starts_with("a2-bench-")),
        "{names:?}"
    );
    let log = ok(&["inspect", &store_url, "log", names[0], "--limit", "3"]);
    assert!(log.contains("index"), "{log}");

    // Operator commands never create a schema.
    let missing = format!("{url}{join}schema={schema}_missing");
    fails(&["inspect", &missing, "sessions"], "no schema");
    fails(&["clear", &missing, "s", "--yes"], "no schema");
    assert!(schemas_like(&url, &format!("{schema}_missing")).is_empty());
}

/// Every file in `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn clear_and_reclaim_refuse_unknown_sessions_and_clear_needs_consent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guards.db");
    seed(&path);
    let url = format!("sqlite:{}", path.display());
    let before = std::fs::read(&path).unwrap();
    fails(&["clear", &url, "nosuch", "--yes"], "no session 'nosuch'");
    fails(
        &["clear", &url, "nosuch", "--if-last-index", "0"],
        "no session 'nosuch'",
    );
    fails(&["reclaim", &url, "nosuch"], "no session 'nosuch'");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is unchanged"
    );
    let sessions = json_of(&ok(&["inspect", &url, "sessions", "--json"]));
    let names: Vec<&str> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s1", "s2"], "nothing was created");

    let line = fails(&["clear", &url, "s2"], "--yes");
    assert!(line.contains("--if-last-index"), "{line}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "asked, not cleared");
    assert!(ok(&["clear", &url, "s2", "--yes"]).contains("marker at index 2"));
    // A cleared and reclaimed session still exists (its marker stays).
    assert!(ok(&["reclaim", &url, "s2"]).contains("reclaimed 1 row(s)"));
    assert!(ok(&["reclaim", &url, "s2"]).contains("nothing to reclaim"));
}

#[test]
fn inspect_opens_read_only_and_leaves_files_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.db");
    seed(&path);
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&path, permissions).unwrap();
    let url = format!("sqlite:{}", path.display());
    let before = std::fs::read(&path).unwrap();
    for view in [
        vec!["sessions"],
        vec!["log", "s1"],
        vec!["cursors", "s1"],
        vec!["dead-letters", "s1"],
        vec!["presence", "s1"],
    ] {
        let mut args = vec!["inspect", url.as_str()];
        args.extend(view);
        ok(&args);
    }
    assert!(ok(&["inspect", &url, "log", "s1"]).contains("m1"));
    assert_eq!(std::fs::read(&path).unwrap(), before, "byte-identical");
    // Repairs write: a read-only file is refused by them.
    fails(&["clear", &url, "s1", "--yes"], "read-only");
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let empty_url = format!("sqlite:{}", empty.display());
    fails(&["inspect", &empty_url, "sessions"], "empty.db");
    let line = fails(
        &["inspect", &empty_url, "log", "s"],
        "not an a2-store database",
    );
    assert!(line.contains("empty.db"), "{line}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0, "stays empty");

    let text = dir.path().join("notes.db");
    std::fs::write(&text, "plain text, not a database\n".repeat(50)).unwrap();
    let files = snapshot(dir.path());
    fails(
        &["inspect", &format!("sqlite:{}", text.display()), "sessions"],
        "notes.db",
    );
    assert_eq!(
        snapshot(dir.path()),
        files,
        "no file was created or changed"
    );
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn guards_and_read_only_inspect_on_postgres() {
    let Some(url) = postgres::server_url("guards_and_read_only_inspect_on_postgres") else {
        return;
    };
    let scratch = a2_store::postgres::ScratchSchemas::new(url.clone(), "a2_clitest_");
    let schema = scratch.fresh_schema().unwrap();
    let join = if url.contains('?') { '&' } else { '?' };
    let store_url = format!("{url}{join}schema={schema}");
    // Read-only inspect of a schema that is not there creates nothing.
    fails(&["inspect", &store_url, "sessions"], "no schema");
    assert!(schemas_like(&url, &schema).is_empty());
    runtime().block_on(async {
        let store = a2_store::open(&store_url, OpenOptions::default())
            .await
            .unwrap();
        seed_store(store.as_ref()).await;
    });
    let sessions = json_of(&ok(&["inspect", &store_url, "sessions", "--json"]));
    assert_eq!(sessions.as_array().unwrap().len(), 2, "{sessions}");
    assert!(ok(&["inspect", &store_url, "dead-letters", "s1"]).contains("boom"));
    fails(
        &["clear", &store_url, "nosuch", "--yes"],
        "no session 'nosuch'",
    );
    fails(&["reclaim", &store_url, "nosuch"], "no session 'nosuch'");
    let sessions = json_of(&ok(&["inspect", &store_url, "sessions", "--json"]));
    assert_eq!(sessions.as_array().unwrap().len(), 2, "nothing created");
    fails(&["clear", &store_url, "s1"], "--yes");
    assert!(ok(&["clear", &store_url, "s2", "--if-last-index", "1"]).contains("marker at index 2"));
    // Reclaimed down to its marker, the session still exists.
    assert!(ok(&["reclaim", &store_url, "s2"]).contains("reclaimed 1 row(s)"));
    assert!(ok(&["reclaim", &store_url, "s2"]).contains("nothing to reclaim"));
}

#[test]
fn argument_errors_are_one_line_with_exit_2() {
    for args in [
        vec![],
        vec!["inspect"],
        vec!["frobnicate"],
        vec!["inspec"],
        vec!["inspect", "memory:", "log"],
        vec!["inspect", "memory:", "--limit", "3", "sessions"],
        vec!["redrive", "memory:", "s", "c", "x", "--retry"],
        vec!["redrive", "memory:", "s", "c", "1"],
        vec!["redrive", "memory:", "s", "c", "1", "--retry", "--skip"],
        vec!["bench", "--json", "--csv"],
        vec!["bench", "--seconds", "0"],
        vec!["bench", "--sessions", "0"],
        vec!["check", "--onyl", "x", "memory:"],
        vec!["clear", "memory:", "s", "extra"],
        vec!["inspect", "memory:", "log", "s", "--after", "-1"],
    ] {
        let err = one_line_error(&args, &a2(&args));
        assert!(!err.contains("Usage:"), "{err}");
    }
    let err = one_line_error(&["check", "--onyl"], &a2(&["check", "--onyl"]));
    assert!(err.contains("--only"), "the tip is kept: {err}");
    let err = fails(&["inspect", "memory:", "log"], "<SESSION>");
    assert!(err.contains("usage: a2-store inspect"), "{err}");
    assert!(ok(&["--version"]).contains("a2-store"));
    assert!(ok(&["--help"]).contains("A2_STORE_URL"));
}

#[test]
fn the_url_comes_from_a2_store_url_when_omitted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env.db");
    seed(&path);
    let url = format!("sqlite:{}", path.display());
    let output = a2_with_url(&url, &["inspect", "sessions", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json_of(&stdout(&output))[0]["session_id"], "s1");
    let output = a2_with_url(&url, &["inspect", "log", "s1"]);
    assert!(stdout(&output).contains("m1"), "{}", stderr(&output));
    // A URL on the command line wins over the variable.
    let output = a2_with_url("memory:", &["inspect", &url, "sessions"]);
    assert!(stdout(&output).contains("s2"), "{}", stderr(&output));
    let output = a2_with_url(&url, &["clear", "nosuch", "--yes"]);
    let err = one_line_error(&["clear"], &output);
    assert!(
        err.contains("no session 'nosuch'") && err.contains(&url),
        "{err}"
    );
    let output = a2_with_url(&url, &["reclaim", "s2"]);
    assert!(
        stdout(&output).contains("nothing to reclaim"),
        "{}",
        stderr(&output)
    );
    let output = a2_with_url("memory:", &["check", "--only", "append", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json_of(&stdout(&output))["backend"], "memory");
    // Still one line when the variable does not help.
    let output = a2_with_url(&url, &["inspect", "log"]);
    assert!(one_line_error(&["inspect", "log"], &output).contains("<SESSION>"));
}

#[test]
fn ids_with_control_characters_are_escaped_in_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evil.db");
    let url = format!("sqlite:{}", path.display());
    runtime().block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        store
            .append(
                "evil\nid",
                vec![NewEvent::new("msg\tx", json!(1)).with_id("e\n1")],
                Default::default(),
            )
            .await
            .unwrap();
    });
    let sessions = ok(&["inspect", &url, "sessions"]);
    assert_eq!(sessions.lines().count(), 3, "{sessions}");
    assert!(sessions.contains("evil\\nid"), "{sessions}");
    let log = ok(&["inspect", &url, "log", "evil\nid"]);
    assert_eq!(log.lines().count(), 3, "{log}");
    assert!(log.contains("msg\\tx") && log.contains("e\\n1"), "{log}");
    let json = json_of(&ok(&["inspect", &url, "sessions", "--json"]));
    assert_eq!(
        json[0]["session_id"], "evil\nid",
        "JSON keeps the id as it is"
    );
    let err = fails(
        &["clear", &url, "no\nsuch", "--yes"],
        "no session 'no\\nsuch'",
    );
    assert!(!err.contains("no such"), "{err}");
}

#[test]
fn check_streams_each_case_and_reports_milliseconds() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(["check", "memory:"])
        .env_remove("A2_STORE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.starts_with("memory::") && first.contains(" ... "),
        "{first}"
    );
    // The first case is out while the suite still runs.
    assert!(
        child.try_wait().unwrap().is_none(),
        "printed only at the end"
    );
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success());
    let last = rest.last().unwrap();
    assert!(last.contains(" 0 failed"), "{last}");
    assert!(rest.len() > 10, "{rest:?}");

    let report = json_of(&ok(&["check", "memory:", "--only", "append", "--json"]));
    let case = &report["cases"][0];
    assert!(case["duration_ms"].as_f64().unwrap() >= 0.0, "{report}");
    assert!(case.get("duration").is_none(), "{report}");
}

/// A secret in every form a store URL or connection string can carry one
/// never shows in stdout or stderr, and the one-line error still says what
/// is wrong (`needle`).
#[test]
fn secrets_never_show_in_any_url_form() {
    const SECRET: &str = "Pl4nted";
    // Against a closed port: opening fails, after parsing succeeded.
    let refused = "connecting to PostgreSQL";
    let cases = [
        ("postgres://app:Pl4nted word@127.0.0.1:1/x", refused),
        ("postgres://app:Pl4nted\tword@127.0.0.1:1/x", refused),
        ("postgres://app:a Pl4nted b@127.0.0.1:1/x?connect_timeout=2", refused),
        ("postgres://app:it's Pl4nted@127.0.0.1:1/x", refused),
        (
            "postgres://app:Pl4nted@127.0.0.1:1,127.0.0.1:1/x?target_session_attrs=read-write&connect_timeout=2",
            refused,
        ),
        ("postgres://app:Pl4nted%20%26x@127.0.0.1:1/x", refused),
        ("postgres://app@127.0.0.1:1/x?password=Pl4nted word&connect_timeout=2", refused),
        ("postgres://app@127.0.0.1:1/x?pass%77ord=Pl4nted", refused),
        // The driver knows `password` only in lower case.
        ("postgres://app@127.0.0.1:1/x?PASSWORD=Pl4nted", "does not know"),
        // The driver refuses these: a password split at an unencoded `&`.
        ("postgres://app@127.0.0.1:1/x?password=a&Pl4nted=b", "does not know"),
        ("postgres://app@127.0.0.1:1/x?password=a&Pl4nted", "has no `=`"),
        ("postgres://app:Pl4nted@127.0.0.1:1/x?sslpassword=Pl4nted", "sslpassword"),
        // Not store URLs: never repeated.
        ("host=127.0.0.1 user=app password=Pl4nted", "key=value connection string"),
        ("host=127.0.0.1 password='a Pl4nted \\' b'", "key=value connection string"),
        ("host=h PGPASSWORD=Pl4nted", "key=value connection string"),
        ("Pl4nted", "no scheme"),
        ("mysql://root:Pl4nted@127.0.0.1/db", "unknown store URL scheme 'mysql'"),
        ("Postgres://app:Pl4nted@127.0.0.1:1/x", "lowercase"),
        ("postgres:app:Pl4nted word@127.0.0.1:1/x", "not a PostgreSQL URL"),
        ("postgres://app:Pl4nted word@127.0.0.1:1/x?pool_size=0", "at least 1"),
        (
            "postgres://app:Pl4nted@127.0.0.1:1/x?network_timeout_ms=0",
            "network_timeout_ms=0",
        ),
    ];
    for (url, needle) in cases {
        for args in [
            vec!["inspect", url, "sessions"],
            vec!["inspect", url, "cursors", "s"],
            vec!["clear", url, "s", "--if-last-index", "1"],
            vec!["check", url, "--only", "append_assigns"],
        ] {
            let output = a2(&args);
            let (out, err) = (stdout(&output), stderr(&output));
            assert!(
                !out.contains(SECRET) && !err.contains(SECRET),
                "{args:?} shows the secret:\nstdout: {out}\nstderr: {err}"
            );
            assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            if args[0] == "inspect" {
                assert!(
                    err.contains(needle),
                    "{args:?}: expected '{needle}' in {err}"
                );
            }
        }
        // Through A2_STORE_URL too.
        let output = a2_with_url(url, &["inspect", "sessions"]);
        let err = stderr(&output);
        assert!(!err.contains(SECRET), "A2_STORE_URL={url}: {err}");
        assert!(
            err.contains(needle),
            "A2_STORE_URL: expected '{needle}' in {err}"
        );
    }
    // With no secret in the URL the driver's complaint names the key.
    fails(
        &[
            "inspect",
            "postgres://app@127.0.0.1:1/x?bogus=1",
            "sessions",
        ],
        "unknown option `bogus`",
    );
}

/// `A2_POSTGRES_URL` with a closed port (127.0.0.1:1) as its first host.
fn with_closed_first_host(url: &str) -> String {
    let start = url.find("://").map_or(0, |s| s + 3);
    let authority_end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |e| start + e);
    let host = url[start..authority_end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    format!("{}127.0.0.1:1,{}", &url[..host], &url[host..])
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn multi_host_urls_connect_to_the_first_host_that_answers() {
    let Some(url) = postgres::server_url("multi_host_urls") else {
        return;
    };
    let scratch = a2_store::postgres::ScratchSchemas::new(url.clone(), "a2_clitest_");
    let schema = scratch.fresh_schema().unwrap();
    let multi = with_closed_first_host(&url);
    assert!(multi.contains("127.0.0.1:1,"), "{multi}");
    let join = if multi.contains('?') { '&' } else { '?' };
    let store_url = format!(
        "{multi}{join}target_session_attrs=read-write&connect_timeout=2&network_timeout_ms=3000&schema={schema}&pool_size=2"
    );
    let parsed = a2_store::StoreUrl::parse(&store_url).unwrap();
    assert_eq!(
        a2_store::StoreUrl::parse(&parsed.to_string()).unwrap(),
        parsed
    );
    runtime().block_on(async {
        let store = a2_store::open(&store_url, OpenOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", a2_store::StoreUrl::redact(&store_url)));
        seed_store(store.as_ref()).await;
        let rows = store.read("s2", Default::default()).await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
    });
    // A read-only open starts its sessions read-only, which
    // `target_session_attrs=read-write` would refuse: inspect without it.
    let read_url = format!("{multi}{join}connect_timeout=2&schema={schema}");
    let sessions = json_of(&ok(&["inspect", &read_url, "sessions", "--json"]));
    assert_eq!(sessions.as_array().unwrap().len(), 2, "{sessions}");
    let cleared = ok(&["clear", &store_url, "s2", "--if-last-index", "1"]);
    assert!(cleared.contains("marker at index 2"), "{cleared}");
    // Only the closed host: the error says the connection failed.
    let closed = format!(
        "postgres://postgres@127.0.0.1:1,127.0.0.1:1/test?target_session_attrs=read-write&connect_timeout=2&schema={schema}"
    );
    fails(
        &["inspect", &closed, "sessions"],
        "connecting to PostgreSQL",
    );
    runtime().block_on(scratch.drop_all()).unwrap();
}

/// Two keys, `k2` current, as `keys=file:` and `--keys file:` read them.
const KEYS: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\nk2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n";

/// A SQLite file whose session `s1` holds, through the payload layers: a
/// small payload encrypted under `k2`, a large one encrypted and offloaded
/// to `objects/`, and a payload encrypted under `k3`, a key the operator
/// is not given. Returns (url, key file, offload directory).
fn seed_layered(dir: &Path) -> (String, String, String) {
    let db = dir.join("app.db");
    let keys = dir.join("keys");
    let other = dir.join("other-keys");
    let objects = dir.join("objects");
    std::fs::write(&keys, KEYS).unwrap();
    std::fs::write(&other, "k3:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=\n").unwrap();
    let url = format!("sqlite:{}", db.display());
    let layered = |keys: &Path| {
        format!(
            "{url}?keys=file:{}&offload={}&offload_threshold=256",
            keys.display(),
            objects.display()
        )
    };
    runtime().block_on(async {
        let store = a2_store::open(&layered(&keys), OpenOptions::default())
            .await
            .unwrap();
        let events = vec![
            NewEvent::new("msg", json!({"text": "the small secret"})).with_id("m1"),
            NewEvent::new("tool.result", json!({"body": "x".repeat(4096)})).with_id("m2"),
        ];
        store
            .append("s1", events, Default::default())
            .await
            .unwrap();
        drop(store);
        let store = a2_store::open(&layered(&other), OpenOptions::default())
            .await
            .unwrap();
        let event = NewEvent::new("msg", json!({"text": "another secret"})).with_id("m3");
        store
            .append("s1", vec![event], Default::default())
            .await
            .unwrap();
    });
    (
        url,
        format!("file:{}", keys.display()),
        objects.display().to_string(),
    )
}

#[test]
fn inspect_log_decrypts_only_with_keys_and_fetches_only_with_the_offload_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (url, keys, objects) = seed_layered(dir.path());

    // Nothing given: every payload says what it is, none is shown.
    let log = ok(&["inspect", &url, "log", "s1"]);
    assert_eq!(log.matches("encrypted (key k2)").count(), 1, "{log}");
    assert!(log.contains("encrypted (key k3)"), "{log}");
    assert!(log.contains("offloaded ("), "{log}");
    assert!(log.contains("bytes, sha256 "), "{log}");
    assert!(!log.contains("secret") && !log.contains("$a2enc"), "{log}");

    // Keys: k2's payloads decrypted, k3's still sealed, the listing whole.
    let log = ok(&["inspect", &url, "log", "s1", "--keys", &keys]);
    assert!(log.contains("the small secret"), "{log}");
    assert!(log.contains("encrypted (key k3)"), "{log}");
    assert!(log.contains("offloaded ("), "{log}");

    // The offload directory too: the large payload fetched and decrypted.
    let log = ok(&[
        "inspect",
        &url,
        "log",
        "s1",
        "--keys",
        &keys,
        "--offload",
        &objects,
    ]);
    assert!(log.contains("xxxxxxxx"), "{log}");
    assert!(!log.contains("offloaded ("), "{log}");

    // The directory alone: the object holds ciphertext, shown as such.
    let log = ok(&["inspect", &url, "log", "s1", "--offload", &objects]);
    assert_eq!(log.matches("encrypted (key k2)").count(), 2, "{log}");

    // The URL's own keys= work the same; JSON keeps the stored envelope.
    let layered = format!("{url}?{}", keys.replacen("file:", "keys=file:", 1));
    let rows = json_of(&ok(&["inspect", &layered, "log", "s1", "--json"]));
    assert_eq!(rows[0]["payload"], json!({"text": "the small secret"}));
    assert_eq!(rows[2]["payload"]["kid"], "k3");

    // The conventional variable, through --keys env:VAR.
    let output = Command::new(env!("CARGO_BIN_EXE_a2-store"))
        .args(["inspect", &url, "log", "s1", "--keys", "env:A2_STORE_KEYS"])
        .env_remove("A2_STORE_URL")
        .env("A2_STORE_KEYS", KEYS.replace('\n', ","))
        .output()
        .unwrap();
    assert!(
        stdout(&output).contains("the small secret"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn reencrypt_moves_old_rows_to_the_current_key_so_the_old_key_can_go() {
    let dir = tempfile::tempdir().unwrap();
    let (url, keys, objects) = seed_layered(dir.path());
    let every = dir.path().join("every-key");
    // k3 first: the last entry (k2) stays current.
    std::fs::write(
        &every,
        format!("k3:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=\n{KEYS}"),
    )
    .unwrap();
    let every = format!("file:{}", every.display());

    // Without keys there is nothing to encrypt with: refused, nothing changed.
    fails(&["reencrypt", &url, "--offload", &objects], "--keys");
    fails(
        &["reencrypt", &url, "--keys", &every, "--session", "nope"],
        "no session 'nope'",
    );

    let done = json_of(&ok(&[
        "reencrypt",
        &url,
        "--keys",
        &every,
        "--offload",
        &objects,
        "--session",
        "s1",
        "--page",
        "2",
        "--json",
    ]));
    assert_eq!(done["key"], "k2");
    assert_eq!(
        (done["events"].as_u64(), done["already_current"].as_u64()),
        (Some(1), Some(2))
    );

    // k3 is no longer needed: k1 and k2 read every payload.
    let log = ok(&[
        "inspect",
        &url,
        "log",
        "s1",
        "--keys",
        &keys,
        "--offload",
        &objects,
    ]);
    assert!(log.contains("another secret"), "{log}");
    assert!(!log.contains("encrypted (key"), "{log}");

    // A second run over every session finds nothing left to do.
    let again = ok(&["reencrypt", &url, "--keys", &every, "--offload", &objects]);
    assert!(
        again.starts_with("re-encrypted 0 event payload(s)"),
        "{again}"
    );
    assert!(again.contains("3 row(s) were already under it"), "{again}");
}

#[test]
fn inspect_keys_errors_are_one_line_and_never_show_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let (url, keys, _objects) = seed_layered(dir.path());
    let key = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI";
    let pasted = format!("k2:{key}=");
    let line = fails(&["inspect", &url, "log", "s1", "--keys", &pasted], "--keys");
    assert!(!line.contains(key), "{line}");
    assert!(line.contains("env:VAR or file:PATH"), "{line}");
    let in_url = format!("{url}?keys={pasted}");
    let line = fails(&["inspect", &in_url, "log", "s1"], "keys=");
    assert!(!line.contains(key), "{line}");
    fails(
        &[
            "inspect",
            &url,
            "log",
            "s1",
            "--keys",
            "env:A2_CLI_TEST_NO_SUCH_VAR",
        ],
        "A2_CLI_TEST_NO_SUCH_VAR is not set",
    );
    fails(
        &["inspect", &url, "log", "s1", "--offload", "/no/such/dir"],
        "no such directory",
    );
    let twice = format!("{url}?keys={keys}");
    fails(
        &["inspect", &twice, "log", "s1", "--keys", &keys],
        "give it once",
    );
    fails(&["check", &twice], "runs on the backend alone");
}
