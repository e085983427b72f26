//! Subscriptions across stores: appends made through another store (another
//! pool, as another process would) reach the stream through NOTIFY, and a
//! listener whose connection is killed reconnects and catches up, so
//! nothing appended meanwhile is missed. Runs only when `A2_POSTGRES_URL` is set.

mod support;

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{AppendOptions, NewEvent, RandomIds, Store, SystemClock};
use futures::StreamExt;
use serde_json::json;
use support::PgFactory;

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listener_reconnects_and_catches_up() {
    let Some(factory) = PgFactory::from_env("subscribe") else {
        return;
    };
    let schema = factory.schema();
    let reader = factory
        .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("connect");
    let writer = factory
        .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("connect");
    let mut stream = reader.subscribe("live", 0).await.expect("subscribe");
    let append = |n: u64| {
        let writer = writer.clone();
        async move {
            writer
                .append(
                    "live",
                    vec![NewEvent::new("e", json!(n))],
                    AppendOptions::default(),
                )
                .await
                .expect("append")
        }
    };
    append(1).await;
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("delivered through NOTIFY")
        .expect("open")
        .expect("row");
    assert_eq!(first.index, 1);

    // Kill every LISTEN connection on this schema's channel, append while
    // it is down, and expect the row anyway.
    let client = support::raw_client(factory.url()).await;
    let channel = format!("a2_store_{schema}");
    let killed = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE query = 'LISTEN \"' || $1 || '\"'",
            &[&channel],
        )
        .await
        .expect("terminate the listener");
    assert_eq!(
        killed.len(),
        1,
        "one listener connection per subscribing store"
    );
    append(2).await;
    append(3).await;
    for expected in 2..=3 {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("caught up after the reconnect")
            .expect("open")
            .expect("row");
        assert_eq!(event.index, expected, "in order, no gap, no duplicate");
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_when_its_store_is_dropped() {
    let Some(factory) = PgFactory::from_env("subscribe") else {
        return;
    };
    let schema = factory.schema();
    let store = factory
        .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("connect");
    store
        .append(
            "s",
            vec![NewEvent::new("e", json!(1))],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let mut stream = store.subscribe("s", 0).await.expect("subscribe");
    let backlog = stream.next().await.expect("open").expect("row");
    assert_eq!(backlog.index, 1);
    drop(store);
    let end = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none(), "no item after the store is gone: {end:?}");
}

/// Only sessions someone subscribes to pay for NOTIFY, and a dropped
/// stream removes its registration.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_subscribed_sessions_are_notified() {
    let Some(factory) = PgFactory::from_env("subscribe") else {
        return;
    };
    let schema = factory.schema();
    let store = factory
        .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("connect");
    // A raw listener on the schema's channel records every notification.
    let (client, mut connection) = tokio_postgres::connect(factory.url(), tokio_postgres::NoTls)
        .await
        .expect("raw connect");
    let (sender, mut heard) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(note) = message {
                let _ = sender.send(note.payload().to_owned());
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"a2_store_{schema}\""))
        .await
        .expect("listen");
    let append = |session: &'static str| {
        let store = store.clone();
        async move {
            store
                .append(
                    session,
                    vec![NewEvent::new("e", json!(1))],
                    AppendOptions::default(),
                )
                .await
                .expect("append")
        }
    };
    append("quiet").await;
    let stream = store.subscribe("loud", 0).await.expect("subscribe");
    append("loud").await;
    let first = tokio::time::timeout(Duration::from_secs(10), heard.recv())
        .await
        .expect("a notification")
        .expect("open");
    assert_eq!(first, "loud", "the unsubscribed session sent nothing");
    drop(stream);
    let mut registered = 1;
    for _ in 0..100 {
        let row = client
            .query_one(
                &format!("SELECT count(*) FROM \"{schema}\".subscribers WHERE session_id = 'loud'"),
                &[],
            )
            .await
            .expect("count");
        registered = row.get::<_, i64>(0);
        if registered == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(registered, 0, "the dropped stream removed its registration");
    append("loud").await;
    append("quiet").await;
    let more = tokio::time::timeout(Duration::from_millis(500), heard.recv()).await;
    assert!(
        more.is_err(),
        "no subscriber left, no notification: {more:?}"
    );
}
