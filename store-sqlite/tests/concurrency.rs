//! Several stores on one file in one process: no head is claimed twice, a
//! completion applies once, a locked database surfaces as `Busy`, and
//! subscribers see appends made through another store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, ErrorCode, NewEvent, ReadOptions,
    Store, Target,
};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use futures::StreamExt;
use serde_json::json;

fn open(path: &std::path::Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).expect("open")
}

/// Claims and completes until settled; returns every `(consumer, lane, index)` it claimed.
async fn drain(store: Arc<dyn Store>, holder: String) -> Vec<(String, Option<String>, u64)> {
    let mut claimed = Vec::new();
    loop {
        let result = store
            .claim_available(ClaimRequest {
                session_id: "s".into(),
                holder: holder.clone(),
                ttl_ms: Some(60_000),
                limit: Some(3),
                ..ClaimRequest::default()
            })
            .await
            .expect("claim");
        let heads = match result {
            ClaimResult::Claimed { heads, .. } => heads,
            ClaimResult::Busy { .. } => {
                tokio::time::sleep(Duration::from_millis(2)).await;
                continue;
            }
            ClaimResult::Settled => return claimed,
            other => panic!("unexpected outcome {other:?}"),
        };
        for head in heads {
            claimed.push((head.consumer.clone(), head.lane.clone(), head.event.index));
            let done = store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: "s".into(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    events: vec![NewEvent::new("done", json!(head.event.index))],
                    consumers: None,
                })
                .await
                .expect("complete");
            assert!(matches!(done, CompleteResult::Completed { .. }), "{done:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_never_claim_a_head_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let first: Arc<dyn Store> = Arc::new(open(&path));
    let second: Arc<dyn Store> = Arc::new(open(&path));
    let events: Vec<NewEvent> = (0..120)
        .map(|n| {
            let event = NewEvent::new("msg", json!(n)).with_target(Target::event("worker"));
            if n % 3 == 0 {
                event.with_target(Target::lane("agent", format!("L{}", n % 2)))
            } else {
                event
            }
        })
        .collect();
    first.append("s", events, Default::default()).await.unwrap();

    let mut tasks = Vec::new();
    for n in 0..6 {
        let store = Arc::clone(if n % 2 == 0 { &first } else { &second });
        tasks.push(tokio::spawn(drain(store, format!("h{n}"))));
    }
    let mut seen = BTreeMap::new();
    for task in tasks {
        for head in task.await.unwrap() {
            *seen.entry(head).or_insert(0) += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    assert_eq!(seen.len(), 120 + 40, "every head claimed once");
    // Each completion appended exactly one row.
    let rows = second.read("s", ReadOptions::default()).await.unwrap();
    assert_eq!(rows.len(), 120 + 160);
    let mut causes: Vec<_> = rows
        .iter()
        .filter_map(|row| row.cause.as_ref())
        .map(|cause| (cause.consumer.clone(), cause.lane.clone(), cause.index))
        .collect();
    causes.sort();
    let claimed: Vec<_> = seen.into_keys().collect();
    assert_eq!(causes, claimed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_is_busy_after_the_timeout_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let store = SqliteStore::open(
        &path,
        SqliteOptions {
            busy_timeout: Duration::from_millis(150),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(0))],
            Default::default(),
        )
        .await
        .unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let error = store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(1))],
            Default::default(),
        )
        .await
        .expect_err("the write lock is held elsewhere");
    assert_eq!(error.code(), ErrorCode::Busy);
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
    // Reads are not blocked by a writer in WAL mode.
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        1
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(2))],
            Default::default(),
        )
        .await
        .unwrap();
    let rows = store.read("s", ReadOptions::default()).await.unwrap();
    let payloads: Vec<_> = rows.iter().map(|row| row.payload.clone()).collect();
    assert_eq!(payloads, vec![json!(0), json!(2)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_grouped_behind_a_lock_held_elsewhere_all_fail_busy_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked-batch.db");
    let store = SqliteStore::open(
        &path,
        SqliteOptions {
            busy_timeout: Duration::from_millis(150),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    store
        .append(
            "s0",
            vec![NewEvent::new("msg", json!(0))],
            Default::default(),
        )
        .await
        .unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Eight calls at once: one runs in its caller's thread or on the
    // writer thread, the others queue and are committed together, so whole
    // batches meet the lock held by "another process".
    let calls: Vec<_> = (0..8)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .append(
                        &format!("s{n}"),
                        vec![NewEvent::new("msg", json!(n + 1))],
                        Default::default(),
                    )
                    .await
            })
        })
        .collect();
    for call in calls {
        let error = call
            .await
            .unwrap()
            .expect_err("the write lock is held elsewhere");
        assert_eq!(error.code(), ErrorCode::Busy, "{error}");
    }
    blocker.execute_batch("ROLLBACK").unwrap();
    for n in 0..8 {
        let rows = store
            .read(&format!("s{n}"), ReadOptions::default())
            .await
            .unwrap();
        let expected = if n == 0 { vec![json!(0)] } else { Vec::new() };
        let payloads: Vec<_> = rows.iter().map(|row| row.payload.clone()).collect();
        assert_eq!(payloads, expected, "a failed batch changed nothing");
    }
    // The writer goes on once the lock is free.
    store
        .append(
            "s1",
            vec![NewEvent::new("msg", json!("after"))],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .read("s1", ReadOptions::default())
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_within_the_timeout_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wait.db");
    let store = open(&path);
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(0))],
            Default::default(),
        )
        .await
        .unwrap();
    let blocker = std::thread::spawn({
        let path = path.clone();
        move || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            std::thread::sleep(Duration::from_millis(200));
            conn.execute_batch("COMMIT").unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(1))],
            Default::default(),
        )
        .await
        .expect("waits for the other writer");
    blocker.join().unwrap();
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_see_appends_made_through_another_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub.db");
    let writer = open(&path);
    let reader = open(&path);
    writer
        .append(
            "s",
            vec![NewEvent::new("msg", json!(0))],
            Default::default(),
        )
        .await
        .unwrap();
    let mut stream = reader.subscribe("s", 0).await.unwrap();
    let appender = tokio::spawn(async move {
        for n in 1..20 {
            writer
                .append(
                    "s",
                    vec![NewEvent::new("msg", json!(n))],
                    Default::default(),
                )
                .await
                .unwrap();
        }
        writer
    });
    let mut indexes = Vec::new();
    while indexes.len() < 20 {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .expect("no error");
        indexes.push(event.index);
    }
    assert_eq!(indexes, (1..=20).collect::<Vec<u64>>());
    drop(appender.await.unwrap());
}

#[tokio::test]
async fn a_stream_ends_when_its_store_is_dropped() {
    let store = SqliteStore::open_in_memory(SqliteOptions {
        poll_interval: Duration::from_millis(5),
        ..SqliteOptions::default()
    })
    .unwrap();
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(0))],
            Default::default(),
        )
        .await
        .unwrap();
    let mut stream = store.subscribe("s", 0).await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap().index, 1);
    drop(store);
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the stream ends in time");
    assert!(end.is_none());
}
