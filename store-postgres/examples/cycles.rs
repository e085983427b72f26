//! Runs claim + complete cycles on one session of a fresh schema, for
//! counting the client's round trips per cycle from outside (`strace`):
//!
//! ```sh
//! A2_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo build --release -p a2-store-postgres --example cycles
//! strace -f -e trace=sendto -c target/release/examples/cycles 2000 0     # setup only
//! strace -f -e trace=sendto -c target/release/examples/cycles 2000 2000  # setup + 2000 cycles
//! ```
//!
//! The difference of the two `sendto` counts over the cycles is the figure
//! per claim + complete. Arguments: heads appended (in batches of 100),
//! then cycles run (each claims one head and completes it); a third
//! argument `empty` runs that many claims of a session with nothing to
//! claim instead. The schema is dropped at the end.

use std::sync::Arc;

use a2_store_api::{ClaimResult, CompleteRequest, RandomIds, Store, SystemClock};
use a2_store_postgres::scratch::fresh_schema_name;
use a2_store_postgres::{PostgresOptions, PostgresStore};

mod support;
use support::{append_jobs, claim_one};

fn main() -> a2_store_api::Result<()> {
    // `A2_CYCLES_THREADS=1`: a current-thread runtime, where the driver's
    // connection task runs only when the call waits, so every pipelined
    // request of a step goes out in one write; with worker threads a
    // request may be written before the next one is queued (two writes,
    // still one round trip).
    let threads: usize = std::env::var("A2_CYCLES_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    };
    let runtime = runtime.map_err(|e| a2_store_api::StoreError::backend("starting tokio", e))?;
    runtime.block_on(run())
}

async fn run() -> a2_store_api::Result<()> {
    let Ok(url) = std::env::var("A2_POSTGRES_URL") else {
        eprintln!("set A2_POSTGRES_URL to a PostgreSQL server");
        return Ok(());
    };
    let mut args = std::env::args().skip(1);
    let heads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let cycles: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(heads);
    let empty = args.next().as_deref() == Some("empty");
    // `A2_CYCLES_WORKERS=N`: N workers, each on a session of its own.
    let workers: usize = std::env::var("A2_CYCLES_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1)
        .max(1);
    let schema = fresh_schema_name("a2cycles_")?;
    let store = PostgresStore::connect(
        &url,
        PostgresOptions {
            schema,
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            pool_size: workers + 2,
            ..PostgresOptions::default()
        },
    )
    .await?;
    let started = std::time::Instant::now();
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            work(store, format!("cycles-{worker}"), heads, cycles, empty).await
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += task
            .await
            .map_err(|e| a2_store_api::StoreError::backend("a worker", e))??;
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{done} cycles in {elapsed:?} ({:.0} per second, setup included)",
        done as f64 / elapsed.as_secs_f64()
    );
    store.drop_schema().await
}

/// One worker: appends `heads`, then runs `cycles` cycles on `session`.
async fn work(
    store: PostgresStore,
    session: String,
    heads: usize,
    cycles: usize,
    empty: bool,
) -> a2_store_api::Result<usize> {
    let session = session.as_str();
    append_jobs(&store, session, heads).await?;
    let mut done = 0;
    for _ in 0..cycles {
        if empty {
            store.claim_available(claim_one("nothing-here")).await?;
            continue;
        }
        let ClaimResult::Claimed { heads, .. } = store.claim_available(claim_one(session)).await?
        else {
            break;
        };
        for head in heads {
            store
                .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
                .await?;
            done += 1;
        }
    }
    Ok(done)
}
