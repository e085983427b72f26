//! The load test: 4 worker processes (this test binary re-run in a child
//! role) share one session on PostgreSQL while this process keeps
//! appending. Every head is completed exactly once across processes, FIFO
//! lanes finish in log order, and a subscriber in one child sees every row
//! appended by the others, in order, with no gap and no duplicate (through
//! `LISTEN`/`NOTIFY`). Runs only when `A2_POSTGRES_URL` is set.

mod support;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, ListSessions,
    NewEvent, RandomIds, Store, SystemClock, Target,
};
use a2_store_postgres::PostgresStore;
use futures::StreamExt;
use serde_json::json;
use support::PgFactory;

const CHILD_SCHEMA: &str = "A2_PG_LOAD_CHILD_SCHEMA";
const CHILD_ID: &str = "A2_PG_LOAD_CHILD_ID";
const CHILD_TOTAL: &str = "A2_PG_LOAD_TOTAL";
const PROCESSES: usize = 4;
const BATCHES: u64 = 60;
const PER_BATCH: u64 = 4;
const LANES: u64 = 8;
const SESSION: &str = "load";

/// The rows the parent appends in all.
const TOTAL: u64 = BATCHES * PER_BATCH;

async fn connect(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::connect(
        url,
        support::options(schema, Arc::new(SystemClock), Arc::new(RandomIds)),
    )
    .await
    .expect("connect")
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn four_processes_share_one_session() {
    if std::env::var(CHILD_SCHEMA).is_ok() {
        return; // A child runs only `child_role`.
    }
    let Some(factory) = PgFactory::from_env("load") else {
        return;
    };
    let schema = factory.schema();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = runtime.block_on(connect(factory.url(), &schema));
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..PROCESSES)
        .map(|id| {
            Command::new(&exe)
                .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
                .env(CHILD_SCHEMA, &schema)
                .env(CHILD_ID, id.to_string())
                .env(CHILD_TOTAL, TOTAL.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a worker process")
        })
        .collect();
    // Append while the workers run.
    runtime.block_on(async {
        for batch in 0..BATCHES {
            let events = (0..PER_BATCH)
                .map(|k| {
                    let n = batch * PER_BATCH + k;
                    NewEvent::new("job", json!({ "n": n }))
                        .with_id(format!("job-{n}"))
                        .with_target(Target::event("fanout"))
                        .with_target(Target::lane("ordered", format!("L{}", n % LANES)))
                })
                .collect();
            store
                .append(SESSION, events, AppendOptions::default())
                .await
                .expect("append");
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    });
    let mut completed: Vec<(String, String, u64)> = Vec::new();
    let mut subscribed = 0;
    for child in children {
        let output = child.wait_with_output().expect("worker process");
        assert!(output.status.success(), "a worker process failed");
        let text = String::from_utf8(output.stdout).expect("utf-8 output");
        for line in text.lines() {
            // The harness may print "test child_role ... " before our first line.
            let line = ["DONE ", "SUBSCRIBED "]
                .iter()
                .find_map(|tag| line.find(tag).map(|at| &line[at..]))
                .unwrap_or("");
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.as_slice() {
                ["DONE", consumer, lane, index] => completed.push((
                    (*consumer).to_owned(),
                    (*lane).to_owned(),
                    index.parse().expect("index"),
                )),
                ["SUBSCRIBED", count] => subscribed = count.parse().expect("count"),
                _ => {}
            }
        }
    }
    let unique: BTreeSet<_> = completed.iter().cloned().collect();
    assert_eq!(unique.len(), completed.len(), "a head was completed twice");
    let mut expected = BTreeSet::new();
    for index in 1..=TOTAL {
        expected.insert(("fanout".to_owned(), "-".to_owned(), index));
        let lane = format!("L{}", (index - 1) % LANES);
        expected.insert(("ordered".to_owned(), lane, index));
    }
    assert_eq!(unique, expected, "every head completed exactly once");
    assert_eq!(subscribed, TOTAL, "the subscriber saw every row");
    let settled = runtime.block_on(store.claim_available(ClaimRequest {
        session_id: SESSION.to_owned(),
        holder: "check".to_owned(),
        ttl_ms: Some(1000),
        ..ClaimRequest::default()
    }));
    assert!(matches!(settled, Ok(ClaimResult::Settled)), "{settled:?}");
}

/// The worker process: claims and completes until the session is drained,
/// printing `DONE consumer lane index` per completion; child 0 also
/// subscribes and prints `SUBSCRIBED n` after seeing every row in order.
/// Outside a load test (no child environment) it has nothing to do.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[test]
fn child_role() {
    let (Ok(schema), Ok(url)) = (std::env::var(CHILD_SCHEMA), std::env::var(support::URL_VAR))
    else {
        return;
    };
    let id: usize = std::env::var(CHILD_ID)
        .expect("child id")
        .parse()
        .expect("id");
    let total: u64 = std::env::var(CHILD_TOTAL)
        .expect("total")
        .parse()
        .expect("total");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = connect(&url, &schema).await;
        let subscriber = (id == 0).then(|| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut stream = store.subscribe(SESSION, 0).await.expect("subscribe");
                let mut last = 0;
                while last < total {
                    let event = stream.next().await.expect("stream open").expect("row");
                    assert_eq!(event.index, last + 1, "no gap, no duplicate");
                    last = event.index;
                }
                last
            })
        });
        let mut workers = Vec::new();
        for w in 0..2 {
            let store = store.clone();
            workers.push(tokio::spawn(work(store, format!("p{id}-w{w}"), total)));
        }
        let mut lines = Vec::new();
        for worker in workers {
            lines.extend(worker.await.expect("worker"));
        }
        for line in lines {
            println!("{line}");
        }
        if let Some(subscriber) = subscriber {
            let seen = tokio::time::timeout(Duration::from_secs(60), subscriber)
                .await
                .expect("subscriber finished")
                .expect("subscriber");
            println!("SUBSCRIBED {seen}");
        }
    });
}

async fn work(store: PostgresStore, holder: String, total: u64) -> Vec<String> {
    let mut done = Vec::new();
    loop {
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: SESSION.to_owned(),
                holder: holder.clone(),
                ttl_ms: Some(60_000),
                limit: Some(4),
                ..ClaimRequest::default()
            })
            .await
            .expect("claim");
        let heads = match claimed {
            ClaimResult::Claimed { heads, .. } => heads,
            _ => {
                let sessions = store
                    .sessions(ListSessions::default())
                    .await
                    .expect("sessions");
                let head = sessions.first().map_or(0, |s| s.head);
                if head >= total && matches!(claimed, ClaimResult::Settled) {
                    return done;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        for head in heads {
            let result = store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: SESSION.to_owned(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    events: Vec::new(),
                    consumers: None,
                })
                .await
                .expect("complete");
            assert!(matches!(result, CompleteResult::Completed { .. }));
            let lane = head.lane.clone().unwrap_or_else(|| "-".to_owned());
            done.push(format!(
                "DONE {} {lane} {}",
                head.consumer, head.event.index
            ));
        }
    }
}
