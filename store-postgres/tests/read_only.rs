//! Read-only connects: no schema is created or migrated, and the server
//! refuses every write.

mod support;

use a2_store_api::{ErrorCode, ListSessions, NewEvent, ReadOptions, Store};
use a2_store_postgres::scratch::schema_exists;
use a2_store_postgres::{PostgresOptions, PostgresStore, ScratchSchemas};
use serde_json::json;

fn options(schema: &str, read_only: bool) -> PostgresOptions {
    PostgresOptions {
        pool_size: 2,
        // Both connections open and warmed at connect: a read-only store's
        // warm-up writes nothing either.
        min_idle: 2,
        schema: schema.to_owned(),
        read_only,
        ..PostgresOptions::default()
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test]
async fn a_read_only_store_creates_nothing_and_refuses_writes() {
    let Some(url) = support::url_or_skip("read_only") else {
        return;
    };
    let scratch = ScratchSchemas::new(url.clone(), "a2t_ro_");
    let schema = scratch.fresh_schema().unwrap();

    let Err(error) = PostgresStore::connect(&url, options(&schema, true)).await else {
        panic!("a missing schema must be refused");
    };
    assert_eq!(error.code(), ErrorCode::Backend);
    assert!(error.to_string().contains(&schema), "{error}");
    assert!(
        !schema_exists(&url, &schema).await.unwrap(),
        "never created"
    );

    let writer = PostgresStore::connect(&url, options(&schema, false))
        .await
        .unwrap();
    writer
        .append(
            "s",
            vec![NewEvent::new("msg", json!(1))],
            Default::default(),
        )
        .await
        .unwrap();
    let reader = PostgresStore::connect(&url, options(&schema, true))
        .await
        .unwrap();
    assert_eq!(
        reader
            .sessions(ListSessions::default())
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        reader
            .read("s", ReadOptions::default())
            .await
            .unwrap()
            .len(),
        1
    );
    let error = reader
        .append(
            "s",
            vec![NewEvent::new("msg", json!(2))],
            Default::default(),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("read-only"), "{error}");
    assert_eq!(error.code(), ErrorCode::InvalidInput);

    // A failover-ready URL asks for the writable server: a read-only store
    // must still find it (its read-only mode is set after connecting).
    let join = if url.contains('?') { '&' } else { '?' };
    let failover_url = format!("{url}{join}target_session_attrs=read-write");
    let reader = PostgresStore::connect(&failover_url, options(&schema, true))
        .await
        .unwrap();
    assert_eq!(
        reader
            .read("s", ReadOptions::default())
            .await
            .unwrap()
            .len(),
        1
    );
    let error = reader
        .append(
            "s",
            vec![NewEvent::new("msg", json!(3))],
            Default::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
    assert_eq!(
        writer
            .read("s", ReadOptions::default())
            .await
            .unwrap()
            .len(),
        1
    );
}
