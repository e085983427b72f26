//! Crash safety: a child process appends acknowledged batches and claims and
//! completes heads in a loop, and is killed with SIGKILL at random moments.
//! Runs alternate between `Durability::Full` and `Durability::Normal` (both
//! must keep every acknowledged call through a process crash).
//! After every kill the database must hold every acknowledged batch whole,
//! no partial batch, every acknowledged completion, and cursors that agree
//! with the log.
//!
//! The child is this test binary re-executed with `CHILD_DB` set; it runs the
//! same test function, which takes the child role.

mod common;

use common::{kill_running, random_below, spawn_child, ChildVars};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, CursorKind, NewEvent, ReadOptions,
    Store, StoredEvent, Target,
};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use serde_json::json;

const CHILD_DB: &str = "A2_SQLITE_CRASH_DB";
const CHILD_RUN: &str = "A2_SQLITE_CRASH_RUN";
const CHILD_LOG: &str = "A2_SQLITE_CRASH_LOG";
const KILLS: usize = 24;
const BATCH: usize = 5;
const TEST_NAME: &str = "acknowledged_work_survives_sigkill";

const CHILD: ChildVars = ChildVars {
    db: CHILD_DB,
    run: CHILD_RUN,
    log: CHILD_LOG,
};

#[test]
fn acknowledged_work_survives_sigkill() {
    if let Ok(db) = std::env::var(CHILD_DB) {
        child(Path::new(&db));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let started = Instant::now();
    let mut acked_batches = BTreeSet::new();
    let mut acked_completions = BTreeSet::new();
    let mut kills = 0;
    for run in 0..KILLS {
        let log = dir.path().join(format!("acks-{run}.log"));
        let mut process = spawn_child(TEST_NAME, &CHILD, &db, run, &log);
        std::thread::sleep(Duration::from_millis(40 + random_below(160)));
        kill_running(&mut process);
        kills += 1;
        // Only whole lines count: a kill may cut the last one short.
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        for line in written
            .split_inclusive('\n')
            .filter_map(|line| line.strip_suffix('\n'))
        {
            if let Some(batch) = line.strip_prefix("BATCH ") {
                acked_batches.insert(batch.to_owned());
            } else if let Some(done) = line.strip_prefix("DONE ") {
                acked_completions.insert(done.to_owned());
            }
        }
        verify(&db, &acked_batches, &acked_completions);
    }
    assert!(kills >= 20, "only {kills} kills");
    assert!(
        acked_batches.len() >= KILLS,
        "the children acknowledged too little work"
    );
    assert!(
        !acked_completions.is_empty(),
        "the children completed nothing"
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    eprintln!(
        "{kills} kills, {} batches, {} completions acknowledged in {:?}",
        acked_batches.len(),
        acked_completions.len(),
        started.elapsed()
    );
}

/// Reopens the database and checks it against what the children acknowledged.
fn verify(db: &Path, batches: &BTreeSet<String>, completions: &BTreeSet<String>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(db, SqliteOptions::default()).expect("reopen after a kill");
        let rows = store.read("s", ReadOptions::default()).await.unwrap();
        for (offset, row) in rows.iter().enumerate() {
            assert_eq!(row.index, offset as u64 + 1, "indexes are contiguous");
        }
        // Batches: present whole or not at all, contiguous, every acknowledged one present.
        let mut by_batch: BTreeMap<String, Vec<&StoredEvent>> = BTreeMap::new();
        for row in rows.iter().filter(|row| row.event_type == "msg") {
            let batch = row.payload["batch"].as_str().unwrap().to_owned();
            by_batch.entry(batch).or_default().push(row);
        }
        for (batch, members) in &by_batch {
            assert_eq!(members.len(), BATCH, "batch {batch} is partial");
            let first = members[0].index;
            for (j, member) in members.iter().enumerate() {
                assert_eq!(
                    member.index,
                    first + j as u64,
                    "batch {batch} is not contiguous"
                );
                assert_eq!(member.id, format!("{batch}-e{j}"));
            }
        }
        for batch in batches {
            assert!(
                by_batch.contains_key(batch),
                "acknowledged batch {batch} is lost"
            );
        }
        // Completions: one reply per completed head, every acknowledged one present.
        let mut replies: HashMap<(String, Option<String>, u64), usize> = HashMap::new();
        let mut reply_ids = BTreeSet::new();
        for row in rows.iter().filter(|row| row.event_type == "done") {
            let cause = row.cause.as_ref().expect("a reply has a cause");
            *replies
                .entry((cause.consumer.clone(), cause.lane.clone(), cause.index))
                .or_default() += 1;
            reply_ids.insert(row.id.clone());
        }
        assert!(
            replies.values().all(|count| *count == 1),
            "a head completed twice"
        );
        for done in completions {
            assert!(
                reply_ids.contains(done),
                "acknowledged completion {done} is lost; replies: {:?}",
                rows.iter()
                    .filter(|row| row.event_type == "done")
                    .map(|row| (&row.id, row.index, &row.cause))
                    .collect::<Vec<_>>()
            );
        }
        // Cursors agree with the log.
        let cursors = store.cursors("s").await.unwrap();
        let lane_targets: Vec<u64> = rows
            .iter()
            .filter(|row| row.event_type == "msg" && row.id.ends_with("-e0"))
            .map(|row| row.index)
            .collect();
        let lane = cursors
            .iter()
            .find(|cursor| cursor.kind == CursorKind::Lane);
        if let Some(lane) = lane {
            for index in &lane_targets {
                let replied = replies.contains_key(&("worker".into(), Some("L".into()), *index));
                assert_eq!(
                    replied,
                    *index <= lane.position,
                    "lane index {index} vs position {}",
                    lane.position
                );
            }
            let next = lane_targets
                .iter()
                .copied()
                .find(|index| *index > lane.position);
            assert_eq!(
                lane.head, next,
                "the lane head is the first unfinished index"
            );
        } else {
            assert!(lane_targets.is_empty(), "targeted lane work has no cursor");
        }
        let open_events: BTreeSet<u64> = cursors
            .iter()
            .filter(|cursor| cursor.kind == CursorKind::Event)
            .map(|cursor| cursor.head.expect("a listed event cursor has a head"))
            .collect();
        for row in rows.iter().filter(|row| row.id.ends_with("-e1")) {
            let replied = replies.contains_key(&("notifier".into(), None, row.index));
            assert_ne!(
                replied,
                open_events.contains(&row.index),
                "event cursor {} must be either finished or open",
                row.index
            );
        }
    });
}

/// Records an acknowledged call with one `write` (a kill cuts no line in two
/// unless the write itself is short, which the parent also tolerates).
fn acknowledge(log: &mut std::fs::File, line: &str) {
    log.write_all(line.as_bytes()).unwrap();
}

/// The child role: append, claim and complete until killed, logging each
/// acknowledged call after it returns.
fn child(db: &Path) {
    let run = std::env::var(CHILD_RUN).unwrap();
    let log_path = PathBuf::from(std::env::var(CHILD_LOG).unwrap());
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let durability = if run.parse::<u64>().unwrap_or_default() % 2 == 0 {
            Durability::Full
        } else {
            Durability::Normal
        };
        let options = SqliteOptions {
            durability,
            ..SqliteOptions::default()
        };
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(db, options).unwrap());
        for k in 0u64.. {
            let batch = format!("r{run}-b{k}");
            let events = (0..BATCH)
                .map(|j| {
                    let event = NewEvent::new("msg", json!({ "batch": batch, "j": j }))
                        .with_id(format!("{batch}-e{j}"));
                    match j {
                        0 => event.with_target(Target::lane("worker", "L")),
                        1 => event.with_target(Target::event("notifier")),
                        _ => event,
                    }
                })
                .collect();
            store.append("s", events, Default::default()).await.unwrap();
            acknowledge(&mut log, &format!("BATCH {batch}\n"));
            let claimed = store
                .claim_available(ClaimRequest {
                    session_id: "s".into(),
                    holder: format!("child-{run}"),
                    ttl_ms: Some(30),
                    limit: Some(2),
                    ..ClaimRequest::default()
                })
                .await
                .unwrap();
            let ClaimResult::Claimed { heads, .. } = claimed else {
                continue;
            };
            for head in heads {
                let id = format!(
                    "r{run}-done-{}-{}-a{}",
                    head.consumer, head.event.index, head.dispatch.attempt_count
                );
                let outcome = store
                    .complete_attempt(CompleteRequest {
                        incarnation: None,
                        session_id: "s".into(),
                        consumer: head.consumer.clone(),
                        lane: head.lane.clone(),
                        index: head.event.index,
                        attempt: head.dispatch.attempt_count,
                        events: vec![NewEvent::new("done", json!(null)).with_id(id.clone())],
                        consumers: None,
                    })
                    .await
                    .unwrap();
                assert!(
                    matches!(outcome, CompleteResult::Completed { .. }),
                    "completing {id}: {outcome:?}"
                );
                acknowledge(&mut log, &format!("DONE {id}\n"));
            }
        }
    });
}
