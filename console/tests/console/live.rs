//! The live timeline stream.

use std::time::Duration;

use a2_store::prelude::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use crate::common::*;

/// Reads the stream until `needle` shows up (or a few seconds pass).
async fn read_until(body: Body, needle: &str) -> String {
    let mut stream = body.into_data_stream();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !seen.contains(needle) {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        match next {
            Ok(Some(Ok(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    seen
}

#[tokio::test]
async fn an_appended_event_arrives_as_a_row() {
    let store = populated().await;
    let app = app(&store, options());
    let request = Request::get("/sessions/chat-1/live?after=3")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert!(response.headers().contains_key("content-security-policy"));
    let body = response.into_body();
    let appender = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let event = NewEvent::new("reply", json!({"text": "live one"}));
            store
                .append("chat-1", vec![event], AppendOptions::default())
                .await
                .unwrap();
        })
    };
    let seen = read_until(body, "live one").await;
    appender.await.unwrap();
    assert!(seen.contains("event: event"), "{seen}");
    assert!(seen.contains("id: 4"), "{seen}");
    assert!(seen.contains("data-testid=\"event\""), "{seen}");
    assert!(seen.contains("data-index=\"4\""), "{seen}");
    assert!(
        !seen.contains("data-index=\"3\""),
        "rows after `after` only"
    );
}

#[tokio::test]
async fn last_event_id_resumes_after_it() {
    let store = populated().await;
    let app = app(&store, options());
    let request = Request::get("/sessions/chat-1/live?after=0")
        .header("last-event-id", "2")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let seen = read_until(response.into_body(), "data-index=\"3\"").await;
    assert!(seen.contains("data-index=\"3\""));
    assert!(!seen.contains("data-index=\"1\""));
}

#[tokio::test]
async fn a_deleted_session_ends_the_stream() {
    let store = populated().await;
    let app = app(&store, options());
    let request = Request::get("/sessions/chat-1/live?after=3")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let body = response.into_body();
    let deleter = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            store
                .delete_session(a2_store::DeleteSessionRequest::new("chat-1").forced())
                .await
                .unwrap();
        })
    };
    let seen = read_until(body, "event: close").await;
    deleter.await.unwrap();
    assert!(seen.contains("data-testid=\"stream-ended\""), "{seen}");
    assert!(seen.contains("SESSION_DELETED"), "{seen}");
    assert!(seen.contains("event: close"), "{seen}");
}

#[tokio::test]
async fn live_rows_hide_payloads() {
    let store = populated().await;
    let app = app(&store, options().with_hidden_payloads(true));
    let request = Request::get("/sessions/chat-1/live?after=0")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let seen = read_until(response.into_body(), "data-index=\"3\"").await;
    assert!(seen.contains("hidden"));
    assert!(!seen.contains("hello"), "{seen}");
}

#[tokio::test]
async fn bad_after_is_a_400_page() {
    let store = populated().await;
    let app = app(&store, options());
    let reply = get(&app, "/sessions/chat-1/live?after=x").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("whole number"));
}
