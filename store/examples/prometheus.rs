//! Serves the store layer's metrics to Prometheus, runs a small workload,
//! scrapes its own endpoint once, prints what Prometheus would read and exits.
//!
//! ```text
//! cargo run -p a2-store --features metrics --example prometheus
//! ```
//!
//! The endpoint is `http://127.0.0.1:9464/metrics` (only the loopback
//! address; `A2_METRICS_PORT` picks another port). Set
//! `A2_METRICS_SERVE_SECS=60` to keep serving for a minute after the
//! workload, long enough to point a Prometheus `scrape_configs` job at it:
//!
//! ```yaml
//! scrape_configs:
//!   - job_name: a2-store
//!     static_configs: [{ targets: ["127.0.0.1:9464"] }]
//! ```
//!
//! An app does the same in two steps: install a recorder (here
//! `metrics-exporter-prometheus`) at start-up, then open its store with
//! `OpenOptions::default().with_metrics(true)`.

use std::error::Error;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use a2_store::{
    ClaimRequest, ClaimResult, CompleteRequest, FailRequest, NewEvent, OpenOptions, Store, Target,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use serde_json::json;

const SESSION: &str = "example";

fn main() -> Result<(), Box<dyn Error>> {
    let port = match std::env::var("A2_METRICS_PORT") {
        Ok(port) => port.parse()?,
        Err(_) => 9464,
    };
    let serve = match std::env::var("A2_METRICS_SERVE_SECS") {
        Ok(secs) => Duration::from_secs(secs.parse()?),
        Err(_) => Duration::ZERO,
    };
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // The recorder every `metrics` call of the process reports to, and
        // the HTTP listener that renders it for Prometheus.
        // Buckets make the latency a Prometheus histogram (the exporter
        // renders a summary otherwise): 50 µs to 1 s.
        let (recorder, exporter) = PrometheusBuilder::new()
            .with_http_listener(address)
            .set_buckets_for_metric(
                Matcher::Full("a2_store_call_duration_seconds".into()),
                &[
                    0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0,
                ],
            )?
            .build()?;
        metrics::set_global_recorder(recorder)?;
        tokio::spawn(exporter);

        let options = OpenOptions::default().with_metrics(true);
        let store = a2_store::open("memory:", options).await?;
        workload(store.as_ref()).await?;

        if !serve.is_zero() {
            eprintln!("serving http://{address}/metrics for {serve:?}");
            tokio::time::sleep(serve).await;
        }
        let body = tokio::task::spawn_blocking(move || scrape(address)).await??;
        for line in body.lines().filter(|line| line.contains("a2_store_")) {
            println!("{line}");
        }
        Ok(())
    })
}

/// Ten claim/complete rounds on one lane, a busy answer, and one head
/// failed into the dead letters.
async fn workload(store: &dyn Store) -> Result<(), Box<dyn Error>> {
    let target = Target::lane("agent", "main");
    let claim = |holder: &str| ClaimRequest {
        session_id: SESSION.into(),
        holder: holder.into(),
        ttl_ms: Some(30_000),
        ..ClaimRequest::default()
    };
    for round in 0..11 {
        let event = NewEvent::new("msg", json!({ "round": round })).with_target(target.clone());
        store
            .append(SESSION, vec![event], Default::default())
            .await?;
        let ClaimResult::Claimed { heads, .. } = store.claim_available(claim("worker")).await?
        else {
            return Err("nothing to claim".into());
        };
        for head in heads {
            if round == 5 {
                // Another worker asks while the head is held: busy.
                store.claim_available(claim("other")).await?;
            }
            if round == 10 {
                store
                    .fail_attempt(FailRequest {
                        incarnation: None,
                        session_id: SESSION.into(),
                        consumer: head.consumer.clone(),
                        lane: head.lane.clone(),
                        index: head.event.index,
                        attempt: head.dispatch.attempt_count,
                        error: "handler gave up".into(),
                        max_failures: Some(1),
                        retry_after_ms: None,
                    })
                    .await?;
                continue;
            }
            store
                .complete_attempt(CompleteRequest {
                    session_id: SESSION.into(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    ..CompleteRequest::default()
                })
                .await?;
        }
    }
    Ok(())
}

/// One plain HTTP/1.1 GET of `/metrics`, the way Prometheus scrapes it.
fn scrape(address: SocketAddr) -> Result<String, std::io::Error> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}
