//! The store works on every kind of executor: a multi-threaded tokio runtime
//! (calls run in `block_in_place`), a current-thread runtime (calls run on
//! the blocking pool) and no tokio runtime at all (calls run inline).

use a2_store_api::{NewEvent, ReadOptions, Store};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

async fn round_trip(store: &SqliteStore) {
    let appended = store
        .append(
            "s",
            vec![NewEvent::new("msg", json!({"n": 1}))],
            Default::default(),
        )
        .await
        .expect("append");
    assert_eq!(appended.events[0].index, 1);
    let rows = store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].payload, json!({"n": 1}));
}

#[test]
fn works_on_a_multi_threaded_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = SqliteStore::open_in_memory(SqliteOptions::default()).unwrap();
    runtime.block_on(round_trip(&store));
    let spawned = store.clone();
    runtime
        .block_on(runtime.spawn(async move { round_trip_again(&spawned).await }))
        .unwrap();
}

async fn round_trip_again(store: &SqliteStore) {
    let rows = store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(rows.len(), 1, "a spawned task sees the same database");
}

#[test]
fn works_on_a_current_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = SqliteStore::open_in_memory(SqliteOptions::default()).unwrap();
    runtime.block_on(round_trip(&store));
}

#[test]
fn works_without_a_tokio_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("plain.db"), SqliteOptions::default()).unwrap();
    futures::executor::block_on(round_trip(&store));
}
