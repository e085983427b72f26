//! `rewrite_payloads` on PostgreSQL beyond the shared suite: a full page of
//! `MAX_REWRITE_ITEMS` events rewritten in one call (set based), and a
//! read-only store refusing it as every write.

mod support;

use std::sync::Arc;

use a2_store_api::{
    CounterIds, ErrorCode, ManualClock, NewEvent, PresenceMeta, ReadOptions,
    RewritePayloadsRequest, RewritePayloadsResult, Store, MAX_REWRITE_ITEMS,
};
use a2_store_postgres::{PostgresOptions, PostgresStore};
use serde_json::json;
use support::PgFactory;

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test]
async fn a_full_page_is_rewritten_in_one_call_and_read_only_stores_refuse() {
    let Some(factory) = PgFactory::from_env("rewrite") else {
        return;
    };
    let schema = factory.schema();
    let store = factory
        .store_on(
            &schema,
            Arc::new(ManualClock::new(1_000)),
            Arc::new(CounterIds::new("id-")),
        )
        .await
        .unwrap();
    let page = MAX_REWRITE_ITEMS as u64;
    let events = (1..=page)
        .map(|n| NewEvent::new("msg", json!({ "n": n })))
        .collect();
    store.append("s", events, Default::default()).await.unwrap();
    store
        .set_presence(
            "s",
            "alice",
            [("status".to_owned(), json!("typing"))]
                .into_iter()
                .collect(),
            PresenceMeta {
                at: 1,
                seen: None,
                ttl_ms: 60_000,
            },
        )
        .await
        .unwrap();
    let mut request = RewritePayloadsRequest::new("s");
    for n in 1..=page {
        request = request.event(n, json!({ "n": n }), json!({ "sealed": n }));
    }
    assert_eq!(
        store.rewrite_payloads(request).await.unwrap(),
        RewritePayloadsResult::new(page, 0, 0)
    );
    let rows = store.read("s", ReadOptions::default()).await.unwrap();
    assert_eq!(rows.len() as u64, page);
    assert!(rows
        .iter()
        .all(|row| row.payload == json!({ "sealed": row.index })));

    let reader = PostgresStore::connect(
        factory.url(),
        PostgresOptions {
            schema: schema.clone(),
            read_only: true,
            ..PostgresOptions::default()
        },
    )
    .await
    .unwrap();
    let rewrite = RewritePayloadsRequest::new("s")
        .event(1, json!({ "sealed": 1 }), json!("again"))
        .presence("alice", "status", json!("typing"), json!("sealed"));
    let error = reader.rewrite_payloads(rewrite).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
    assert!(error.to_string().contains("read-only"), "{error}");
    assert_eq!(
        store.read("s", ReadOptions::default()).await.unwrap()[0].payload,
        json!({ "sealed": 1 })
    );
}
