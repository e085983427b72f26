//! Paced workload: a producer appends messages at a steady rate over many
//! sessions (one lane each) while three workers serve them; reports
//! throughput and append→handler-start latency (p50, p99, max), overall and
//! for each session's first message, per backend.
//!
//! `cargo bench -p a2-worker --bench paced` runs memory and a SQLite file
//! (normal and full synchronous); `A2_POSTGRES_URL` adds PostgreSQL in a
//! fresh schema, dropped afterwards. `A2_WORKER_PACED_SECONDS` (default 5), `A2_WORKER_PACED_RATE`
//! (messages per second, default 200) and `A2_WORKER_PACED_SESSIONS`
//! (default 200) size it; with `--test` (as CI runs benches) each backend
//! runs for a fifth of a second.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2_store::postgres::{fresh_schema_name, ScratchSchemas};
use a2_store::{ConsumerDeclaration, NewEvent, OpenOptions, Store, Target};
use a2_worker::{handler_fn, Job, Worker, WorkerHandle};
use serde_json::json;

const CONSUMER: &str = "agent";
const WORKERS: usize = 3;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Latencies {
    all: Vec<Duration>,
    first: Vec<Duration>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run(name: &str, url: &str, seconds: f64, rate: f64, sessions: usize) {
    let store: Arc<dyn Store> = a2_store::open(url, OpenOptions::default())
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"));
    let start = Instant::now();
    let latencies = Arc::new(Mutex::new(Latencies::default()));
    let workers: Vec<WorkerHandle> = (0..WORKERS)
        .map(|n| {
            let latencies = Arc::clone(&latencies);
            let handler = handler_fn(move |job: Job| {
                let sent = job.event().payload["sent_us"].as_u64().unwrap_or(0);
                let first = job.event().payload["first"].as_bool().unwrap_or(false);
                let waited = start.elapsed().saturating_sub(Duration::from_micros(sent));
                if job.attempt() == 1 {
                    let mut latencies = latencies.lock().unwrap_or_else(|e| e.into_inner());
                    latencies.all.push(waited);
                    if first {
                        latencies.first.push(waited);
                    }
                }
                async move { Ok(Vec::new()) }
            });
            Worker::builder(Arc::clone(&store))
                .holder(format!("paced-{n}"))
                .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
                .build()
                .expect("worker")
                .spawn()
                .expect("spawn")
        })
        .collect();
    let total = (seconds * rate).round().max(1.0) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let produce_start = Instant::now();
    for n in 0..total {
        let due = produce_start + interval.mul_f64(n as f64);
        tokio::time::sleep_until(due.into()).await;
        let session = format!("{name}-s{:04}", n % sessions);
        let sent_us = start.elapsed().as_micros() as u64;
        let event = NewEvent::new("msg", json!({"sent_us": sent_us, "first": n < sessions}))
            .with_target(Target::lane(CONSUMER, "main"));
        store
            .append(&session, vec![event], Default::default())
            .await
            .expect("append");
    }
    let produced = produce_start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    while workers.iter().map(|w| w.stats().completed).sum::<u64>() < total as u64 {
        assert!(
            Instant::now() < deadline,
            "{name}: messages left unprocessed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = produce_start.elapsed();
    let mut duplicates = 0;
    for worker in workers {
        let summary = worker.shutdown().await;
        duplicates += summary.stats.superseded;
    }
    let mut latencies = std::mem::take(&mut *latencies.lock().unwrap_or_else(|e| e.into_inner()));
    latencies.all.sort();
    latencies.first.sort();
    println!(
        "paced {name:<16} {total} msgs at {rate:.0}/s over {sessions} sessions, {WORKERS} workers: \
         {:.0} msg/s; append->start p50 {:.2} ms p99 {:.2} ms max {:.2} ms; \
         first message p99 {:.2} ms; superseded {duplicates} (producer took {:.2} s)",
        total as f64 / elapsed.as_secs_f64(),
        ms(percentile(&latencies.all, 0.50)),
        ms(percentile(&latencies.all, 0.99)),
        ms(percentile(&latencies.all, 1.0)),
        ms(percentile(&latencies.first, 0.99)),
        produced.as_secs_f64(),
    );
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds = if test_mode {
        0.2
    } else {
        env_or("A2_WORKER_PACED_SECONDS", 5.0)
    };
    let rate = env_or("A2_WORKER_PACED_RATE", 200.0);
    let sessions = env_or("A2_WORKER_PACED_SESSIONS", 200usize);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut targets = vec![
        ("memory".to_owned(), "memory:".to_owned()),
        (
            "sqlite-normal".to_owned(),
            format!("sqlite:{}", dir.path().join("normal.db").display()),
        ),
        (
            "sqlite-full".to_owned(),
            format!(
                "sqlite:{}?durability=full",
                dir.path().join("full.db").display()
            ),
        ),
    ];
    let mut scratch = None;
    if let Ok(server) = std::env::var("A2_POSTGRES_URL") {
        let schema = fresh_schema_name("a2w_").expect("schema name");
        let schemas = ScratchSchemas::new(server.clone(), "a2w_");
        schemas.adopt(&schema).expect("adopt the schema");
        let joiner = if server.contains('?') { '&' } else { '?' };
        targets.push((
            "postgres".to_owned(),
            format!("{server}{joiner}schema={schema}"),
        ));
        scratch = Some(schemas);
    }
    for (name, url) in &targets {
        runtime.block_on(run(name, url, seconds, rate, sessions));
    }
    if let Some(schemas) = scratch {
        runtime
            .block_on(schemas.drop_all())
            .expect("drop the schema");
    }
}
