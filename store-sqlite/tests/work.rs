//! The work index across sessions, beyond the conformance suite: a
//! database written before the index opens with its pending work found,
//! and a claimer waiting for work wakes on another process's append.
//!
//! The child process is this test binary re-executed with `ROLE` set; the
//! test function named on the command line takes the child role.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2_store_api::{
    ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult, ConsumerDeclaration, FailRequest,
    ListWork, ManualClock, NewEvent, SessionWork, Store, Target,
};
use a2_store_sqlite::{SqliteOptions, SqliteStore, SCHEMA_VERSION};
use serde_json::json;

#[path = "common/schema.rs"]
mod schema;

const ROLE: &str = "A2_SQLITE_WORK_CHILD";
const DB: &str = "A2_SQLITE_WORK_DB";
const STAMP: &str = "A2_SQLITE_WORK_STAMP";

fn work(holder: &str) -> ClaimWorkRequest {
    ClaimWorkRequest::new(holder, vec![ConsumerDeclaration::targeted("agent")], 1_000)
}

fn listing() -> ListWork {
    ListWork {
        consumers: vec!["agent".into()],
        ..ListWork::default()
    }
}

fn targeted(n: u64) -> NewEvent {
    NewEvent::new("msg", json!(n)).with_target(Target::event("agent"))
}

fn served(result: &ClaimWorkResult) -> Vec<String> {
    result
        .heads()
        .map(|(session, head)| format!("{session} #{}", head.event.index))
        .collect()
}

/// Turns the database back into the schema version 1 wrote: no work
/// index, the pending-head index without the expiry.
fn downgrade_to_version_1(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    schema::undo_version_4(&conn);
    conn.execute_batch(
        "DROP TABLE pauses;
         DROP INDEX cursors_dead_all;
         ALTER TABLE lane_queue DROP COLUMN not_before;
         ALTER TABLE sessions DROP COLUMN forked_from;
         ALTER TABLE sessions DROP COLUMN forked_through;
         DROP TABLE work;
         DROP INDEX cursors_pending;
         CREATE INDEX cursors_pending ON cursors (sid, consumer)
             WHERE head IS NOT NULL AND failed_at IS NULL;
         PRAGMA user_version = 1;",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_before_the_work_index_finds_its_pending_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let clock = ManualClock::new(1_000);
    let options = || SqliteOptions {
        clock: Arc::new(clock.clone()),
        ..SqliteOptions::default()
    };
    {
        let store = SqliteStore::open(&path, options()).unwrap();
        for session in ["claimable", "busy", "dead"] {
            store
                .append(session, vec![targeted(1)], Default::default())
                .await
                .unwrap();
        }
        // Written by version 1, so nothing of this reaches a work row the
        // downgrade keeps.
        for session in ["busy", "dead"] {
            let claimed = store
                .claim_available(ClaimRequest {
                    session_id: session.into(),
                    holder: "old".into(),
                    ttl_ms: Some(500),
                    ..ClaimRequest::default()
                })
                .await
                .unwrap();
            assert!(
                matches!(claimed, ClaimResult::Claimed { .. }),
                "{claimed:?}"
            );
        }
        store
            .fail_attempt(FailRequest {
                incarnation: None,
                session_id: "dead".into(),
                consumer: "agent".into(),
                lane: None,
                index: 1,
                attempt: 1,
                error: "boom".into(),
                max_failures: Some(1),
                retry_after_ms: None,
            })
            .await
            .unwrap();
    }
    downgrade_to_version_1(&path);

    let store = SqliteStore::open(&path, options()).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);

    let listed = store.list_work(listing()).await.unwrap();
    let counts: Vec<(&str, u64, u64, u64, Option<i64>)> = listed
        .iter()
        .map(|w: &SessionWork| {
            let SessionWork {
                session_id,
                claimable,
                busy,
                dead_lettered,
                next_expiry,
                ..
            } = w;
            (
                session_id.as_str(),
                *claimable,
                *busy,
                *dead_lettered,
                *next_expiry,
            )
        })
        .collect();
    assert_eq!(
        counts,
        vec![
            ("busy", 0, 1, 0, Some(1_500)),
            ("claimable", 1, 0, 0, None),
            ("dead", 0, 0, 1, None),
        ]
    );

    let result = store.claim_work(work("new").with_limit(5)).await.unwrap();
    assert_eq!(served(&result), vec!["claimable #1"]);
    // The busy head's row waits for its lease: the next claim says when.
    let result = store.claim_work(work("new")).await.unwrap();
    assert_eq!(result, ClaimWorkResult::Busy { retry_at: 1_500 });
    clock.set(1_500);
    let result = store.claim_work(work("new")).await.unwrap();
    assert_eq!(served(&result), vec!["busy #1"]);
}

/// The child: appends work to the shared file, then writes the time it
/// committed to the stamp file.
async fn append_from_child(db: &Path, stamp: &Path) {
    let store = SqliteStore::open(db, SqliteOptions::default()).unwrap();
    store
        .append("from-child", vec![targeted(1)], Default::default())
        .await
        .unwrap();
    std::fs::write(stamp, now_ms().to_string()).unwrap();
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[test]
fn a_waiting_claim_wakes_on_another_process_append() {
    if let (Ok(_), Ok(db), Ok(stamp)) =
        (std::env::var(ROLE), std::env::var(DB), std::env::var(STAMP))
    {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(append_from_child(Path::new(&db), Path::new(&stamp)));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let stamp = dir.path().join("stamp");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move {
                let result = store.claim_work(work("w").with_wait_ms(20_000)).await;
                (result, now_ms())
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_waiting_claim_wakes_on_another_process_append",
                "--test-threads",
                "1",
            ])
            .env(ROLE, "append")
            .env(DB, &db)
            .env(STAMP, &stamp)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        assert!(status.success());
        let (result, woke_at) = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter wakes")
            .unwrap();
        let result = result.unwrap();
        assert_eq!(served(&result), vec!["from-child #1"]);
        let appended_at: u128 = std::fs::read_to_string(&stamp).unwrap().parse().unwrap();
        // The fallback poll is 1 s; the data_version watcher polls every 5 ms.
        let late = woke_at.saturating_sub(appended_at);
        assert!(
            late < 500,
            "woke {late} ms after the other process's append (child ran {:?})",
            started.elapsed()
        );
    });
}
