//! A full database: a store capped with `SqliteOptions::max_page_count` is
//! filled until writes fail. The failure is `StorageFull` with a message that
//! says what to do, every acknowledged write is kept, the failed call changed
//! nothing, reads keep working, and reopening with a larger cap makes the
//! store writable again.

use std::path::Path;

use a2_store_api::{
    ClaimRequest, ClaimResult, ClearRequest, CompleteRequest, CompleteResult, Cursor, ErrorCode,
    Head, NewEvent, ReadOptions, Store, StoreError, StoredEvent, Target,
};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

/// The cap of the filled database: room for the schema and some sessions' work.
const CAP: u64 = 96;

fn capped(pages: Option<u64>) -> SqliteOptions {
    SqliteOptions {
        max_page_count: pages,
        ..SqliteOptions::default()
    }
}

/// Everything a failed write must leave as it was.
#[derive(Debug, PartialEq)]
struct State {
    rows: Vec<StoredEvent>,
    cursors: Vec<Cursor>,
    dead: Vec<Head>,
}

async fn state(store: &SqliteStore) -> State {
    State {
        rows: store.read("s", ReadOptions::default()).await.unwrap(),
        cursors: store.cursors("s").await.unwrap(),
        dead: store.dead_letters("s").await.unwrap(),
    }
}

/// A batch of `size` events with `bytes` of payload each; its first event
/// targets the lane, its second an event cursor.
fn batch(name: &str, size: usize, bytes: usize) -> Vec<NewEvent> {
    (0..size)
        .map(|j| {
            let event = NewEvent::new("msg", json!({ "batch": name, "fill": "x".repeat(bytes) }))
                .with_id(format!("{name}-e{j}"));
            match j {
                0 => event.with_target(Target::lane("worker", "L")),
                1 => event.with_target(Target::event("notifier")),
                _ => event,
            }
        })
        .collect()
}

fn assert_full(error: &StoreError, db: &Path) {
    assert_eq!(error.code(), ErrorCode::StorageFull, "{error}");
    let message = error.to_string();
    assert!(message.contains("max_page_count"), "{message}");
    assert!(message.contains("nothing was written"), "{message}");
    assert!(
        message.contains(&db.display().to_string()),
        "names the file: {message}"
    );
}

/// Appends batches of shrinking size until even a one-event batch fails, so
/// the cap is reached with no page left. Checks each failure changed nothing
/// and returns the acknowledged batches with the ids each stored.
async fn fill(store: &SqliteStore, db: &Path) -> Vec<(String, Vec<String>)> {
    let mut acked = Vec::new();
    let mut failures = 0;
    for (size, bytes) in [(4, 2000), (2, 300), (1, 10)] {
        for k in 0.. {
            let name = format!("b{size}-{k}");
            let before = state(store).await;
            match store
                .append("s", batch(&name, size, bytes), Default::default())
                .await
            {
                Ok(result) => {
                    let ids = result.events.into_iter().map(|row| row.id).collect();
                    acked.push((name, ids));
                }
                Err(error) => {
                    assert_full(&error, db);
                    assert_eq!(
                        state(store).await,
                        before,
                        "a failed append changed the store"
                    );
                    failures += 1;
                    break;
                }
            }
            assert!(k < 10_000, "the cap never stopped appends");
        }
    }
    assert_eq!(failures, 3);
    assert!(acked.len() > 10, "the cap left room for too little");
    acked
}

/// Every acknowledged batch is stored whole, in order, with its ids.
async fn assert_acked(store: &SqliteStore, acked: &[(String, Vec<String>)]) {
    let rows = store.read("s", ReadOptions::default()).await.unwrap();
    for (offset, row) in rows.iter().enumerate() {
        assert_eq!(row.index, offset as u64 + 1, "indexes are contiguous");
    }
    for (name, ids) in acked {
        let stored: Vec<&StoredEvent> = rows
            .iter()
            .filter(|row| row.payload.get("batch") == Some(&json!(name)))
            .collect();
        let stored_ids: Vec<&String> = stored.iter().map(|row| &row.id).collect();
        assert_eq!(
            stored_ids,
            ids.iter().collect::<Vec<_>>(),
            "batch {name} is not whole"
        );
        for pair in stored.windows(2) {
            assert_eq!(pair[1].index, pair[0].index + 1, "batch {name} is split");
        }
    }
}

fn claim(holder: &str) -> ClaimRequest {
    ClaimRequest {
        session_id: "s".into(),
        holder: holder.into(),
        ttl_ms: Some(600_000),
        ..ClaimRequest::default()
    }
}

fn completion(head: &Head, bytes: usize) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: "s".into(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events: vec![NewEvent::new("done", json!("y".repeat(bytes))).with_id("reply")],
        consumers: None,
    }
}

#[tokio::test]
async fn a_full_database_fails_typed_keeps_acknowledged_writes_and_recovers_with_a_larger_cap() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.db");
    let store = SqliteStore::open(&db, capped(Some(CAP))).unwrap();
    // Work in flight before the database fills: a claimed lane head.
    store
        .append("s", batch("first", 2, 10), Default::default())
        .await
        .unwrap();
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(ClaimRequest {
            limit: Some(1),
            ..claim("early")
        })
        .await
        .unwrap()
    else {
        panic!("the first batch has claimable heads");
    };
    let held = heads[0].clone();

    let mut acked = vec![(
        "first".to_owned(),
        vec!["first-e0".into(), "first-e1".into()],
    )];
    acked.extend(fill(&store, &db).await);
    assert_acked(&store, &acked).await;

    // A claim that must write its (long) holder into every claimed head fails
    // typed and leaves every cursor as it was.
    let before = state(&store).await;
    let error = store
        .claim_available(claim(&"h".repeat(20_000)))
        .await
        .expect_err("a claim writing past the cap must fail");
    assert_full(&error, &db);
    assert_eq!(
        state(&store).await,
        before,
        "a failed claim changed the store"
    );

    // A completion whose returned event does not fit fails typed: no reply
    // appended, the lane cursor still at the held head with its attempt.
    let error = store
        .complete_attempt(completion(&held, 20_000))
        .await
        .expect_err("a completion writing past the cap must fail");
    assert_full(&error, &db);
    assert_eq!(
        state(&store).await,
        before,
        "a failed completion changed the store"
    );

    // Reads keep working on the full database.
    assert!(store.read_presence("s").await.unwrap().is_empty());
    assert_eq!(store.sessions(Default::default()).await.unwrap().len(), 1);
    assert_eq!(
        store
            .read(
                "s",
                ReadOptions {
                    after: Some(1),
                    limit: Some(3),
                    ..ReadOptions::default()
                }
            )
            .await
            .unwrap()
            .len(),
        3
    );
    drop(store);

    // Reopened with the same cap: still full, nothing lost.
    let store = SqliteStore::open(&db, capped(Some(CAP))).unwrap();
    assert_acked(&store, &acked).await;
    let error = store
        .append("s", batch("again", 1, 10), Default::default())
        .await
        .expect_err("still full");
    assert_full(&error, &db);
    drop(store);

    // Reopened with a larger cap: writable again, every kind of write works.
    let store = SqliteStore::open(&db, capped(Some(CAP * 4))).unwrap();
    assert_acked(&store, &acked).await;
    let outcome = store
        .complete_attempt(completion(&held, 20_000))
        .await
        .unwrap();
    let CompleteResult::Completed { events } = outcome else {
        panic!("the held attempt is still current: {outcome:?}");
    };
    assert_eq!(events[0].cause, Some(held.cause()));
    let claimed = store
        .claim_available(claim(&"h".repeat(20_000)))
        .await
        .unwrap();
    assert!(
        matches!(claimed, ClaimResult::Claimed { .. }),
        "{claimed:?}"
    );
    store
        .append("s", batch("after", 4, 2000), Default::default())
        .await
        .unwrap();
    acked.push((
        "after".into(),
        (0..4).map(|j| format!("after-e{j}")).collect(),
    ));
    assert_acked(&store, &acked).await;

    // Or, with room to write the clear marker, clear and reclaim: the freed
    // pages take new writes under the original cap again.
    store
        .clear(ClearRequest {
            session_id: "s".into(),
            ..ClearRequest::default()
        })
        .await
        .unwrap();
    while !store.reclaim("s").await.unwrap().done {}
    drop(store);
    let store = SqliteStore::open(&db, capped(Some(CAP))).unwrap();
    for k in 0..10 {
        store
            .append(
                "s",
                batch(&format!("reused-{k}"), 4, 2000),
                Default::default(),
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_cap_below_the_file_size_keeps_the_data_and_refuses_growth() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shrunk.db");
    let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
    store
        .append("s", batch("big", 4, 20_000), Default::default())
        .await
        .unwrap();
    drop(store);
    let store = SqliteStore::open(&db, capped(Some(1))).unwrap();
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        4
    );
    let error = store
        .append("s", batch("more", 4, 20_000), Default::default())
        .await
        .expect_err("the file may not grow past its current size");
    assert_full(&error, &db);
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        4
    );
}

#[tokio::test]
async fn a_zero_cap_is_invalid_input_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zero.db");
    let error = SqliteStore::open(&db, capped(Some(0))).expect_err("a cap of 0 pages");
    assert_eq!(error.code(), ErrorCode::InvalidInput);
    assert!(error.to_string().contains("max_page_count"), "{error}");
    assert!(!db.exists(), "a refused option must not create the file");
    let error = SqliteStore::open_in_memory(capped(Some(0))).expect_err("in memory too");
    assert_eq!(error.code(), ErrorCode::InvalidInput);
    // The largest values are clamped to SQLite's maximum: no cap in effect.
    let store = SqliteStore::open(&db, capped(Some(u64::MAX))).unwrap();
    store
        .append("s", batch("ok", 2, 10), Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn an_in_memory_store_honours_the_cap() {
    let store = SqliteStore::open_in_memory(capped(Some(CAP))).unwrap();
    let mut stored = 0;
    let error = loop {
        match store
            .append(
                "s",
                batch(&format!("m{stored}"), 4, 2000),
                Default::default(),
            )
            .await
        {
            Ok(_) => stored += 1,
            Err(error) => break error,
        }
        assert!(stored < 10_000, "the cap never stopped appends");
    };
    assert_eq!(error.code(), ErrorCode::StorageFull, "{error}");
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap().len(),
        stored * 4
    );
}
