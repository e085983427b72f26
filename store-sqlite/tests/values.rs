//! Values at the edges of their types round-trip through the database.

use a2_store_api::{NewEvent, PresenceMeta, ReadOptions, Store};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

#[tokio::test]
async fn presence_keeps_any_seen_index_bit_for_bit() {
    let store = SqliteStore::open_in_memory(SqliteOptions::default()).unwrap();
    let values = [("cursor".to_owned(), json!(3))].into_iter().collect();
    let meta = PresenceMeta {
        at: 1,
        seen: Some(u64::MAX),
        ttl_ms: 60_000,
    };
    store.set_presence("s", "ann", values, meta).await.unwrap();
    let rows = store.read_presence("s").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].seen, Some(u64::MAX));
}

#[tokio::test]
async fn payloads_of_every_json_shape_round_trip() {
    let store = SqliteStore::open_in_memory(SqliteOptions::default()).unwrap();
    let payloads = vec![
        json!(null),
        json!(true),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1.5e300),
        json!("quote \" and unicode \u{1F600} and nul \u{0}"),
        json!([1, [2, [3]], {"a": {}}]),
        json!({"nested": {"deep": [null, false, "x"]}}),
    ];
    let events = payloads
        .iter()
        .map(|payload| NewEvent::new("msg", payload.clone()))
        .collect();
    store.append("s", events, Default::default()).await.unwrap();
    let rows = store.read("s", ReadOptions::default()).await.unwrap();
    let read: Vec<_> = rows.into_iter().map(|row| row.payload).collect();
    assert_eq!(read, payloads);
}
