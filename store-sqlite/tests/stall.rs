//! No mix of subscribers and callers on one store waits forever for a
//! connection: a worker that merges its sessions' `subscribe` streams with
//! `select_all`, polls them, and then (no longer polling them) calls
//! `claim_available` from the same task always gets its claim through with
//! the default pool of 4 connections and 16 streams.
//!
//! Every wait is bounded by a tokio timeout, so a regression fails the test
//! instead of hanging it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{ClaimRequest, EventStream, NewEvent, Store};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use futures::stream::{select_all, SelectAll};
use futures::StreamExt;
use serde_json::json;

/// Sessions, each with one subscriber, merged into one stream.
const STREAMS: usize = 16;

/// Far longer than any call here takes; a call still waiting then is stuck.
const STUCK: Duration = Duration::from_secs(10);

fn claim() -> ClaimRequest {
    ClaimRequest {
        session_id: "work".into(),
        holder: "worker".into(),
        ttl_ms: Some(60_000),
        ..ClaimRequest::default()
    }
}

async fn merged(store: &SqliteStore) -> SelectAll<EventStream> {
    let mut streams = Vec::new();
    for n in 0..STREAMS {
        streams.push(store.subscribe(&format!("s{n}"), 0).await.unwrap());
    }
    select_all(streams)
}

/// The stall made certain: while every connection is busy (writers held
/// behind another connection's write lock), the worker polls its 16 merged
/// streams once, so each queues for a connection; then the writers finish
/// and the worker, no longer polling the streams, claims. Before the fix
/// the freed connections were handed to streams nobody polled and the claim
/// waited forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unpolled_subscribers_never_starve_a_claim() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stall.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(SqliteOptions::default().pool_size, 4);
    let mut streams = merged(&store).await;

    for round in 0..5 {
        // Another connection holds the write lock: the store's writers take
        // every pooled connection and wait for it.
        let blocker = rusqlite::Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let writers: Vec<_> = (0..6)
            .map(|n| {
                let store = store.clone();
                tokio::spawn(async move {
                    let event = NewEvent::new("msg", json!({ "round": round, "writer": n }));
                    store
                        .append(&format!("s{n}"), vec![event], Default::default())
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;

        // One poll of the merged streams: each starts a read and waits for a
        // connection (the streams have nothing to deliver yet).
        let polled = tokio::time::timeout(Duration::from_millis(50), streams.next()).await;
        assert!(polled.is_err(), "round {round}: nothing was appended yet");

        // The writers go through; the streams are not polled from now on.
        blocker.execute_batch("COMMIT").unwrap();
        for writer in writers {
            tokio::time::timeout(STUCK, writer)
                .await
                .unwrap_or_else(|_| panic!("round {round}: a writer waited for a connection"))
                .unwrap()
                .unwrap();
        }
        tokio::time::timeout(STUCK, store.claim_available(claim()))
            .await
            .unwrap_or_else(|_| {
                panic!("round {round}: claim_available waited forever for a connection")
            })
            .unwrap();

        // The streams still deliver every append, in order.
        for _ in 0..6 {
            let event = tokio::time::timeout(STUCK, streams.next())
                .await
                .unwrap_or_else(|_| panic!("round {round}: a stream stopped delivering"))
                .unwrap()
                .unwrap();
            assert_eq!(event.index, u64::try_from(round).unwrap() + 1);
        }
    }
}

/// The stall as a worker met it: appenders keep the connections busy while
/// one task takes the next event from its 16 merged streams and then claims,
/// round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_polling_merged_streams_then_claiming_never_stalls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let mut streams = merged(&store).await;
    let store: Arc<dyn Store> = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));

    let appenders: Vec<_> = (0..4)
        .map(|n| {
            let store = Arc::clone(&store);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                for i in 0_usize.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let session = format!("s{}", (n + i * 4) % STREAMS);
                    let event = NewEvent::new("msg", json!({ "appender": n, "i": i }));
                    if store
                        .append(&session, vec![event], Default::default())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            })
        })
        .collect();

    let rounds = AtomicUsize::new(0);
    let worker = async {
        for _ in 0..400 {
            streams.next().await.unwrap().unwrap();
            store.claim_available(claim()).await.unwrap();
            rounds.fetch_add(1, Ordering::Relaxed);
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(30), worker).await;
    stop.store(true, Ordering::Relaxed);
    for appender in appenders {
        appender.abort();
    }
    assert!(
        outcome.is_ok(),
        "the worker stalled waiting for a connection after {} of 400 rounds",
        rounds.load(Ordering::Relaxed)
    );
}
