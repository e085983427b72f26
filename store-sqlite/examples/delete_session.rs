//! The time of one `delete_session` of a session of N events (10,000 by
//! default) on a file, the figure the README's "Retention" section quotes:
//!
//! ```text
//! cargo run --release -p a2-store-sqlite --example delete_session -- <full|normal> <events> <rounds>
//! ```
//!
//! Each round builds a session the shape of a conversation (every event
//! queued on a lane, the first half claimed and completed, so it holds
//! events, ids, a lane cursor, its queue and completion records), beside
//! 100 small sessions that stay, then times the forced delete of it alone
//! (its transaction, the bounded `incremental_vacuum` and the commit) on
//! a store of the durability asked (the session is built through a second
//! store on the file with `normal` durability, to build it faster).
//! Prints each round and the median.

use std::time::{Duration, Instant};

use a2_store_api::{
    ClaimRequest, CompleteRequest, DeleteSessionRequest, DeleteSessionResult, NewEvent, Store,
    Target,
};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let durability = match args.get(1).map(String::as_str) {
        Some("normal") => Durability::Normal,
        _ => Durability::Full,
    };
    let events: usize = args.get(2).map_or(Ok(10_000), |arg| arg.parse())?;
    let rounds: usize = args.get(3).map_or(Ok(5), |arg| arg.parse())?;
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let options = SqliteOptions {
            durability,
            ..SqliteOptions::default()
        };
        let path = dir.path().join("delete.db");
        let store = SqliteStore::open(&path, options)?;
        let builder = SqliteStore::open(
            &path,
            SqliteOptions {
                durability: Durability::Normal,
                ..SqliteOptions::default()
            },
        )?;
        for n in 0..100 {
            let small = vec![NewEvent::new("msg", json!({ "n": n }))];
            builder
                .append(&format!("small-{n}"), small, Default::default())
                .await?;
        }
        let mut times = Vec::new();
        for round in 0..rounds {
            let session = format!("big-{round}");
            build(&builder, &session, events).await?;
            let start = Instant::now();
            let deleted = store
                .delete_session(DeleteSessionRequest::new(&session).forced())
                .await?;
            let took = start.elapsed();
            let DeleteSessionResult::Deleted { removed } = deleted else {
                return Err(format!("round {round}: not deleted: {deleted:?}").into());
            };
            println!(
                "round {round}: deleted {} events and {} cursors in {:.1} ms",
                removed.events,
                removed.cursors,
                took.as_secs_f64() * 1e3
            );
            times.push(took);
        }
        times.sort();
        let median = times
            .get(times.len() / 2)
            .copied()
            .unwrap_or(Duration::ZERO);
        println!(
            "median delete_session of {events} events ({durability:?}): {:.1} ms",
            median.as_secs_f64() * 1e3
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Appends `events` lane-queued events to `session` in batches of 1,000,
/// then claims and completes the first half of them.
async fn build(
    store: &SqliteStore,
    session: &str,
    events: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut appended = 0;
    while appended < events {
        let batch: Vec<_> = (appended..events.min(appended + 1_000))
            .map(|n| {
                NewEvent::new("msg", json!({ "n": n, "text": "hello ".repeat(10) }))
                    .with_target(Target::lane("agent", "main"))
            })
            .collect();
        appended += batch.len();
        store.append(session, batch, Default::default()).await?;
    }
    for _ in 0..events / 2 {
        let claim = ClaimRequest::new(session, "w", Duration::from_secs(30));
        for head in store.claim_available(claim).await?.into_heads() {
            store
                .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
                .await?;
        }
    }
    Ok(())
}
