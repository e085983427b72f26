//! What idle subscriptions cost: N streams on N sessions of one file,
//! caught up and waiting, and the CPU time the process spends over a few
//! seconds of nothing happening (Linux: read from `/proc/self/stat`).
//!
//! ```text
//! cargo run --release -p a2-store-sqlite --example idle_subscribers -- [streams] [seconds]
//! ```

use std::time::Duration;

use a2_store_api::{NewEvent, Store};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use futures::StreamExt;
use serde_json::json;

/// User + system CPU time of this process so far, in clock ticks
/// (`None` off Linux).
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces) start
    // after its closing parenthesis; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let streams: usize = args.get(1).map_or(Ok(1000), |arg| arg.parse())?;
    let seconds: u64 = args.get(2).map_or(Ok(3), |arg| arg.parse())?;
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = SqliteStore::open(
            dir.path().join("idle.db"),
            SqliteOptions {
                durability: Durability::Normal,
                ..SqliteOptions::default()
            },
        )?;
        let mut tasks = Vec::with_capacity(streams);
        for n in 0..streams {
            let session = format!("s{n}");
            store
                .append(
                    &session,
                    vec![NewEvent::new("m", json!(n))],
                    Default::default(),
                )
                .await?;
            let mut stream = store.subscribe(&session, 0).await?;
            tasks.push(tokio::spawn(async move {
                // The backlog, then a wait for an append that never comes.
                while let Some(event) = stream.next().await {
                    if event.is_err() {
                        break;
                    }
                }
            }));
        }
        // Let every stream read its backlog and settle into its wait.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = cpu_ticks();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let after = cpu_ticks();
        match (before, after) {
            (Some(before), Some(after)) => println!(
                "{streams} idle subscriptions: {} clock ticks (1/100 s) of CPU in {seconds} s",
                after - before
            ),
            _ => println!("CPU time is only read on Linux"),
        }
        for task in tasks {
            task.abort();
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
