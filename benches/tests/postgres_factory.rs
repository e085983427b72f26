//! The PostgreSQL bench factory gives every store a schema of its own,
//! shares one schema between the two stores of a pair, drops a schema once
//! its stores are gone and drops the rest with the factory. Runs only when
//! `A2_POSTGRES_URL` is set.

use std::sync::Arc;

use a2_benches::postgres::{PostgresFactory, SCHEMA_PREFIX, URL_VAR};
use a2_conformance::StoreFactory;
use a2_store_api::{AppendOptions, ManualClock, NewEvent, RandomIds, ReadOptions, Store};
use a2_store_postgres::scratch::schema_exists;
use serde_json::json;

fn url_or_skip() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            // Straight to stderr, past the harness's capture: the skip must show.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "postgres_factory: not run: {URL_VAR} was unset after the build (e.g. \
                 {URL_VAR}=postgres://postgres@127.0.0.1:5432/test cargo test -p a2-benches)"
            );
            None
        }
    }
}

/// Whether `schema` exists on the server.
async fn exists(url: &str, schema: &str) -> bool {
    schema_exists(url, schema).await.unwrap()
}

async fn create(factory: &PostgresFactory) -> Arc<dyn Store> {
    factory
        .create(Arc::new(ManualClock::new(0)), Arc::new(RandomIds))
        .await
        .unwrap()
}

async fn append_one(store: &dyn Store) {
    store
        .append(
            "s",
            vec![NewEvent::new("note", json!({"n": 1}))],
            AppendOptions::default(),
        )
        .await
        .unwrap();
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_are_fresh_per_store_and_dropped_when_unused() {
    let Some(url) = url_or_skip() else {
        return;
    };
    let factory = PostgresFactory::new(url.clone());

    let first = create(&factory).await;
    append_one(first.as_ref()).await;
    let [a] = <[String; 1]>::try_from(factory.schemas()).unwrap();
    assert!(a.starts_with(SCHEMA_PREFIX), "{a}");
    assert!(exists(&url, &a).await);

    // A second store while the first lives: its own, empty schema.
    let second = create(&factory).await;
    let b = factory.schemas()[1].clone();
    assert_ne!(a, b);
    let rows = second.read("s", ReadOptions::default()).await.unwrap();
    assert!(rows.is_empty(), "a fresh schema holds no rows: {rows:?}");

    // Once the first store is gone, the next create drops its schema.
    drop(first);
    let third = create(&factory).await;
    assert!(!exists(&url, &a).await, "the unused schema {a} was dropped");
    assert!(!factory.schemas().contains(&a));
    assert!(exists(&url, &b).await, "a schema still in use stays");

    // A pair shares one schema.
    let [left, right] = factory
        .create_pair(Arc::new(ManualClock::new(0)), Arc::new(RandomIds))
        .await
        .unwrap()
        .unwrap();
    append_one(left.as_ref()).await;
    let rows = right.read("s", ReadOptions::default()).await.unwrap();
    assert_eq!(
        rows.len(),
        1,
        "the second store of a pair sees the first's rows"
    );

    let left_over = factory.schemas();
    assert_eq!(left_over.len(), 3, "{left_over:?}");
    drop((second, third, left, right));
    drop(factory);
    for schema in &left_over {
        assert!(
            !exists(&url, schema).await,
            "{schema} dropped with the factory"
        );
    }
}
