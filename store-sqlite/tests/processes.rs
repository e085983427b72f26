//! Several processes on one database file: claims never overlap, and a
//! subscriber sees another process's appends by polling.
//!
//! The children are this test binary re-executed with `ROLE` set; the test
//! function named on the command line takes the child role.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, NewEvent, ReadOptions, Store,
    Target,
};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use futures::StreamExt;
use serde_json::json;

const ROLE: &str = "A2_SQLITE_CHILD_ROLE";
const DB: &str = "A2_SQLITE_CHILD_DB";
const LOG: &str = "A2_SQLITE_CHILD_LOG";

fn spawn_child(test: &str, role: &str, db: &Path, log: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(ROLE, role)
        .env(DB, db)
        .env(LOG, log)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a child")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn child_env() -> Option<(String, String, String)> {
    Some((
        std::env::var(ROLE).ok()?,
        std::env::var(DB).ok()?,
        std::env::var(LOG).ok()?,
    ))
}

const HEADS: u64 = 300;

#[test]
fn processes_sharing_a_file_never_claim_a_head_twice() {
    if let Some((role, db, log)) = child_env() {
        runtime().block_on(claimer(&role, Path::new(&db), Path::new(&log)));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    runtime().block_on(async {
        let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
        let events = (0..HEADS)
            .map(|n| {
                let event = NewEvent::new("msg", json!(n)).with_target(Target::event("worker"));
                if n % 5 == 0 {
                    event.with_target(Target::lane("agent", "L"))
                } else {
                    event
                }
            })
            .collect();
        store.append("s", events, Default::default()).await.unwrap();
    });
    let logs: Vec<_> = (0..3)
        .map(|n| dir.path().join(format!("claims-{n}.log")))
        .collect();
    let children: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(n, log)| {
            spawn_child(
                "processes_sharing_a_file_never_claim_a_head_twice",
                &format!("p{n}"),
                &db,
                log,
            )
        })
        .collect();
    // Start them together: each reports ready, then waits for the go file.
    let ready = |n: usize| dir.path().join(format!("ready-{n}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(0..logs.len()).all(|n| ready(n).exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the claimers never got ready"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(dir.path().join("go"), b"go").unwrap();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a claimer failed");
    }
    let mut claims: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for log in &logs {
        for line in std::fs::read_to_string(log).unwrap().lines() {
            let (head, holder) = line.rsplit_once(' ').unwrap();
            claims
                .entry(head.to_owned())
                .or_default()
                .push(holder.to_owned());
        }
    }
    let twice: Vec<_> = claims.iter().filter(|(_, by)| by.len() > 1).collect();
    assert!(twice.is_empty(), "claimed by two holders: {twice:?}");
    assert_eq!(claims.len() as u64, HEADS + HEADS / 5);
    let holders: std::collections::BTreeSet<_> = claims.values().flatten().collect();
    assert!(holders.len() > 1, "only one process got work: {holders:?}");
    runtime().block_on(async {
        let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
        let rows = store.read("s", ReadOptions::default()).await.unwrap();
        let replies = rows.iter().filter(|row| row.cause.is_some()).count() as u64;
        assert_eq!(replies, HEADS + HEADS / 5, "each completion applied once");
    });
}

/// A child: claim and complete until nothing is left, logging each claim.
/// It reports ready (a file next to the database) and starts on the go file.
async fn claimer(role: &str, db: &Path, log: &Path) {
    let mut log = std::fs::File::create(log).unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(db, SqliteOptions::default()).unwrap());
    let dir = db.parent().unwrap();
    let n = role.trim_start_matches('p');
    std::fs::write(dir.join(format!("ready-{n}")), b"ready").unwrap();
    while !dir.join("go").exists() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    loop {
        let result = store
            .claim_available(ClaimRequest {
                session_id: "s".into(),
                holder: role.to_owned(),
                ttl_ms: Some(600_000),
                limit: Some(2),
                ..ClaimRequest::default()
            })
            .await
            .unwrap();
        let heads = match result {
            ClaimResult::Claimed { heads, .. } => heads,
            ClaimResult::Busy { .. } => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            ClaimResult::Settled => return,
            other => panic!("unexpected outcome {other:?}"),
        };
        for head in heads {
            let lane = head.lane.clone().unwrap_or_default();
            writeln!(log, "{}/{lane}/{} {role}", head.consumer, head.event.index).unwrap();
            // The handler's work happens outside any transaction.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let done = store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: "s".into(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    events: vec![NewEvent::new("done", json!(role))],
                    consumers: None,
                })
                .await
                .unwrap();
            assert!(matches!(done, CompleteResult::Completed { .. }));
        }
    }
}

#[test]
fn a_subscriber_sees_another_process_appends() {
    if let Some((_, db, _)) = child_env() {
        runtime().block_on(async {
            let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
            for n in 1..=30 {
                store
                    .append(
                        "s",
                        vec![NewEvent::new("msg", json!(n))],
                        Default::default(),
                    )
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sub.db");
    runtime().block_on(async {
        let store = SqliteStore::open(
            &db,
            SqliteOptions {
                poll_interval: Duration::from_millis(10),
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        let mut stream = store.subscribe("s", 0).await.unwrap();
        let mut child = spawn_child(
            "a_subscriber_sees_another_process_appends",
            "appender",
            &db,
            &dir.path().join("unused.log"),
        );
        let mut payloads = Vec::new();
        let mut indexes = Vec::new();
        while payloads.len() < 30 {
            let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .expect("another process's append arrives")
                .expect("the stream goes on")
                .expect("no error");
            indexes.push(event.index);
            payloads.push(event.payload);
        }
        assert!(child.wait().unwrap().success());
        assert_eq!(indexes, (1..=30).collect::<Vec<u64>>());
        assert_eq!(payloads, (1..=30).map(|n| json!(n)).collect::<Vec<_>>());
    });
}
