//! What finished work keeps is freed by clear + reclaim: cursors of a
//! cleared generation vanish from every call at once and their rows
//! (with completion records and lane queues) are deleted by `reclaim`.

use a2_store_api::{
    ClaimRequest, ClaimResult, ClearRequest, CompleteRequest, CursorKind, NewEvent, Store, Target,
};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

fn count(db: &std::path::Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(sql, [], |row| row.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_frees_cursors_and_completions_of_cleared_work() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("reclaim.db");
    let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
    let events: Vec<_> = (0..600)
        .map(|n| {
            NewEvent::new("msg", json!(n))
                .with_target(Target::event("notifier"))
                .with_target(Target::lane("agent", "L"))
        })
        .collect();
    store.append("s", events, Default::default()).await.unwrap();
    // Finish every event cursor and part of the lane.
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(ClaimRequest {
            session_id: "s".into(),
            holder: "w".into(),
            ttl_ms: Some(60_000),
            ..ClaimRequest::default()
        })
        .await
        .unwrap()
    else {
        panic!("work to claim");
    };
    for head in heads {
        store
            .complete_attempt(CompleteRequest {
                incarnation: None,
                session_id: "s".into(),
                consumer: head.consumer.clone(),
                lane: head.lane.clone(),
                index: head.event.index,
                attempt: head.dispatch.attempt_count,
                events: Vec::new(),
                consumers: None,
            })
            .await
            .unwrap();
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM cursors"), 601);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM completions"), 601);

    store
        .clear(ClearRequest {
            session_id: "s".into(),
            ..ClearRequest::default()
        })
        .await
        .unwrap();
    assert!(store.cursors("s").await.unwrap().is_empty());
    // A lane of the cleared generation is gone for every call: a new target
    // starts a fresh lane cursor at the clear.
    let appended = store
        .append(
            "s",
            vec![NewEvent::new("msg", json!("after")).with_target(Target::lane("agent", "L"))],
            Default::default(),
        )
        .await
        .unwrap();
    let cursors = store.cursors("s").await.unwrap();
    assert_eq!(cursors.len(), 1);
    assert_eq!(cursors[0].kind, CursorKind::Lane);
    assert_eq!(cursors[0].position, 601, "a new lane starts at the clear");
    assert_eq!(cursors[0].head, Some(appended.events[0].index));
    assert_eq!(cursors[0].dispatch.attempt_count, 0);

    let mut calls = 0;
    loop {
        calls += 1;
        if store.reclaim("s").await.unwrap().done {
            break;
        }
    }
    assert_eq!(calls, 3, "600 rows below the marker take 3 calls of 256");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM cursors"), 1);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM completions"), 0);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM lane_queue"), 1);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM events"), 2);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM event_ids"), 2);
}
