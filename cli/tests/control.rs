//! The operator's controls through the real binary, against SQLite files
//! and PostgreSQL (a fresh schema per test, when `A2_POSTGRES_URL` is set):
//! `pause`/`resume` and `inspect paused` (and the pause on cursor views),
//! `reschedule`, `fork` (and `forked from` in `inspect sessions`),
//! `redrive --lane`, and retention: `delete` and `prune`.

#[path = "fixture/postgres.rs"]
mod postgres;
#[path = "fixture/seed.rs"]
mod seed;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use a2_store::{
    AppendOptions, ClaimRequest, Clock, FailRequest, ManualClock, NewEvent, OpenOptions,
    SystemClock, Target,
};
use serde_json::{json, Value};

use seed::{seed_quiet, seed_store, MINUTE};

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

fn ok(args: &[&str]) -> String {
    let output = a2(args);
    let (out, err) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}\nstdout: {out}\nstderr: {err}"
    );
    out
}

fn json_ok(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{out}"))
}

/// Asserts status 2 with one line on stderr containing `needle`.
fn fails(args: &[&str], needle: &str) -> String {
    let output = a2(args);
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}\nstderr: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: one line expected:\n{err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: '{needle}' missing in {err}"
    );
    err
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Runs `test` on a new SQLite file.
fn on_sqlite(test: fn(&str)) {
    let dir = tempfile::tempdir().unwrap();
    test(&format!(
        "sqlite:{}",
        dir.path().join("control.db").display()
    ));
}

/// Runs `test` on a fresh PostgreSQL schema (a test built without
/// `A2_POSTGRES_URL` is ignored, so this only returns early when the
/// variable was unset after the build).
fn on_postgres(name: &str, test: fn(&str)) {
    if let Some(postgres::Scratch {
        schemas: _schemas,
        url,
        ..
    }) = postgres::scratch(name)
    {
        test(&url);
    }
}

/// Session `chat` at `url`: two messages on `agent/main` (the second
/// scheduled an hour from now) and a `ping` for `notifier`.
fn seeded(url: &str) -> String {
    let url = url.to_owned();
    block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        let events = vec![
            NewEvent::new("msg", json!(1)).with_target(Target::lane("agent", "main")),
            NewEvent::new("msg", json!(2))
                .with_target(Target::lane("agent", "main").delayed(Duration::from_secs(3600))),
            NewEvent::new("ping", json!(3)).with_target(Target::event("notifier")),
        ];
        store
            .append("chat", events, AppendOptions::default())
            .await
            .unwrap();
    });
    url
}

fn cursor<'a>(cursors: &'a Value, consumer: &str) -> &'a Value {
    cursors
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["consumer"] == consumer)
        .unwrap_or_else(|| panic!("no cursor of {consumer} in {cursors}"))
}

#[test]
fn pause_and_resume_show_in_the_views_on_sqlite() {
    on_sqlite(pause_and_resume);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn pause_and_resume_show_in_the_views_on_postgres() {
    on_postgres(
        "pause_and_resume_show_in_the_views_on_postgres",
        pause_and_resume,
    );
}

fn pause_and_resume(url: &str) {
    let url = seeded(url);
    let before = SystemClock.now_ms();
    let pause = json_ok(&[
        "pause",
        &url,
        "agent",
        "--session",
        "chat",
        "--for",
        "1h",
        "--json",
    ]);
    assert_eq!(pause["consumer"], "agent");
    assert_eq!(pause["session_id"], "chat");
    let until = pause["until_ms"].as_i64().unwrap();
    assert!(until >= before + 3_600_000, "{pause}");

    let out = ok(&["pause", &url, "billing"]);
    assert!(out.contains("in every session until resumed"), "{out}");

    let listed = json_ok(&["inspect", &url, "paused", "--json"]);
    let pauses = listed["pauses"].as_array().unwrap();
    let scopes: Vec<(&str, Option<&str>)> = pauses
        .iter()
        .map(|p| (p["consumer"].as_str().unwrap(), p["session_id"].as_str()))
        .collect();
    assert_eq!(scopes, vec![("agent", Some("chat")), ("billing", None)]);
    let table = ok(&["inspect", &url, "paused"]);
    assert_eq!(table.lines().count(), 2 + 2, "{table}");
    assert!(table.contains("billing") && table.contains('*'), "{table}");

    let cursors = json_ok(&["inspect", &url, "--json", "cursors", "chat"]);
    assert_eq!(cursor(&cursors, "agent")["pause"]["until_ms"], until);
    assert!(cursor(&cursors, "notifier").get("pause").is_none());
    let table = ok(&["inspect", &url, "cursors", "chat"]);
    assert!(table.contains("here until"), "{table}");

    // Paused heads are not claimed: only notifier's ping is handed out.
    let claimed = block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        store
            .claim_available(ClaimRequest::new("chat", "w", Duration::from_secs(60)))
            .await
            .unwrap()
            .into_heads()
    });
    let consumers: Vec<&str> = claimed.iter().map(|h| h.consumer.as_str()).collect();
    assert_eq!(consumers, vec!["notifier"]);

    let out = ok(&["resume", &url, "agent", "--session", "chat"]);
    assert!(
        out.starts_with("resumed 'agent' in session 'chat'"),
        "{out}"
    );
    let out = ok(&["resume", &url, "agent", "--session", "chat"]);
    assert!(out.starts_with("nothing to resume"), "{out}");
    let done = json_ok(&["resume", &url, "billing", "--json"]);
    assert_eq!(done["resumed"], true);
    let listed = json_ok(&["inspect", &url, "paused", "--json"]);
    assert_eq!(listed["pauses"], json!([]));
    assert!(ok(&["inspect", &url, "paused"]).contains("no consumer is paused"));

    // Refused by the store: no cursor of that consumer there, an end in the past.
    fails(
        &["pause", &url, "nobody", "--session", "chat"],
        "pausing 'nobody' in session 'chat'",
    );
    fails(
        &["pause", &url, "agent", "--until-ms", "1"],
        "not in the future",
    );
    fails(
        &["pause", &url, "agent", "--until-ms", "1", "--for", "1h"],
        "cannot be used with",
    );
}

#[test]
fn reschedule_moves_cancels_and_refuses_what_ran_on_sqlite() {
    on_sqlite(reschedule);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn reschedule_moves_cancels_and_refuses_what_ran_on_postgres() {
    on_postgres(
        "reschedule_moves_cancels_and_refuses_what_ran_on_postgres",
        reschedule,
    );
}

fn reschedule(url: &str) {
    let url = seeded(url);
    // Index 2 waits on the lane behind index 1: move it, then cancel it.
    let moved = json_ok(&[
        "reschedule",
        &url,
        "chat",
        "agent",
        "2",
        "--lane",
        "main",
        "--in",
        "2h",
        "--json",
    ]);
    assert_eq!(moved["result"]["outcome"], "rescheduled");
    assert!(moved["result"]["not_before"].as_i64().unwrap() > SystemClock.now_ms());
    let out = ok(&[
        "reschedule",
        &url,
        "chat",
        "agent",
        "2",
        "--lane",
        "main",
        "--cancel",
    ]);
    assert!(
        out.starts_with("cancelled agent lane main at index 2"),
        "{out}"
    );
    fails(
        &[
            "reschedule",
            &url,
            "chat",
            "agent",
            "2",
            "--lane",
            "main",
            "--cancel",
        ],
        "has moved past it",
    );
    // The notifier's ping is scheduled later, then made claimable now.
    let out = ok(&["reschedule", &url, "chat", "notifier", "3", "--at-ms", "1"]);
    assert!(out.contains("claimable now"), "{out}");
    // A claimed head has started: nothing changes.
    block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        let heads = store
            .claim_available(ClaimRequest::new("chat", "w", Duration::from_secs(600)))
            .await
            .unwrap()
            .into_heads();
        assert_eq!(heads.len(), 2, "{heads:?}");
    });
    fails(
        &[
            "reschedule",
            &url,
            "chat",
            "agent",
            "1",
            "--lane",
            "main",
            "--in",
            "1m",
        ],
        "already been claimed",
    );
    // An index nothing was ever written at.
    fails(
        &["reschedule", &url, "chat", "agent", "9", "--cancel"],
        "rescheduling agent (event cursor) at index 9",
    );
}

#[test]
fn fork_copies_and_is_listed_with_its_origin_on_sqlite() {
    on_sqlite(fork);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn fork_copies_and_is_listed_with_its_origin_on_postgres() {
    on_postgres(
        "fork_copies_and_is_listed_with_its_origin_on_postgres",
        fork,
    );
}

fn fork(url: &str) {
    let url = seeded(url);
    let fork = json_ok(&["fork", &url, "chat", "chat-b", "--through", "2", "--json"]);
    assert_eq!(fork["copied"], 2);
    assert_eq!(fork["session"]["session_id"], "chat-b");
    assert_eq!(
        fork["session"]["forked_from"],
        json!({"session_id": "chat", "index": 2})
    );
    let out = ok(&["fork", &url, "chat", "chat-c"]);
    assert!(
        out.starts_with("forked session 'chat' through index 3 into 'chat-c': 3 row(s) copied"),
        "{out}"
    );
    let sessions = ok(&["inspect", &url, "sessions"]);
    assert!(
        sessions.lines().next().unwrap().contains("forked from"),
        "{sessions}"
    );
    assert!(sessions.contains("chat through 2"), "{sessions}");
    let log = json_ok(&["inspect", &url, "--json", "log", "chat-b"]);
    assert_eq!(log.as_array().unwrap().len(), 2);
    // No cursors came along.
    assert_eq!(
        json_ok(&["inspect", &url, "--json", "cursors", "chat-b"]),
        json!([])
    );
    fails(
        &["fork", &url, "chat", "chat-b"],
        "forking session 'chat' into 'chat-b'",
    );
    fails(
        &["fork", &url, "chat", "chat-d", "--through", "9"],
        "head is 3",
    );
}

#[test]
fn redrive_names_the_lane_on_sqlite() {
    on_sqlite(redrive_lane);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn redrive_names_the_lane_on_postgres() {
    on_postgres("redrive_names_the_lane_on_postgres", redrive_lane);
}

fn redrive_lane(url: &str) {
    let url = url.to_owned();
    block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        let event = NewEvent::new("msg", json!(1))
            .with_target(Target::event("c"))
            .with_target(Target::lane("c", "L"));
        store
            .append("s", vec![event], AppendOptions::default())
            .await
            .unwrap();
        let heads = store
            .claim_available(ClaimRequest::new("s", "w", Duration::from_secs(60)))
            .await
            .unwrap()
            .into_heads();
        for head in &heads {
            let fail = FailRequest::for_head(head, "boom", 1);
            store.fail_attempt(fail).await.unwrap();
        }
        assert_eq!(store.dead_letters("s").await.unwrap().len(), 2);
    });
    let done = json_ok(&[
        "redrive", &url, "s", "c", "1", "--lane", "L", "--retry", "--json",
    ]);
    assert_eq!(
        (done["redriven"].clone(), done["lane"].clone()),
        (json!(true), json!("L"))
    );
    let dead = json_ok(&["inspect", &url, "--json", "dead-letters", "s"]);
    let lanes: Vec<&Value> = dead
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["lane"])
        .collect();
    assert_eq!(
        lanes,
        vec![&Value::Null],
        "the event cursor's dead letter is left"
    );
    fails(
        &["redrive", &url, "s", "c", "1", "--lane", "L", "--retry"],
        "on lane 'L'",
    );
    // --lane with --all: only that lane's heads (none left).
    let out = ok(&[
        "redrive",
        &url,
        "--all",
        "--lane",
        "L",
        "--skip",
        "--dry-run",
    ]);
    assert!(out.contains("nothing to redrive"), "{out}");
    let done = json_ok(&["redrive", &url, "--all", "--skip", "--yes", "--json"]);
    assert_eq!(done["redriven"], 1);
    assert_eq!(done["items"][0]["outcome"], "skipped");
    assert!(block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        store.dead_letters("s").await.unwrap().is_empty()
    }));
}

/// The store at `url` seeded on a clock two hours behind: 12 quiet
/// sessions `q-*` (t0-10m; `q-000000` dead-lettered, the others done),
/// then [`seed_store`]'s `s0`–`s4` (t0 to t0+100m: dead letters, a
/// claimable message in `s2`, leases held for a day in `s3` and `s4`).
/// With `--idle 45m`, `s0`, `s1`, `s2` and the `q-*` are idle; `s3` and
/// `s4` are not.
fn seeded_for_retention(url: &str) -> String {
    let url = url.to_owned();
    let t0 = SystemClock.now_ms() - 120 * MINUTE;
    block_on(async {
        let clock = Arc::new(ManualClock::new(t0 - 10 * MINUTE));
        let options = OpenOptions::default().with_shared_clock(clock.clone());
        let store = a2_store::open(&url, options).await.unwrap();
        seed_quiet(store.as_ref(), &clock, 12, false).await;
        seed_store(store.as_ref(), &clock, t0).await;
    });
    url
}

fn session_ids(url: &str) -> Vec<String> {
    let sessions = json_ok(&["inspect", url, "sessions", "--json"]);
    sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    let list = value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"));
    list.iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn delete_previews_asks_and_removes_a_session_on_sqlite() {
    on_sqlite(delete);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn delete_previews_asks_and_removes_a_session_on_postgres() {
    on_postgres(
        "delete_previews_asks_and_removes_a_session_on_postgres",
        delete,
    );
}

fn delete(url: &str) {
    let url = seeded_for_retention(url);
    fails(&["delete", &url, "nope", "--yes"], "no session 'nope'");
    // The test's stdin is not a terminal: no one can confirm.
    let refused = fails(&["delete", &url, "s3"], "pass --yes");
    assert!(refused.contains("nothing deleted"), "{refused}");
    let in_use = a2(&["delete", &url, "s3", "--yes"]);
    let (out, err) = (text(&in_use.stdout), text(&in_use.stderr));
    assert_eq!(in_use.status.code(), Some(2), "{err}");
    // The preview came first: the head, its events, the work and who holds it.
    assert!(out.contains("session 's3' (incarnation "), "{out}");
    assert!(out.contains("head 2, 2 event(s) stored"), "{out}");
    assert!(
        out.contains("head 1 of consumer 'agent' lane 'L2' leased by 'w' until"),
        "{out}"
    );
    assert!(out.contains("without --force"), "{out}");
    assert!(
        err.contains("session in use") && err.contains("--force"),
        "{err}"
    );
    fails(
        &[
            "delete",
            &url,
            "s3",
            "--yes",
            "--force",
            "--if-last-index",
            "9",
        ],
        "ends at index 2, not 9",
    );
    let before = json_ok(&["inspect", &url, "sessions", "--json"]);
    let incarnation = |sessions: &Value| {
        sessions
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session_id"] == "s3")
            .map(|s| s["incarnation"].clone())
    };
    let old = incarnation(&before).unwrap();
    let deleted = json_ok(&[
        "delete",
        &url,
        "s3",
        "--yes",
        "--force",
        "--if-last-index",
        "2",
        "--json",
    ]);
    assert_eq!(deleted["outcome"], "deleted");
    assert_eq!(deleted["removed"]["head"], 2);
    assert_eq!(deleted["removed"]["events"], 2);
    assert_eq!(deleted["removed"]["ended"], 2);
    assert_eq!(deleted["removed"]["incarnation"], old);
    let work = deleted["preview"]["with_work"].as_array().unwrap();
    assert_eq!(work.len(), 2, "{deleted}");
    assert!(work
        .iter()
        .any(|w| w["holder"] == "w" && w["state"] == "leased"));
    assert!(!session_ids(&url).contains(&"s3".to_owned()));
    fails(&["delete", &url, "s3", "--yes"], "no session 's3'");
    // A dead letter never keeps a session from a delete; the text names what went.
    let out = ok(&["delete", &url, "s0", "--yes"]);
    assert!(out.contains("1 dead letter(s)"), "{out}");
    assert!(
        out.contains("deleted session 's0' (incarnation")
            && out.contains("0 head(s) with work ended"),
        "{out}"
    );
    // The id can be used again, by a new incarnation.
    block_on(async {
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        let note = NewEvent::new("note", json!(null));
        store
            .append("s3", vec![note], AppendOptions::default())
            .await
            .unwrap();
    });
    let again = incarnation(&json_ok(&["inspect", &url, "sessions", "--json"])).unwrap();
    assert_ne!(again, old);
    let log = json_ok(&["inspect", &url, "--json", "log", "s3"]);
    assert_eq!(log.as_array().unwrap().len(), 1, "{log}");
}

#[test]
fn prune_pages_through_idle_sessions_on_sqlite() {
    on_sqlite(prune);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn prune_pages_through_idle_sessions_on_postgres() {
    on_postgres("prune_pages_through_idle_sessions_on_postgres", prune);
}

fn prune(url: &str) {
    let url = seeded_for_retention(url);
    let all = session_ids(&url);
    assert_eq!(all.len(), 17);
    let done: Vec<String> = (1..12).map(|n| format!("q-{n:06}")).collect();
    let dry = json_ok(&[
        "prune",
        &url,
        "--idle",
        "45m",
        "--limit",
        "5",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(strings(&dry["sessions"]), done, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted"], 0);
    // 12 quiet sessions and s1, s2, s0: idle; 15 examined, 5 a page.
    assert_eq!(dry["examined"], 15, "{dry}");
    assert_eq!(dry["kept"], 4, "{dry}");
    assert!(dry["pages"].as_u64().unwrap() >= 3, "{dry}");
    assert_eq!(session_ids(&url), all, "a dry run deleted something");
    let out = ok(&["prune", &url, "--idle", "45m", "--limit", "5"]);
    assert!(out.contains("deleted q-000001\n"), "{out}");
    assert!(
        out.contains("pruned 11 of 15 session(s) idle for 45m in "),
        "{out}"
    );
    assert!(
        out.contains("4 kept (work left or a dead letter; --include-dead-letters"),
        "{out}"
    );
    let left = session_ids(&url);
    assert_eq!(left, ["q-000000", "s0", "s1", "s2", "s3", "s4"]);
    // Dead letters go only when asked; s2 still has a message waiting.
    let pruned = json_ok(&[
        "prune",
        &url,
        "--idle",
        "45m",
        "--include-dead-letters",
        "--json",
    ]);
    assert_eq!(
        strings(&pruned["sessions"]),
        ["q-000000", "s1", "s0"],
        "{pruned}"
    );
    assert_eq!(pruned["deleted"], 3);
    assert_eq!(session_ids(&url), ["s2", "s3", "s4"]);
    let out = ok(&["prune", &url, "--idle", "45m"]);
    assert!(out.contains("pruned 0 of 1 session(s)"), "{out}");
    fails(&["prune", &url], "--idle");
    fails(
        &["prune", &url, "--idle", "1h", "--limit", "5000"],
        "from 1 to 1000",
    );
}
