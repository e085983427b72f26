//! Writes a small demo store to try the cross-session views on:
//! `cargo run -p a2-store-cli --example demo-store -- demo.db`, then e.g.
//! `a2-store inspect sqlite:demo.db work`. Its sessions, consumers and dead
//! letters are described in `tests/fixture/seed.rs`; its clock starts two
//! hours before now. `demo-store PATH N` adds N sessions whose work is done
//! (every 100th holding a dead letter), to see what the views cost when
//! they read every session.

use std::sync::Arc;

use a2_store::{Clock, ManualClock, OpenOptions, SystemClock};

#[path = "../tests/fixture/seed.rs"]
mod seed;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        return Err(
            "usage: demo-store PATH [N] (PATH: a SQLite file that does not exist yet; N: sessions with their work done)".into(),
        );
    };
    let quiet: u32 = match std::env::args().nth(2) {
        Some(n) => n.parse().map_err(|e| format!("N: {e}"))?,
        None => 0,
    };
    if std::path::Path::new(&path).exists() {
        return Err(format!("{path} exists: give the path of a new file").into());
    }
    let t0 = SystemClock.now_ms() - 120 * seed::MINUTE;
    let clock = Arc::new(ManualClock::new(t0));
    let url = format!("sqlite:{path}?durability=normal");
    let store = a2_store::open(
        &url,
        OpenOptions::default().with_shared_clock(clock.clone()),
    )
    .await?;
    seed::seed_store(store.as_ref(), &clock, t0).await;
    seed::seed_quiet(store.as_ref(), &clock, quiet, false).await;
    println!("wrote the demo store sqlite:{path}");
    Ok(())
}
