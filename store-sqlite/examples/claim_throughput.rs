//! Claim + complete throughput of W concurrent workers on one store on a
//! file, each worker on a session of its own (the shape of the criterion
//! bench `sqlite_writer`), as a plain program so that system calls can be
//! counted over exactly the measured run:
//!
//! ```text
//! cargo run --release -p a2-store-sqlite --example claim_throughput -- <full|normal> <workers> <cycles per worker>
//! strace -f -c -e trace=fsync,fdatasync target/release/examples/claim_throughput full 8 500
//! ```
//!
//! It first appends each worker's events (one append per worker), then
//! runs the workers and prints the cycles per second and the time of the
//! measured part; every cycle is one claim and one completion.

use std::sync::Arc;
use std::time::Instant;

use a2_store_api::{
    ClaimRequest, ClaimResult, CompleteRequest, NewEvent, Store, StoreError, Target,
};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let durability = match args.get(1).map(String::as_str) {
        Some("normal") => Durability::Normal,
        _ => Durability::Full,
    };
    let workers: usize = args.get(2).map_or(Ok(8), |arg| arg.parse())?;
    let cycles: usize = args.get(3).map_or(Ok(500), |arg| arg.parse())?;
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(
            dir.path().join("throughput.db"),
            SqliteOptions {
                durability,
                ..SqliteOptions::default()
            },
        )?);
        for worker in 0..workers {
            let events = (0..cycles)
                .map(|n| {
                    NewEvent::new("work", json!({ "n": n })).with_target(Target::lane("agent", "L1"))
                })
                .collect();
            store
                .append(&format!("s{worker}"), events, Default::default())
                .await?;
        }
        let start = Instant::now();
        let tasks: Vec<_> = (0..workers)
            .map(|worker| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { run(store.as_ref(), &format!("s{worker}"), cycles).await })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        let elapsed = start.elapsed();
        let total = workers * cycles;
        println!(
            "{durability:?}, {workers} workers: {total} claim+complete cycles in {:.3} s = {:.0} cycles/s",
            elapsed.as_secs_f64(),
            total as f64 / elapsed.as_secs_f64()
        );
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

/// One worker: claims its session's lane head and completes it, `cycles` times.
async fn run(store: &dyn Store, session: &str, cycles: usize) -> Result<(), StoreError> {
    for _ in 0..cycles {
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: session.to_owned(),
                holder: "w1".to_owned(),
                ttl_ms: Some(60_000),
                limit: Some(1),
                ..ClaimRequest::default()
            })
            .await?;
        let ClaimResult::Claimed { heads, .. } = claimed else {
            return Err(StoreError::invalid_input("nothing to claim"));
        };
        for head in heads {
            store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: session.to_owned(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    events: Vec::new(),
                    consumers: None,
                })
                .await?;
        }
    }
    Ok(())
}
