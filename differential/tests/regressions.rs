//! One test per divergence the differential test found and that is still
//! open, as the shrunk reproduction. Each fails, saying what is expected,
//! until the backend is fixed; then it stays as a regression test.

mod support;

use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_store_api::*;
use serde_json::json;

async fn open(factory: &dyn StoreFactory) -> Arc<dyn Store> {
    factory
        .create(
            Arc::new(ManualClock::new(1_000_000)),
            Arc::new(CounterIds::new("id-")),
        )
        .await
        .unwrap()
}

/// Known bug 1: declarations passed with an empty batch (or a replay, or a
/// redrive that finds nothing) must refresh log cursor types (CONTRACT,
/// Cursors: "Declarations passed to any call refresh the cursor's types").
async fn empty_append_refreshes_log_types(factory: &dyn StoreFactory) {
    let store = open(factory).await;
    let declare = |types: Option<Vec<String>>| AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("audit", "log", types, false)]),
        origin_index: None,
    };
    store
        .append("s0", vec![NewEvent::new("msg", json!(0))], declare(None))
        .await
        .unwrap();
    store
        .append("s0", vec![], declare(Some(vec!["msg".into()])))
        .await
        .unwrap();
    let cursors = store.cursors("s0").await.unwrap();
    assert_eq!(
        cursors[0].types,
        Some(vec!["msg".to_owned()]),
        "{}: an empty append declaring (audit, log) with types [msg] must refresh the cursor's types, as the memory reference does",
        factory.name()
    );
    store
        .redrive(RedriveRequest {
            session_id: "s0".into(),
            consumer: "agent".into(),
            index: 1,
            action: RedriveAction::Retry,
            consumers: Some(vec![ConsumerDeclaration::log("audit", "log", None, false)]),
        })
        .await
        .unwrap();
    let cursors = store.cursors("s0").await.unwrap();
    assert_eq!(
        cursors[0].types,
        None,
        "{}: a redrive that finds nothing but declares (audit, log) with all types must refresh the cursor's types, as the memory reference does",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_empty_append_refreshes_log_types() {
    empty_append_refreshes_log_types(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_empty_append_refreshes_log_types() {
    empty_append_refreshes_log_types(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_empty_append_refreshes_log_types() {
    let Some(factory) = support::Postgres::from_env("postgres_empty_append_refreshes_log_types")
    else {
        return;
    };
    empty_append_refreshes_log_types(&factory).await;
}

/// Known bug 2: a batch refused for a target-lane conflict must not draw
/// ids from the generator ("a failed call changes nothing"; stores on equal
/// generators must agree).
async fn refused_batch_draws_no_ids(factory: &dyn StoreFactory) {
    let store = open(factory).await;
    let declared = AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("audit", "log", None, false)]),
        origin_index: None,
    };
    store
        .append("s0", vec![NewEvent::new("msg", json!(0))], declared)
        .await
        .unwrap();
    let conflict = store
        .append(
            "s0",
            vec![
                NewEvent::new("msg", json!(0)).with_target(Target::lane("audit", "log")),
                NewEvent::new("msg", json!(0)),
            ],
            AppendOptions::default(),
        )
        .await;
    assert_eq!(conflict.unwrap_err().code(), ErrorCode::InvalidInput);
    let next = store
        .append(
            "s0",
            vec![NewEvent::new("msg", json!(0))],
            AppendOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        next.events[0].id,
        "id-2",
        "{}: the refused batch drew ids from the generator (memory gives id-2 here)",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_refused_batch_draws_no_ids() {
    refused_batch_draws_no_ids(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refused_batch_draws_no_ids() {
    refused_batch_draws_no_ids(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refused_batch_draws_no_ids() {
    let Some(factory) = support::Postgres::from_env("postgres_refused_batch_draws_no_ids") else {
        return;
    };
    refused_batch_draws_no_ids(&factory).await;
}
