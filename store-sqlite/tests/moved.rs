//! A database file moved or deleted while the store has it open: every
//! later write fails with a typed error naming the path and is rolled back,
//! so nothing is acknowledged into a file the path no longer names.

use std::path::Path;

use a2_store_api::{ClaimRequest, ErrorCode, NewEvent, ReadOptions, Store, StoreError, Target};
use a2_store_sqlite::{DatabaseMoved, SqliteOptions, SqliteStore};
use serde_json::json;

fn event(n: usize) -> Vec<NewEvent> {
    vec![NewEvent::new("msg", json!(n)).with_target(Target::event("worker"))]
}

/// The error's typed source, after checking the message names the path.
fn assert_moved<'a>(error: &'a StoreError, db: &Path, replaced: bool) -> &'a DatabaseMoved {
    assert_eq!(error.code(), ErrorCode::Backend, "{error}");
    let message = error.to_string();
    assert!(message.contains(&db.display().to_string()), "{message}");
    assert!(message.contains("moved or deleted"), "{message}");
    let moved = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<DatabaseMoved>())
        .unwrap_or_else(|| panic!("not a DatabaseMoved: {error:?}"));
    assert_eq!(moved.path(), db);
    assert_eq!(moved.replaced(), replaced);
    moved
}

async fn indexes(store: &SqliteStore, session: &str) -> Vec<u64> {
    let rows = store.read(session, ReadOptions::default()).await.unwrap();
    rows.iter().map(|row| row.index).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_once_the_directory_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("data");
    std::fs::create_dir(&sub).unwrap();
    let db = sub.join("store.db");
    let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
    store
        .append("s", event(0), Default::default())
        .await
        .unwrap();

    std::fs::remove_dir_all(&sub).unwrap();
    for n in 1..=50 {
        let error = store
            .append("s", event(n), Default::default())
            .await
            .unwrap_err();
        assert_moved(&error, &db, false);
    }
    // Every kind of write is refused, not only appends.
    let claim = store
        .claim_available(ClaimRequest {
            session_id: "s".into(),
            holder: "h".into(),
            ttl_ms: Some(60_000),
            ..ClaimRequest::default()
        })
        .await
        .unwrap_err();
    assert_moved(&claim, &db, false);
    // The open file still holds only what was acknowledged.
    assert_eq!(indexes(&store, "s").await, vec![1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_once_the_directory_is_renamed_and_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("data");
    std::fs::create_dir(&sub).unwrap();
    let db = sub.join("store.db");
    let first = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
    for n in 0..3 {
        first
            .append("s", event(n), Default::default())
            .await
            .unwrap();
    }

    let moved_dir = dir.path().join("moved");
    std::fs::rename(&sub, &moved_dir).unwrap();
    std::fs::create_dir(&sub).unwrap();
    // Nothing at the path yet.
    let error = first
        .append("s", event(3), Default::default())
        .await
        .unwrap_err();
    assert_moved(&error, &db, false);

    // A second store on the same path makes a new file there.
    let second = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
    let fresh = second
        .append("s", event(100), Default::default())
        .await
        .unwrap();
    assert_eq!(fresh.events[0].index, 1);
    for n in 4..20 {
        let error = first
            .append("s", event(n), Default::default())
            .await
            .unwrap_err();
        assert_moved(&error, &db, true);
    }
    drop(first);
    drop(second);

    // The moved file holds exactly what the first store acknowledged, the
    // new one only the second store's append.
    let old = SqliteStore::open(moved_dir.join("store.db"), SqliteOptions::default()).unwrap();
    assert_eq!(indexes(&old, "s").await, vec![1, 2, 3]);
    let new = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
    let rows = new.read("s", ReadOptions::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].payload, json!(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_work_again_when_the_file_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("data");
    std::fs::create_dir(&sub).unwrap();
    let db = sub.join("store.db");
    let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
    store
        .append("s", event(0), Default::default())
        .await
        .unwrap();

    let away = dir.path().join("away");
    std::fs::rename(&sub, &away).unwrap();
    let error = store
        .append("s", event(1), Default::default())
        .await
        .unwrap_err();
    assert_moved(&error, &db, false);

    std::fs::rename(&away, &sub).unwrap();
    let appended = store
        .append("s", event(2), Default::default())
        .await
        .unwrap();
    assert_eq!(appended.events[0].index, 2);
    assert_eq!(indexes(&store, "s").await, vec![1, 2]);
}
