//! Retention on SQLite beside the conformance cases: what only this
//! backend can get wrong. A file of the previous schema version migrates
//! with its data and gets distinct incarnations; a 10,000-event session
//! goes in one call; incarnations are never handed out twice, not across
//! store instances; a stream of a deleted session ends; and the file stops
//! growing under create → work → prune churn (freed pages reused, and
//! given back by incremental auto-vacuum).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    ClaimRequest, CompleteRequest, DeleteSessionRequest, DeleteSessionResult, ErrorCode,
    ListSessions, ManualClock, NewEvent, PruneRequest, ReadOptions, ReadStateOptions, StateWrite,
    Store, Target,
};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore, SCHEMA_VERSION};
use futures::StreamExt;
use serde_json::json;

#[path = "common/schema.rs"]
mod schema;

const T0: i64 = 1_000_000;
const LEASE: Duration = Duration::from_secs(30);

fn options(clock: &ManualClock) -> SqliteOptions {
    SqliteOptions {
        clock: Arc::new(clock.clone()),
        durability: Durability::Normal,
        ..SqliteOptions::default()
    }
}

fn open(path: &Path, clock: &ManualClock) -> SqliteStore {
    SqliteStore::open(path, options(clock)).unwrap()
}

fn queued(n: usize) -> NewEvent {
    NewEvent::new("msg", json!({ "n": n, "text": "x".repeat(64) }))
        .with_target(Target::lane("agent", "main"))
}

/// Claims and completes every head of `session`, one claim at a time.
async fn drain(store: &SqliteStore, session: &str) {
    loop {
        let heads = store
            .claim_available(ClaimRequest::new(session, "w", LEASE))
            .await
            .unwrap()
            .into_heads();
        if heads.is_empty() {
            return;
        }
        for head in heads {
            store
                .complete_attempt(CompleteRequest::for_head(&head, vec![]))
                .await
                .unwrap();
        }
    }
}

/// The database file's size once its WAL is checkpointed into it.
fn file_size(path: &Path) -> u64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    std::fs::metadata(path).unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_the_previous_version_migrates_with_its_data_and_distinct_incarnations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.db");
    let clock = ManualClock::new(T0);
    {
        let store = open(&path, &clock);
        store
            .append("a", vec![queued(1), queued(2)], Default::default())
            .await
            .unwrap();
        clock.advance(1_000);
        store
            .append("b", vec![queued(3)], Default::default())
            .await
            .unwrap();
    }
    schema::undo_version_4(&rusqlite::Connection::open(&path).unwrap());

    clock.advance(60_000);
    let store = open(&path, &clock);
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(
        store.read("a", ReadOptions::default()).await.unwrap().len(),
        2
    );
    let listed = store.sessions(ListSessions::default()).await.unwrap();
    let incarnations: Vec<u64> = listed.iter().map(|info| info.incarnation).collect();
    assert_eq!(incarnations.len(), 2);
    assert!(incarnations.iter().all(|&n| n > 0), "{incarnations:?}");
    assert_ne!(incarnations[0], incarnations[1]);
    // Heads carry the session's incarnation, and a completion naming it applies.
    let head = store
        .claim_available(ClaimRequest::new("a", "w", LEASE))
        .await
        .unwrap()
        .into_heads()
        .remove(0);
    assert_eq!(head.incarnation, incarnations[0]);
    store
        .complete_attempt(CompleteRequest::for_head(&head, vec![]))
        .await
        .unwrap();
    // A new session draws above every migrated one.
    store
        .append("c", vec![queued(4)], Default::default())
        .await
        .unwrap();
    let listed = store.sessions(ListSessions::default()).await.unwrap();
    assert!(listed[2].incarnation > *incarnations.iter().max().unwrap());
    // The migrated last activity is each session's last append: "a" (at T0)
    // is idle for a minute, "b" (a second later) not yet; both still have work.
    clock.advance(1_000);
    let idle = store
        .prune(PruneRequest::idle_for(Duration::from_millis(61_500)).dry_run())
        .await
        .unwrap();
    assert_eq!(idle.examined, 1, "{idle:?}");
    // The old file keeps its auto-vacuum mode; deletes still work on it.
    let forced = DeleteSessionRequest::new("b").forced();
    let deleted = store.delete_session(forced).await.unwrap();
    assert!(matches!(deleted, DeleteSessionResult::Deleted { removed } if removed.events == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_10_000_events_is_deleted_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.db");
    let clock = ManualClock::new(T0);
    let store = open(&path, &clock);
    for batch in 0..10 {
        let events = (0..1_000).map(|n| queued(batch * 1_000 + n)).collect();
        store
            .append("big", events, Default::default())
            .await
            .unwrap();
    }
    store
        .append("other", vec![queued(0)], Default::default())
        .await
        .unwrap();
    let refused = store
        .delete_session(DeleteSessionRequest::new("big"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::SessionInUse);
    let deleted = store
        .delete_session(DeleteSessionRequest::new("big").forced())
        .await
        .unwrap();
    let DeleteSessionResult::Deleted { removed } = deleted else {
        panic!("deleted: {deleted:?}");
    };
    assert_eq!(
        (removed.events, removed.head, removed.ended),
        (10_000, 10_000, 1)
    );
    assert!(store
        .read("big", ReadOptions::default())
        .await
        .unwrap()
        .is_empty());
    let conn = rusqlite::Connection::open(&path).unwrap();
    for count in [
        "SELECT COUNT(*) FROM events",
        "SELECT COUNT(*) FROM event_ids",
        "SELECT COUNT(*) FROM cursors",
        "SELECT COUNT(*) FROM lane_queue",
        "SELECT COUNT(*) FROM work",
    ] {
        let left: i64 = conn.query_row(count, [], |row| row.get(0)).unwrap();
        assert_eq!(left, 1, "{count}: only the other session's row is left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incarnations_are_never_handed_out_twice_by_two_stores_on_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let clock = ManualClock::new(T0);
    let first = open(&path, &clock);
    first
        .append("s", vec![queued(1)], Default::default())
        .await
        .unwrap();
    let old = first
        .claim_available(ClaimRequest::new("s", "w", LEASE))
        .await
        .unwrap()
        .into_heads()
        .remove(0);
    let forced = DeleteSessionRequest::new("s").forced();
    first.delete_session(forced).await.unwrap();
    drop(first);
    // Another instance (the last one on the file was dropped) creates it again.
    let second = open(&path, &clock);
    second
        .append("s", vec![queued(1)], Default::default())
        .await
        .unwrap();
    let new = second
        .claim_available(ClaimRequest::new("s", "w", LEASE))
        .await
        .unwrap()
        .into_heads()
        .remove(0);
    assert!(new.incarnation > old.incarnation);
    // The old attempt names the same cursor, index and attempt: superseded.
    let stale = second
        .complete_attempt(CompleteRequest::for_head(&old, vec![]))
        .await
        .unwrap();
    assert_eq!(stale, a2_store_api::CompleteResult::Superseded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_a_deleted_session_ends_even_when_the_id_is_used_again() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(&dir.path().join("follow.db"), &clock);
    store
        .append("s", vec![queued(1)], Default::default())
        .await
        .unwrap();
    let mut stream = store.subscribe("s", 0).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.index, 1);
    let forced = DeleteSessionRequest::new("s").forced();
    store.delete_session(forced).await.unwrap();
    store
        .append("s", vec![queued(2), queued(3)], Default::default())
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the stream ends, it does not hang");
    let error = end.expect("an error, not a silent end").unwrap_err();
    assert_eq!(error.code(), ErrorCode::SessionDeleted);
    assert!(stream.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holding_only_a_snapshot_does_not_exist_for_retention() {
    // As in the reference: only an append, a fork or a presence field makes
    // a session exist; a snapshot alone is a cache of nothing.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(&dir.path().join("state.db"), &clock);
    let write = StateWrite {
        index: 0,
        state: json!({"turns": 0}),
        pins: Vec::new(),
    };
    store.write_state("s", "r", vec![write]).await.unwrap();
    clock.advance(3_600_000);
    let pruned = store
        .prune(PruneRequest::idle_for(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(pruned.examined, 0, "{pruned:?}");
    let forced = DeleteSessionRequest::new("s").forced();
    let answer = store.delete_session(forced).await.unwrap();
    assert_eq!(answer, DeleteSessionResult::NotFound);
    let state = store
        .read_state("s", "r", ReadStateOptions::default())
        .await
        .unwrap();
    assert!(state.snapshot.is_some(), "nothing was deleted");
    // Its first append makes it exist, idle from then on.
    store
        .append("s", vec![queued(1)], Default::default())
        .await
        .unwrap();
    let forced = DeleteSessionRequest::new("s").forced();
    let removed = store.delete_session(forced).await.unwrap();
    assert!(matches!(removed, DeleteSessionResult::Deleted { .. }));
    let state = store
        .read_state("s", "r", ReadStateOptions::default())
        .await
        .unwrap();
    assert_eq!(state.snapshot, None, "the snapshot went with the session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_stops_growing_under_create_work_prune_churn() {
    const ROUNDS: usize = 20;
    const SESSIONS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("churn.db");
    let clock = ManualClock::new(T0);
    let store = open(&path, &clock);
    let mut after_warm_up = 0;
    for round in 0..ROUNDS {
        for n in 0..SESSIONS {
            let session = format!("r{round}-s{n}");
            let events = (0..5).map(queued).collect();
            store
                .append(&session, events, Default::default())
                .await
                .unwrap();
            drain(&store, &session).await;
        }
        clock.advance(120_000);
        let mut pruned = 0;
        let mut from = None;
        loop {
            let page = store
                .prune(PruneRequest::idle_for(Duration::from_secs(60)).after(from))
                .await
                .unwrap();
            pruned += page.sessions.len();
            if !page.more() {
                break;
            }
            from = page.next;
        }
        assert_eq!(
            pruned, SESSIONS,
            "round {round}: every finished session goes"
        );
        if round == 1 {
            after_warm_up = file_size(&path);
        }
    }
    assert!(store
        .sessions(ListSessions::default())
        .await
        .unwrap()
        .is_empty());
    let end = file_size(&path);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
        .unwrap();
    assert_eq!(
        mode, 2,
        "a new file is created with incremental auto-vacuum"
    );
    eprintln!("file after round 2: {after_warm_up} bytes, after round {ROUNDS}: {end} bytes");
    assert!(
        end <= 2 * after_warm_up,
        "the file grew from {after_warm_up} to {end} bytes"
    );
}
