//! Pool options against a server (when `A2_POSTGRES_URL` is set): an
//! exhausted pool answers `Busy` within its acquire timeout, connections
//! carry the application name, idle or old connections are closed, and
//! `min_idle` connections are open from the start and replaced when they go.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, ErrorCode, NewEvent, RandomIds, ReadOptions, Store, SystemClock,
};
use a2_store_postgres::{PostgresOptions, ScratchSchemas};
use serde_json::json;

fn scratch(url: &str, options: PostgresOptions) -> ScratchSchemas {
    ScratchSchemas::new(url, support::SCHEMA_PREFIX).with_options(options)
}

/// A name no other test run uses, to find this store's connections.
fn unique_name(what: &str) -> String {
    format!("a2t-{what}-{}", uuid::Uuid::new_v4().simple())
}

/// How many connections with `name` the server has open.
async fn connections_named(client: &tokio_postgres::Client, name: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .expect("count connections")
        .get(0)
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test]
async fn an_exhausted_pool_is_busy_within_the_acquire_timeout() {
    let Some(url) = support::url_or_skip("pool") else {
        return;
    };
    let scratch = scratch(
        &url,
        PostgresOptions {
            pool_size: 1,
            pool_timeout: Some(Duration::from_millis(200)),
            statement_timeout: Duration::from_secs(10),
            ..PostgresOptions::default()
        },
    );
    let store = Arc::new(
        scratch
            .create(Arc::new(SystemClock), Arc::new(RandomIds))
            .await
            .expect("store"),
    );
    // Hold the only pooled connection: an append waiting on a table lock
    // taken behind the store's back.
    let mut locker = support::raw_client(&url).await;
    let tx = locker.transaction().await.expect("begin");
    tx.batch_execute(&format!(
        "LOCK TABLE \"{}\".sessions IN ACCESS EXCLUSIVE MODE",
        store.schema()
    ))
    .await
    .expect("lock");
    let holder = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .append(
                    "s",
                    vec![NewEvent::new("msg", json!({}))],
                    AppendOptions::default(),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let err = store
        .read("s", ReadOptions::default())
        .await
        .expect_err("no connection is free");
    let waited = started.elapsed();
    assert_eq!(err.code(), ErrorCode::Busy, "{err}");
    assert!(err.to_string().contains("pool is exhausted"), "{err}");
    assert!(err.to_string().contains("pool_timeout_ms"), "{err}");
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(2),
        "waited {waited:?} for a 200 ms acquire timeout"
    );
    tx.rollback().await.expect("unlock");
    holder
        .await
        .expect("holder task")
        .expect("the held append completes once the lock is gone");
    drop(store);
    scratch.drop_all().await.expect("drop schemas");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test]
async fn connections_carry_the_application_name_and_idle_ones_close() {
    let Some(url) = support::url_or_skip("pool") else {
        return;
    };
    let name = unique_name("idle");
    let scratch = scratch(
        &url,
        PostgresOptions {
            pool_size: 2,
            idle_timeout: Some(Duration::from_millis(300)),
            application_name: Some(name.clone()),
            ..PostgresOptions::default()
        },
    );
    let store = scratch
        .create(Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("store");
    let observer = support::raw_client(&url).await;
    store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(connections_named(&observer, &name).await, 1);
    // The reaper looks every 150 ms; give it a few passes.
    let deadline = Instant::now() + Duration::from_secs(5);
    while connections_named(&observer, &name).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the idle connection was not closed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The store opens a new one when needed.
    store
        .read("s", ReadOptions::default())
        .await
        .expect("read after the idle close");
    drop(store);
    scratch.drop_all().await.expect("drop schemas");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test]
async fn old_connections_are_replaced_after_their_lifetime() {
    let Some(url) = support::url_or_skip("pool") else {
        return;
    };
    let name = unique_name("life");
    let scratch = scratch(
        &url,
        PostgresOptions {
            pool_size: 1,
            max_lifetime: Some(Duration::from_millis(400)),
            application_name: Some(name.clone()),
            ..PostgresOptions::default()
        },
    );
    let store = scratch
        .create(Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("store");
    let observer = support::raw_client(&url).await;
    let pid_of = |name: String| {
        let observer = &observer;
        async move {
            observer
                .query_opt(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                    &[&name],
                )
                .await
                .expect("pid")
                .map(|row| row.get::<_, i32>(0))
        }
    };
    store.read("s", ReadOptions::default()).await.expect("read");
    let first = pid_of(name.clone()).await.expect("a pooled connection");
    tokio::time::sleep(Duration::from_millis(600)).await;
    store.read("s", ReadOptions::default()).await.expect("read");
    let second = pid_of(name.clone()).await.expect("a pooled connection");
    assert_ne!(first, second, "the connection outlived max_lifetime");
    drop(store);
    scratch.drop_all().await.expect("drop schemas");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test]
async fn the_urls_application_name_reaches_the_server() {
    let Some(url) = support::url_or_skip("pool") else {
        return;
    };
    let name = unique_name("url");
    let join = if url.contains('?') { '&' } else { '?' };
    let scratch = scratch(
        &format!("{url}{join}application_name={name}"),
        PostgresOptions::default(),
    );
    let store = scratch
        .create(Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("store");
    store.read("s", ReadOptions::default()).await.expect("read");
    let observer = support::raw_client(&url).await;
    assert_eq!(connections_named(&observer, &name).await, 1);
    drop(store);
    scratch.drop_all().await.expect("drop schemas");
}

/// The pids of the connections named `name`, sorted.
async fn pids_named(client: &tokio_postgres::Client, name: &str) -> Vec<i32> {
    let rows = client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid",
            &[&name],
        )
        .await
        .expect("pids");
    rows.iter().map(|row| row.get(0)).collect()
}

/// Waits (at most 10 s) until `name` has `count` connections other than
/// `gone`; returns their pids.
async fn await_connections(
    client: &tokio_postgres::Client,
    name: &str,
    count: usize,
    gone: &[i32],
) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = pids_named(client, name).await;
        let fresh = pids.iter().all(|pid| !gone.contains(pid));
        if (pids.len() == count && fresh) || Instant::now() >= deadline {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_idle_connections_are_opened_at_connect_and_kept() {
    let Some(url) = support::url_or_skip("pool") else {
        return;
    };
    let name = unique_name("keep");
    let scratch = scratch(
        &url,
        PostgresOptions {
            pool_size: 4,
            min_idle: 3,
            idle_timeout: Some(Duration::from_millis(300)),
            application_name: Some(name.clone()),
            ..PostgresOptions::default()
        },
    );
    let store = scratch
        .create(Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("store");
    let observer = support::raw_client(&url).await;
    // Open before any call, and warmed without writing anything.
    let first = pids_named(&observer, &name).await;
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(
        store
            .read("s", ReadOptions::default())
            .await
            .expect("read")
            .len(),
        0
    );
    assert!(store
        .sessions(Default::default())
        .await
        .expect("sessions")
        .is_empty());
    // Past the idle timeout they are replaced by fresh ones, not dropped.
    let replaced = await_connections(&observer, &name, 3, &first).await;
    assert_eq!(replaced.len(), 3, "{replaced:?}");
    assert!(
        replaced.iter().all(|pid| !first.contains(pid)),
        "{first:?} then {replaced:?}"
    );
    // One the server ends is replaced too.
    observer
        .execute("SELECT pg_terminate_backend($1)", &[&replaced[0]])
        .await
        .expect("terminate");
    let after = await_connections(&observer, &name, 3, &replaced[..1]).await;
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(!after.contains(&replaced[0]), "{after:?}");
    store
        .append(
            "s",
            vec![NewEvent::new("e", json!({}))],
            AppendOptions::default(),
        )
        .await
        .expect("append on the kept connections");
    drop(store);
    scratch.drop_all().await.expect("drop schemas");
}

#[tokio::test]
async fn min_idle_above_the_pool_size_is_invalid_input() {
    let error = a2_store_postgres::PostgresStore::connect(
        "postgres://nobody@127.0.0.1:1/none",
        PostgresOptions {
            pool_size: 2,
            min_idle: 3,
            ..PostgresOptions::default()
        },
    )
    .await
    .expect_err("refused");
    assert_eq!(error.code(), ErrorCode::InvalidInput, "{error}");
    assert!(error.to_string().contains("min_idle"), "{error}");
}
