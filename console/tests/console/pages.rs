//! The read-only pages: content, paging, bad parameters, nesting.

use axum::http::StatusCode;

use crate::common::*;

#[tokio::test]
async fn overview_counts_per_consumer() {
    let store = populated().await;
    let app = app(&store, options());
    let page = get(&app, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    page.assert_safe();
    assert!(page.body.contains("data-testid=\"overview\""));
    assert!(page.body.contains("hx-trigger=\"every 5s\""));
    assert!(page.body.contains("data-consumer=\"agent\""));
    assert!(
        page.body.contains("data-testid=\"count-dead\">1"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("data-testid=\"count-claimable\">1"),
        "{}",
        page.body
    );
    assert!(page.body.contains("data-refresh-toggle"));
    let fragment = get(&app, "/fragments/overview?consumer=agent").await;
    assert_eq!(fragment.status, StatusCode::OK);
    assert!(fragment.body.starts_with("<section"));
    assert!(fragment.body.contains("data-testid=\"overview\""));
}

#[tokio::test]
async fn sessions_list_pages() {
    let store = memory().await;
    for i in 0..5 {
        messages(&store, &format!("s-{i}"), 1).await;
    }
    let app = app(&store, options());
    let page = get(&app, "/sessions?limit=2").await;
    assert_eq!(page.status, StatusCode::OK);
    page.assert_safe();
    assert_eq!(page.body.matches("data-testid=\"session-row\"").count(), 2);
    assert!(page.body.contains("data-session=\"s-0\""));
    assert!(
        page.body
            .contains("href=\"/sessions?after=s-1&amp;limit=2\""),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn session_page_shows_the_timeline() {
    let store = populated().await;
    let app = app(&store, options());
    let page = get(&app, "/sessions/chat-1").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    page.assert_safe();
    assert_eq!(page.body.matches("data-testid=\"event\"").count(), 3);
    assert!(page.body.contains("data-index=\"3\""));
    assert!(page
        .body
        .contains("sse-connect=\"/sessions/chat-1/live?after=3\""));
    assert!(page.body.contains("data-testid=\"dead-letter\""));
    assert!(page.body.contains("model timed out"));
    assert!(page.body.contains("hello 0"));
}
