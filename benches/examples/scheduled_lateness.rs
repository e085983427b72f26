//! How late a waiting worker claims scheduled heads, on the real clock.
//!
//! Schedules `--future` heads (default 100,000) over the hour after the next
//! one, so they stay scheduled throughout, and `--due` heads (default 2,000)
//! spread over the next `--span-ms` (default 20,000), each appended by a
//! producer one second before its time, while `--workers`
//! workers (default 2) call `claim_work` with a wait. Each claimed head's
//! lateness is the claim's return time minus its due time. Prints p50, p99
//! and the worst lateness of the due heads.
//!
//! ```text
//! cargo run --release -p a2-benches --example scheduled_lateness -- sqlite
//! A2_POSTGRES_URL=postgres://... cargo run --release -p a2-benches --example scheduled_lateness -- postgres
//! ```
//!
//! The backend is `memory`, `sqlite` (a file, durability NORMAL) or
//! `postgres` (a scratch schema on `A2_POSTGRES_URL`, dropped at the end).
//! With `A2_LATENESS_CSV=path`, every due head's time and lateness is
//! written there as CSV.

use std::sync::Arc;
use std::time::Duration;

use a2_benches::backends::{MemoryFactory, SqliteFileFactory};
use a2_benches::postgres::PostgresFactory;
use a2_conformance::StoreFactory;
use a2_store_api::{
    AppendOptions, ClaimWorkRequest, Clock, CompleteRequest, ConsumerDeclaration, NewEvent,
    RandomIds, SystemClock, Target,
};
use futures::StreamExt;
use serde_json::json;

const CONSUMER: &str = "reminder";
const PER_SESSION: u64 = 10;
const HOUR_MS: i64 = 3_600_000;
/// How long before its time the producer appends a due head, ms.
const LEAD_MS: i64 = 1_000;

struct Args {
    backend: String,
    future: u64,
    due: u64,
    span_ms: i64,
    workers: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        backend: "memory".into(),
        future: 100_000,
        due: 2_000,
        span_ms: 20_000,
        workers: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.replace('_', "").parse::<u64>().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match arg.as_str() {
            "--future" => args.future = value("--future")?,
            "--due" => args.due = value("--due")?.max(1),
            "--span-ms" => args.span_ms = i64::try_from(value("--span-ms")?).unwrap_or(i64::MAX),
            "--workers" => args.workers = usize::try_from(value("--workers")?).unwrap_or(1).max(1),
            "memory" | "sqlite" | "postgres" => args.backend = arg,
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(args)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let sqlite;
    let postgres;
    let factory: &dyn StoreFactory = match args.backend.as_str() {
        "sqlite" => {
            sqlite = SqliteFileFactory::normal()?;
            &sqlite
        }
        "postgres" => {
            postgres = PostgresFactory::from_env("scheduled_lateness")
                .ok_or("A2_POSTGRES_URL is not set")?;
            &postgres
        }
        _ => &MemoryFactory,
    };
    let clock = SystemClock;
    let store = factory
        .create(Arc::new(SystemClock), Arc::new(RandomIds))
        .await?;
    let sessions = args.future.div_ceil(PER_SESSION).max(1);
    let session = move |n: u64| format!("late-{:06}", n % sessions);

    // Heads scheduled beyond the run: they only fill the work index.
    let later = clock.now_ms() + HOUR_MS;
    let step = (HOUR_MS / i64::try_from(args.future.max(1)).unwrap_or(1)).max(1);
    let mut batches: Vec<Vec<NewEvent>> = vec![Vec::new(); sessions as usize];
    for k in 0..args.future {
        let at = later + i64::try_from(k).unwrap_or(0) * step;
        batches[(k % sessions) as usize].push(
            NewEvent::new("later", json!({ "due": at }))
                .with_target(Target::event(CONSUMER).not_before_ms(at)),
        );
    }
    let build = Arc::clone(&store);
    let mut appends = futures::stream::iter(batches.into_iter().enumerate().map(|(n, events)| {
        let store = Arc::clone(&build);
        async move {
            if events.is_empty() {
                return Ok(());
            }
            store
                .append(&session(n as u64), events, AppendOptions::default())
                .await
                .map(|_| ())
        }
    }))
    .buffer_unordered(8);
    while let Some(result) = appends.next().await {
        result?;
    }
    drop(appends);

    // The due heads, from 1.5 s after setup on, each appended by a producer
    // about one second before its time (as an agent schedules reminders).
    let start = clock.now_ms() + 1_500;
    let due_step = (args.span_ms / i64::try_from(args.due).unwrap_or(1)).max(1);
    let producer = {
        let store = Arc::clone(&store);
        let total = args.due;
        tokio::spawn(async move {
            for j in 0..total {
                let at = start + i64::try_from(j).unwrap_or(0) * due_step;
                let ahead = at - LEAD_MS - SystemClock.now_ms();
                if ahead > 0 {
                    tokio::time::sleep(Duration::from_millis(ahead.unsigned_abs())).await;
                }
                let event = NewEvent::new("due", json!({ "due": at }))
                    .with_target(Target::event(CONSUMER).not_before_ms(at));
                store
                    .append(&session(j * 7919), vec![event], AppendOptions::default())
                    .await?;
            }
            Ok::<_, a2_store_api::StoreError>(())
        })
    };

    let claimed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..args.workers {
        let store = Arc::clone(&store);
        let claimed = Arc::clone(&claimed);
        let total = args.due;
        workers.push(tokio::spawn(async move {
            let mut lateness = Vec::new();
            let request = ClaimWorkRequest {
                per_session_limit: Some(1),
                ..ClaimWorkRequest::new(
                    format!("worker-{worker}"),
                    vec![ConsumerDeclaration::targeted(CONSUMER)],
                    30_000,
                )
                .with_limit(1)
                .with_wait_ms(250)
            };
            while claimed.load(std::sync::atomic::Ordering::SeqCst) < total {
                let result = store.claim_work(request.clone()).await?;
                let now = SystemClock.now_ms();
                for (_, head) in result.heads() {
                    if let Some(due) = head.event.payload.get("due").and_then(|d| d.as_i64()) {
                        lateness.push((due, now - due));
                    }
                    claimed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    store
                        .complete_attempt(CompleteRequest::for_head(head, vec![]))
                        .await?;
                }
            }
            Ok::<_, a2_store_api::StoreError>(lateness)
        }));
    }
    let deadline =
        Duration::from_millis(u64::try_from(args.span_ms).unwrap_or(0)) + Duration::from_secs(60);
    tokio::time::timeout(deadline, producer).await???;
    let mut claims = Vec::new();
    for worker in workers {
        let lateness = tokio::time::timeout(deadline, worker).await???;
        claims.extend(lateness);
    }
    if let Ok(path) = std::env::var("A2_LATENESS_CSV") {
        // Every due head's time and lateness, for a look at when the late ones came.
        claims.sort_unstable();
        let rows: Vec<String> = claims
            .iter()
            .map(|(due, late)| format!("{due},{late}"))
            .collect();
        std::fs::write(&path, format!("due_ms,lateness_ms\n{}\n", rows.join("\n")))?;
    }
    let mut all: Vec<i64> = claims.iter().map(|(_, late)| *late).collect();
    all.sort_unstable();
    println!(
        "{}: {} due heads among {} scheduled for later, {} workers: lateness p50 {} ms, p99 {} ms, max {} ms",
        factory.name(),
        all.len(),
        args.future,
        args.workers,
        percentile(&all, 0.50),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or(0)
    );
    Ok(())
}
