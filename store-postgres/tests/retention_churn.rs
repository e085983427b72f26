//! Storage under churn: sessions created, worked to the end (claim, then a
//! completion returning one event) and pruned as fast as they come, while
//! another connection holds a transaction open (`BEGIN; SELECT
//! txid_current();`) the whole run, so vacuum can remove no dead row. The
//! state tables are kept bounded by the store's rotation; the schema's
//! total size (tables, indexes, TOAST) at the end must stay within twice
//! its size after the first rounds. Short form by default (20 rounds of 200
//! sessions); `A2_SOAK=1` runs 200 rounds. Runs only when
//! `A2_POSTGRES_URL` is set.

mod support;

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, ClaimRequest, CompleteRequest, CompleteResult, ManualClock, NewEvent,
    PruneRequest, RandomIds, Store, Target,
};
use a2_store_postgres::{PostgresOptions, PostgresStore, Rotation};
use serde_json::json;
use support::PgFactory;

/// Sessions per round.
const SESSIONS: usize = 200;

/// Rounds measured as "early": the size after them is the reference.
const EARLY: usize = 3;

/// Concurrent workers creating and finishing sessions.
const WORKERS: usize = 8;

/// Bytes of every table of `schema` with its indexes and TOAST, by table.
async fn sizes(client: &tokio_postgres::Client, schema: &str) -> Vec<(String, i64)> {
    client
        .query(
            "SELECT c.relname::text, pg_total_relation_size(c.oid) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 2 DESC",
            &[&schema],
        )
        .await
        .expect("sizes")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

fn total(sizes: &[(String, i64)]) -> i64 {
    sizes.iter().map(|(_, bytes)| bytes).sum()
}

/// One session from its first event to its end: the message appended, its
/// head claimed and completed with a reply.
async fn one_session(store: &PostgresStore, session: &str) {
    let message = NewEvent::new("msg", json!({"text": "hello there"}))
        .with_target(Target::lane("agent", "main"));
    store
        .append(session, vec![message], AppendOptions::default())
        .await
        .expect("append");
    let claim = ClaimRequest::new(session, "w", Duration::from_secs(60));
    let heads = store
        .claim_available(claim)
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(heads.len(), 1, "{session}: {heads:?}");
    let reply = NewEvent::new("reply", json!({"text": "hi"}));
    let done = store
        .complete_attempt(CompleteRequest::for_head(&heads[0], vec![reply]))
        .await
        .expect("complete");
    assert!(matches!(done, CompleteResult::Completed { .. }), "{done:?}");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_churn_keeps_the_schema_bounded_under_a_held_transaction() {
    let Some(factory) = PgFactory::from_env("retention_churn") else {
        return;
    };
    let soak = std::env::var("A2_SOAK").is_ok_and(|v| v == "1");
    let rounds = if soak { 200 } else { 20 };
    let schema = factory.schema();
    let clock = ManualClock::new(1_000_000);
    let store = PostgresStore::connect(
        factory.url(),
        PostgresOptions {
            pool_size: WORKERS + 2,
            rotation: Rotation {
                interval: Some(Duration::from_millis(200)),
                ..Rotation::default()
            },
            ..support::options(&schema, Arc::new(clock.clone()), Arc::new(RandomIds))
        },
    )
    .await
    .expect("connect");
    let holder = support::raw_client(factory.url()).await;
    holder
        .batch_execute("BEGIN; SELECT txid_current();")
        .await
        .expect("hold a transaction open");
    let client = support::raw_client(factory.url()).await;
    let mut early = None;
    for round in 0..rounds {
        let tasks: Vec<_> = (0..WORKERS)
            .map(|worker| {
                let store = store.clone();
                tokio::spawn(async move {
                    for n in (worker..SESSIONS).step_by(WORKERS) {
                        one_session(&store, &format!("r{round}-s{n}")).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("worker");
        }
        clock.advance(60_000);
        let mut pruned = 0;
        let mut after = None;
        loop {
            let page = store
                .prune(
                    PruneRequest::idle_for(Duration::from_secs(30))
                        .with_limit(100)
                        .after(after),
                )
                .await
                .expect("prune");
            pruned += page.sessions.len();
            after = page.next;
            if after.is_none() {
                break;
            }
        }
        assert_eq!(pruned, SESSIONS, "round {round}");
        // Let the periodic rotation see the round.
        tokio::time::sleep(Duration::from_millis(300)).await;
        if round + 1 == EARLY {
            let measured = sizes(&client, &schema).await;
            eprintln!(
                "after {EARLY} rounds: {} bytes {measured:?}",
                total(&measured)
            );
            early = Some(total(&measured));
        }
    }
    let end = sizes(&client, &schema).await;
    eprintln!("after {rounds} rounds: {} bytes {end:?}", total(&end));
    let early = early.expect("measured early");
    holder.batch_execute("ROLLBACK").await.expect("release");
    assert!(
        total(&end) <= 2 * early,
        "the schema grew from {early} to {} bytes",
        total(&end)
    );
}
