//! A console over an in-memory store with a few sessions in it, nested
//! under `/console`, with writes allowed: `cargo run -p a2-store-console
//! --example demo [ADDR]`, then open http://127.0.0.1:7801/console.
//! Appends a "tick" event to `chat-1` every 5 s so the timeline moves.

use std::time::Duration;

use a2_store::prelude::*;
use a2_store_console::{router, ConsoleOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7801".to_owned());
    let store = a2_store::open("memory:", OpenOptions::default()).await?;
    let lease = Duration::from_secs(30);
    for n in 1..=12 {
        let session = format!("chat-{n}");
        let messages = (1..=3)
            .map(|i| {
                NewEvent::new("msg", json!({"text": format!("message {i} of {session}")}))
                    .with_target(Target::lane("agent", "main"))
            })
            .collect();
        store
            .append(&session, messages, AppendOptions::default())
            .await?;
        let heads = store
            .claim_available(ClaimRequest::new(&session, "worker-1", lease))
            .await?
            .into_heads();
        if let Some(head) = heads.first() {
            if n % 3 == 0 {
                store
                    .fail_attempt(FailRequest::for_head(head, "model timed out", 1))
                    .await?;
            } else if n % 3 == 1 {
                let reply = NewEvent::new("reply", json!({"text": "hello back"}));
                store
                    .complete_attempt(CompleteRequest::for_head(head, vec![reply]))
                    .await?;
            }
        }
    }
    let ticker = store.clone();
    tokio::spawn(async move {
        for tick in 1u64.. {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let event = NewEvent::new("tick", json!({ "tick": tick }));
            if ticker
                .append("chat-1", vec![event], AppendOptions::default())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let options = ConsoleOptions::default()
        .with_writes(true)
        .with_consumers(vec!["agent".into()]);
    let app = axum::Router::new().nest("/console", router(store, options));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("console on http://{addr}/console");
    axum::serve(listener, app).await?;
    Ok(())
}
