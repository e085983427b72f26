//! How long an append made by one process takes to reach a subscriber in
//! another process on the same file.
//!
//! ```text
//! cargo run --release -p a2-store-sqlite --example subscribe_latency -- [appends_per_s] [seconds]
//! ```
//!
//! The program re-runs itself as the appender: the child appends one event
//! per tick (default 1,000 per second for 5 s, durability NORMAL), each
//! carrying the wall-clock time just before its append; the parent follows the
//! session with `subscribe` and prints the delivery delay's percentiles
//! (receive time minus that time, same machine clock: the append's own
//! commit included, so an upper bound).

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2_store_api::{NewEvent, Store};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use futures::StreamExt;
use serde_json::json;

fn micros_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

fn options() -> SqliteOptions {
    SqliteOptions {
        durability: Durability::Normal,
        ..SqliteOptions::default()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if args.get(1).map(String::as_str) == Some("--append") {
        let path = args.get(2).ok_or("--append needs a path")?;
        let rate: u64 = args.get(3).ok_or("--append needs a rate")?.parse()?;
        let count: u64 = args.get(4).ok_or("--append needs a count")?.parse()?;
        return runtime.block_on(append(path, rate, count));
    }
    let rate: u64 = args.get(1).map_or(Ok(1000), |arg| arg.parse())?;
    let seconds: u64 = args.get(2).map_or(Ok(5), |arg| arg.parse())?;
    let count = rate * seconds;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("latency.db");
    runtime.block_on(async {
        let store = SqliteStore::open(&path, options())?;
        // Created before the child starts, so the subscriber waits from the
        // first append on.
        let mut stream = store.subscribe("s", 0).await?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--append")
            .arg(&path)
            .arg(rate.to_string())
            .arg(count.to_string())
            .spawn()?;
        let mut delays = Vec::with_capacity(usize::try_from(count)?);
        while (delays.len() as u64) < count {
            let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await?
                .ok_or("the stream ended")??;
            let sent = event.payload["acked_us"].as_u64().ok_or("no timestamp")?;
            delays.push(micros_now().saturating_sub(sent));
        }
        child.wait()?;
        delays.sort_unstable();
        let at = |q: f64| delays[((delays.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
        println!(
            "{count} appends at {rate}/s from another process: delivery p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0)
        );
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

/// The child: `count` appends paced at `rate` per second, each carrying
/// the time just before its append.
async fn append(path: &str, rate: u64, count: u64) -> Result<(), Box<dyn std::error::Error>> {
    let store = SqliteStore::open(path, options())?;
    let tick = Duration::from_micros(1_000_000 / rate.max(1));
    let start = Instant::now();
    for n in 0..count {
        let due = start + tick * u32::try_from(n)?;
        tokio::time::sleep_until(due.into()).await;
        // The timestamp is taken just before the append and the row is
        // visible only after its commit, so the measured delay includes the
        // append's own commit: an upper bound on the delivery delay.
        store
            .append(
                "s",
                vec![NewEvent::new("tick", json!({ "acked_us": micros_now() }))],
                Default::default(),
            )
            .await?;
    }
    Ok(())
}
