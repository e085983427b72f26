//! A complete worker program on any store URL.
//!
//! ```sh
//! cargo run -p a2-worker --example worker -- sqlite:app.db
//! cargo run -p a2-worker --example worker -- postgres://postgres@127.0.0.1:5432/test
//! cargo run -p a2-worker --example worker -- sqlite:app.db --demo 100
//! ```
//!
//! It serves the consumer `agent`: every `msg` event targeted at it (on any
//! lane, in any session) is answered with a `reply` event, stored by the
//! completion with the message as its cause. Other event types are
//! dead-lettered at once (a permanent error). It runs until Ctrl-C, then
//! shuts down gracefully and prints what it did.
//!
//! With `--demo N` it first appends N messages over a few sessions, then
//! stops by itself once every one is answered, and exits non-zero if any
//! was not answered exactly once (CI runs it this way).

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::{ConsumerDeclaration, NewEvent, OpenOptions, ReadOptions, Store, Target};
use a2_worker::{handler_fn, HandlerError, Job, RetryPolicy, Worker};
use serde_json::json;

const CONSUMER: &str = "agent";

/// The handler: a reply per message.
async fn reply(job: Job) -> a2_worker::HandlerResult {
    if job.event().event_type != "msg" {
        return Err(HandlerError::permanent(format!(
            "cannot answer a '{}' event",
            job.event().event_type
        )));
    }
    let text = job.event().payload["text"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    Ok(vec![NewEvent::new(
        "reply",
        json!({ "text": format!("you said: {text}") }),
    )])
}

fn sessions(demo: usize) -> Vec<String> {
    (0..demo.clamp(1, 8)).map(|n| format!("demo-{n}")).collect()
}

/// Appends `count` messages over the demo sessions, on two lanes each.
async fn produce(store: &dyn Store, count: usize) -> Result<(), a2_store::StoreError> {
    let sessions = sessions(count);
    for n in 0..count {
        let session = &sessions[n % sessions.len()];
        let lane = format!("lane-{}", n % 2);
        let message = NewEvent::new("msg", json!({ "text": format!("message {n}") }))
            .with_target(Target::lane(CONSUMER, lane));
        store
            .append(session, vec![message], Default::default())
            .await?;
    }
    Ok(())
}

/// How many demo messages have exactly one reply, and whether any has more.
async fn answered(store: &dyn Store, count: usize) -> Result<(usize, bool), a2_store::StoreError> {
    let mut once = 0;
    let mut twice = false;
    for session in sessions(count) {
        let rows = store.read(&session, ReadOptions::default()).await?;
        for message in rows.iter().filter(|row| row.event_type == "msg") {
            let replies = rows
                .iter()
                .filter(|row| row.cause.as_ref().is_some_and(|c| c.index == message.index))
                .count();
            once += usize::from(replies == 1);
            twice |= replies > 1;
        }
    }
    Ok((once, twice))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(url) = args.next() else {
        eprintln!("usage: worker URL [--demo N]   (URL: sqlite:PATH, postgres://..., memory:)");
        std::process::exit(2);
    };
    let demo: Option<usize> = match (args.next().as_deref(), args.next()) {
        (Some("--demo"), Some(n)) => Some(n.parse()?),
        (None, _) => None,
        _ => {
            eprintln!("usage: worker URL [--demo N]");
            std::process::exit(2);
        }
    };

    let store: Arc<dyn Store> = a2_store::open(&url, OpenOptions::default()).await?;
    let worker = Worker::builder(Arc::clone(&store))
        .consumer(ConsumerDeclaration::targeted(CONSUMER), handler_fn(reply))
        .lease_ttl(Duration::from_secs(30))
        .max_in_flight(16)
        .retry(RetryPolicy::default())
        .shutdown_grace(Duration::from_secs(10))
        .build()?;
    println!("worker {} serving '{CONSUMER}' on {url}", worker.holder());

    let summary = match demo {
        None => {
            worker
                .run_until(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
        }
        Some(count) => {
            produce(store.as_ref(), count).await?;
            let handle = worker.spawn()?;
            let start = Instant::now();
            loop {
                let (once, twice) = answered(store.as_ref(), count).await?;
                if twice {
                    return Err("a message was answered twice".into());
                }
                if once == count {
                    break;
                }
                if start.elapsed() > Duration::from_secs(60) {
                    return Err(format!("only {once} of {count} messages answered").into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            println!("all {count} messages answered once");
            handle.shutdown().await
        }
    };
    println!("stopped: {:?}", summary.stats);
    if let Some(error) = summary.error {
        return Err(error.into());
    }
    Ok(())
}
