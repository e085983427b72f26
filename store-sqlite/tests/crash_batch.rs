//! Crash safety of grouped commits: a child process runs 8 tasks on one
//! store (a multi-threaded runtime), so the file's writer commits their
//! calls together, several per transaction; it is killed with SIGKILL at
//! random moments. Each task appends acknowledged 5-event batches to a
//! session of its own, claims and completes its heads, and now and then
//! makes an append that must fail (it repeats one stored id among new
//! ones) inside the same grouped transactions. Runs alternate between
//! `Durability::Full` and `Durability::Normal`. After every kill the
//! database must hold every acknowledged batch whole, no partial batch,
//! none of the failed appends' events, every acknowledged completion
//! exactly once, and lanes that agree with the log.
//!
//! The child is this test binary re-executed with `CHILD_DB` set.

mod common;

use common::{kill_running, random_below, spawn_child, ChildVars};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2_store_api::{
    ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, CursorKind, ErrorCode, NewEvent,
    ReadOptions, Store, StoredEvent, Target,
};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use serde_json::json;

const CHILD_DB: &str = "A2_SQLITE_CRASH_BATCH_DB";
const CHILD_RUN: &str = "A2_SQLITE_CRASH_BATCH_RUN";
const CHILD_LOG: &str = "A2_SQLITE_CRASH_BATCH_LOG";
const KILLS: usize = 16;
const TASKS: usize = 8;
const BATCH: usize = 5;
const TEST_NAME: &str = "grouped_calls_survive_sigkill_whole";

const CHILD: ChildVars = ChildVars {
    db: CHILD_DB,
    run: CHILD_RUN,
    log: CHILD_LOG,
};

/// What the children acknowledged, per session.
#[derive(Default)]
struct Acked {
    batches: BTreeMap<String, BTreeSet<String>>,
    completions: BTreeMap<String, BTreeSet<String>>,
    failed: usize,
}

#[test]
fn grouped_calls_survive_sigkill_whole() {
    if let Ok(db) = std::env::var(CHILD_DB) {
        child(Path::new(&db));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash-batch.db");
    let started = Instant::now();
    let mut acked = Acked::default();
    for run in 0..KILLS {
        let log = dir.path().join(format!("acks-{run}.log"));
        let mut process = spawn_child(TEST_NAME, &CHILD, &db, run, &log);
        std::thread::sleep(Duration::from_millis(80 + random_below(220)));
        kill_running(&mut process);
        // Only whole lines count: a kill may cut the last one short.
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        for line in written
            .split_inclusive('\n')
            .filter_map(|line| line.strip_suffix('\n'))
        {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["BATCH", session, batch] => {
                    acked
                        .batches
                        .entry((*session).to_owned())
                        .or_default()
                        .insert((*batch).to_owned());
                }
                ["DONE", session, id] => {
                    acked
                        .completions
                        .entry((*session).to_owned())
                        .or_default()
                        .insert((*id).to_owned());
                }
                ["FAILED", ..] => acked.failed += 1,
                _ => panic!("unexpected log line {line:?}"),
            }
        }
        verify(&db, &acked);
    }
    let batches: usize = acked.batches.values().map(BTreeSet::len).sum();
    let completions: usize = acked.completions.values().map(BTreeSet::len).sum();
    assert!(
        batches >= KILLS * TASKS,
        "the children acknowledged too little work"
    );
    assert!(completions > 0, "the children completed nothing");
    assert!(acked.failed > 0, "no failing call ran among the others");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    eprintln!(
        "{KILLS} kills, {batches} batches, {completions} completions and {} failed appends acknowledged in {:?}",
        acked.failed,
        started.elapsed()
    );
}

/// Reopens the database and checks every session against what the
/// children acknowledged.
fn verify(db: &Path, acked: &Acked) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(db, SqliteOptions::default()).expect("reopen after a kill");
        for task in 0..TASKS {
            let session = format!("s{task}");
            let rows = store.read(&session, ReadOptions::default()).await.unwrap();
            for (offset, row) in rows.iter().enumerate() {
                assert_eq!(row.index, offset as u64 + 1, "indexes are contiguous");
            }
            assert!(
                rows.iter().all(|row| !row.id.contains("-x")),
                "{session}: an event of a failed append was kept"
            );
            let mut by_batch: BTreeMap<String, Vec<&StoredEvent>> = BTreeMap::new();
            for row in rows.iter().filter(|row| row.event_type == "msg") {
                let batch = row.payload["batch"].as_str().unwrap().to_owned();
                by_batch.entry(batch).or_default().push(row);
            }
            for (batch, members) in &by_batch {
                assert_eq!(members.len(), BATCH, "batch {batch} is partial");
                for (j, member) in members.iter().enumerate() {
                    assert_eq!(member.index, members[0].index + j as u64);
                    assert_eq!(member.id, format!("{batch}-e{j}"));
                }
            }
            for batch in acked.batches.get(&session).into_iter().flatten() {
                assert!(
                    by_batch.contains_key(batch),
                    "acknowledged batch {batch} is lost"
                );
            }
            let mut replied = BTreeMap::new();
            for row in rows.iter().filter(|row| row.event_type == "done") {
                let cause = row.cause.as_ref().expect("a reply has a cause");
                *replied.entry(cause.index).or_insert(0) += 1;
            }
            assert!(
                replied.values().all(|count| *count == 1),
                "{session}: a head completed twice"
            );
            let reply_ids: BTreeSet<&str> = rows
                .iter()
                .filter(|row| row.event_type == "done")
                .map(|row| row.id.as_str())
                .collect();
            for done in acked.completions.get(&session).into_iter().flatten() {
                assert!(
                    reply_ids.contains(done.as_str()),
                    "acknowledged completion {done} is lost"
                );
            }
            let cursors = store.cursors(&session).await.unwrap();
            let targets: Vec<u64> = rows
                .iter()
                .filter(|row| row.event_type == "msg" && row.id.ends_with("-e0"))
                .map(|row| row.index)
                .collect();
            match cursors
                .iter()
                .find(|cursor| cursor.kind == CursorKind::Lane)
            {
                Some(lane) => {
                    for index in &targets {
                        assert_eq!(
                            replied.contains_key(index),
                            *index <= lane.position,
                            "{session}: lane index {index} vs position {}",
                            lane.position
                        );
                    }
                    let next = targets.iter().copied().find(|index| *index > lane.position);
                    assert_eq!(
                        lane.head, next,
                        "the lane head is the first unfinished index"
                    );
                }
                None => assert!(targets.is_empty(), "targeted lane work has no cursor"),
            }
        }
    });
}

/// Records an acknowledged call with one `write` of one line (the log is
/// opened for appending, so lines of concurrent tasks do not interleave).
fn acknowledge(log: &Mutex<std::fs::File>, line: &str) {
    let mut log = log.lock().unwrap();
    log.write_all(line.as_bytes()).unwrap();
}

/// The child role: 8 tasks appending, failing an append now and then,
/// claiming and completing until killed, each call logged once
/// acknowledged.
fn child(db: &Path) {
    let run: u64 = std::env::var(CHILD_RUN).unwrap().parse().unwrap();
    let log_path = PathBuf::from(std::env::var(CHILD_LOG).unwrap());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .unwrap();
    let log = Arc::new(Mutex::new(log));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let durability = if run.is_multiple_of(2) {
            Durability::Full
        } else {
            Durability::Normal
        };
        let options = SqliteOptions {
            durability,
            ..SqliteOptions::default()
        };
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(db, options).unwrap());
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let store = Arc::clone(&store);
                let log = Arc::clone(&log);
                tokio::spawn(async move { work(store.as_ref(), &log, run, task).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// One task's loop on its own session.
async fn work(store: &dyn Store, log: &Mutex<std::fs::File>, run: u64, task: usize) {
    let session = format!("s{task}");
    for k in 0u64.. {
        let batch = format!("r{run}-t{task}-b{k}");
        let events = (0..BATCH)
            .map(|j| {
                let event = NewEvent::new("msg", json!({ "batch": batch, "j": j }))
                    .with_id(format!("{batch}-e{j}"));
                if j == 0 {
                    event.with_target(Target::lane("worker", "L"))
                } else {
                    event
                }
            })
            .collect();
        store
            .append(&session, events, Default::default())
            .await
            .unwrap();
        acknowledge(log, &format!("BATCH {session} {batch}\n"));
        if k % 3 == 1 {
            // One stored id among new ones: refused whole, in whatever
            // transaction it shares with the other tasks' calls.
            let events = vec![
                NewEvent::new("msg", json!({ "batch": batch })).with_id(format!("{batch}-e0")),
                NewEvent::new("msg", json!({ "batch": batch })).with_id(format!("{batch}-x1")),
                NewEvent::new("msg", json!({ "batch": batch })).with_id(format!("{batch}-x2")),
            ];
            let error = store
                .append(&session, events, Default::default())
                .await
                .expect_err("a batch repeating one stored id fails");
            assert_eq!(error.code(), ErrorCode::PartialDuplicateBatch);
            acknowledge(log, &format!("FAILED {session} {batch}\n"));
        }
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: session.clone(),
                holder: format!("child-{run}-{task}"),
                ttl_ms: Some(30),
                limit: Some(1),
                ..ClaimRequest::default()
            })
            .await
            .unwrap();
        let ClaimResult::Claimed { heads, .. } = claimed else {
            continue;
        };
        for head in heads {
            let id = format!(
                "r{run}-t{task}-done-{}-a{}",
                head.event.index, head.dispatch.attempt_count
            );
            let outcome = store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: session.clone(),
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
            acknowledge(log, &format!("DONE {session} {id}\n"));
        }
    }
}
