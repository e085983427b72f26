//! The read-only pages: content, paging, bad parameters, nesting.

use a2_store::prelude::*;
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

#[tokio::test]
async fn sessions_filter_by_prefix_and_by_consumer_state() {
    let store = populated().await;
    for id in ["alpha-1", "alpha-2", "beta-1"] {
        messages(&store, id, 1).await;
    }
    let app = app(&store, options());
    let page = get(&app, "/sessions?prefix=alpha-").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.body.matches("data-testid=\"session-row\"").count(),
        2,
        "{}",
        page.body
    );
    assert!(!page.body.contains("data-session=\"beta-1\""));
    assert!(!page.body.contains("data-testid=\"next-page\""));
    let page = get(&app, "/sessions?consumer=agent&state=dead").await;
    assert_eq!(page.body.matches("data-testid=\"session-row\"").count(), 1);
    assert!(page.body.contains("data-session=\"chat-1\""));
    let page = get(&app, "/sessions?consumer=agent&state=claimable&limit=2").await;
    assert!(page.body.contains("data-session=\"alpha-1\""));
    assert!(page.body.contains("data-testid=\"next-page\""));
    let page = get(&app, "/sessions?consumer=agent&state=busy").await;
    assert_eq!(page.body.matches("data-testid=\"session-row\"").count(), 0);
}

#[tokio::test]
async fn bad_parameters_answer_4xx_pages() {
    let store = populated().await;
    let app = app(&store, options());
    for (uri, says) in [
        ("/sessions?state=sleeping&consumer=agent", "unknown state"),
        ("/sessions?state=dead", "needs a consumer"),
        ("/sessions?limit=0", "at least 1"),
        ("/sessions?limit=1000", "at most 200"),
        ("/sessions?limit=ten", "whole number"),
        ("/sessions/chat-1?after=minus", "whole number"),
        ("/sessions/chat-1?limit=0", "at least 1"),
        (
            "/dead-letters?consumer=agent&since=yesterday",
            "is not a time",
        ),
        ("/redrive-all", "'consumer' is required"),
        (
            "/redrive-all?consumer=agent&action=bounce",
            "unknown action",
        ),
    ] {
        let reply = get(&app, uri).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{uri}: {}",
            reply.body
        );
        assert!(reply.body.contains(says), "{uri}: {}", reply.body);
        reply.assert_safe();
    }
    let reply = get(&app, "/no/such/page").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    reply.assert_safe();
    let reply = get(&app, "/sessions/%FF%FE").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn unknown_session_is_an_empty_page() {
    let store = populated().await;
    let app = app(&store, options());
    let page = get(&app, "/sessions/nobody").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("data-testid=\"no-session\""));
    assert!(page.body.contains("data-testid=\"timeline\""));
    assert_eq!(page.body.matches("data-testid=\"event\"").count(), 0);
    let page = get(&app, "/sessions/nobody/delete").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("nothing to delete"));
}

#[tokio::test]
async fn timeline_pages_newest_first_with_links() {
    let store = memory().await;
    messages(&store, "long", 7).await;
    let app = app(&store, options());
    let page = get(&app, "/sessions/long?limit=3").await;
    let indexes: Vec<&str> = page
        .body
        .match_indices("data-index=\"")
        .map(|(at, _)| &page.body[at + 12..at + 13])
        .collect();
    assert_eq!(indexes, ["5", "6", "7"]);
    assert!(
        page.body
            .contains("href=\"/sessions/long?after=1&amp;limit=3\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("sse-connect"));
    let older = get(&app, "/sessions/long?after=1&limit=3").await;
    assert!(older.body.contains("data-index=\"2\""));
    assert!(!older.body.contains("data-index=\"5\""));
    assert!(
        !older.body.contains("sse-connect"),
        "only the newest page follows live"
    );
    assert!(older.body.contains("data-testid=\"newer\""));
}

#[tokio::test]
async fn cause_links_point_at_the_attempt() {
    let store = memory().await;
    messages(&store, "c", 1).await;
    let claim = ClaimRequest::new("c", "w1", std::time::Duration::from_secs(30));
    let head = store
        .claim_available(claim)
        .await
        .unwrap()
        .into_heads()
        .remove(0);
    let reply = NewEvent::new("reply", json!("hi back"));
    store
        .complete_attempt(CompleteRequest::for_head(&head, vec![reply]))
        .await
        .unwrap();
    let app = app(&store, options());
    let page = get(&app, "/sessions/c").await;
    assert!(page.body.contains("data-testid=\"cause\""));
    assert!(
        page.body.contains("agent/main #1 attempt 1"),
        "{}",
        page.body
    );
    assert!(page.body.contains("#event-1\""));
}

#[tokio::test]
async fn session_page_shows_cursors_pauses_presence_and_snapshots() {
    let store = populated().await;
    store
        .pause(PauseRequest::in_session("agent", "chat-2"))
        .await
        .unwrap();
    let mut values = std::collections::BTreeMap::new();
    values.insert("typing".to_owned(), json!("secret draft"));
    store
        .set_presence(
            "chat-2",
            "alice",
            values,
            a2_store::PresenceMeta::new(1, std::time::Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    store
        .write_state(
            "chat-2",
            "summary",
            vec![a2_store::StateWrite::new(
                1,
                json!({"summary": "private words"}),
            )],
        )
        .await
        .unwrap();
    let app = app(&store, options());
    let page = get(&app, "/sessions/chat-2?reducer=summary").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("data-testid=\"cursor\""));
    assert!(page.body.contains("data-testid=\"pause\""));
    assert!(page.body.contains("alice"));
    assert!(page.body.contains("secret draft"));
    assert!(page.body.contains("data-testid=\"snapshot\""));
    assert!(page.body.contains("private words"));
    let page = get(&app, "/sessions/chat-2?reducer=nothing").await;
    assert!(page.body.contains("No snapshot of reducer"));
    // Hidden payloads: nowhere on any page.
    let hidden = app_hidden(&store);
    for uri in [
        "/sessions/chat-2?reducer=summary",
        "/sessions/chat-1",
        "/dead-letters?consumer=agent",
        "/redrive-all?consumer=agent",
    ] {
        let page = get(&hidden, uri).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}");
        for secret in ["secret draft", "private words", "hello"] {
            assert!(!page.body.contains(secret), "{uri} shows {secret}");
        }
        assert!(page.body.contains("hidden"), "{uri}");
    }
}

fn app_hidden(store: &std::sync::Arc<dyn a2_store::Store>) -> axum::Router {
    app(store, options().with_hidden_payloads(true))
}

#[tokio::test]
async fn dead_letters_across_sessions_filtered() {
    let store = populated().await;
    messages(&store, "chat-3", 1).await;
    kill_head(&store, "chat-3", "other failure").await;
    let app = app(&store, options());
    let page = get(&app, "/dead-letters?consumer=agent").await;
    assert_eq!(page.status, StatusCode::OK);
    page.assert_safe();
    assert_eq!(page.body.matches("data-testid=\"dead-letter\"").count(), 2);
    assert!(page.body.contains("other failure"));
    // The configured consumer is the default.
    let page = get(&app, "/dead-letters").await;
    assert_eq!(page.body.matches("data-testid=\"dead-letter\"").count(), 2);
    let page = get(&app, "/dead-letters?consumer=agent&lane=elsewhere").await;
    assert_eq!(page.body.matches("data-testid=\"dead-letter\"").count(), 0);
    let page = get(&app, "/dead-letters?consumer=agent&since=%2B1h").await;
    assert_eq!(page.body.matches("data-testid=\"dead-letter\"").count(), 0);
    let page = get(&app, "/dead-letters?consumer=agent&since=-1h").await;
    assert_eq!(page.body.matches("data-testid=\"dead-letter\"").count(), 2);
    let page = get(&app, "/dead-letters?consumer=agent&limit=1").await;
    assert_eq!(page.body.matches("data-testid=\"dead-letter\"").count(), 1);
    assert!(page.body.contains("data-testid=\"next-page\""));
    // Without any consumer: a form, no listing.
    let none = app_without_consumers(&store);
    let page = get(&none, "/dead-letters").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Name a consumer"));
}

fn app_without_consumers(store: &std::sync::Arc<dyn a2_store::Store>) -> axum::Router {
    app(store, a2_store_console::ConsoleOptions::default())
}

#[tokio::test]
async fn overview_without_consumers_asks_for_one() {
    let store = populated().await;
    let app = app_without_consumers(&store);
    let page = get(&app, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("No consumers to count"));
    let page = get(&app, "/?consumer=agent,notifier").await;
    assert!(page.body.contains("data-consumer=\"agent\""));
    assert!(page.body.contains("data-consumer=\"notifier\""));
    assert!(page
        .body
        .contains("/fragments/overview?consumer=agent&amp;consumer=notifier"));
}

#[tokio::test]
async fn health_with_and_without_a_source() {
    let store = populated().await;
    let page = get(&app(&store, options()), "/health").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("no health source configured (PostgreSQL stores provide one)")
            || page
                .body
                .contains("No health source configured (PostgreSQL stores provide one)")
    );
    let source = options().with_health(|| async {
        Ok(json!({
            "schema": "a2",
            "tables": [{"name": "events", "live_tuples": 10, "dead_tuples": 2, "table_bytes": 8192}],
            "oldest_transaction": null
        }))
    });
    let page = get(&app(&store, source), "/health").await;
    assert_eq!(page.status, StatusCode::OK);
    page.assert_safe();
    assert!(page.body.contains("data-testid=\"health\""));
    assert!(page.body.contains("<th>dead_tuples</th>"));
    assert!(page.body.contains("8.0 KiB"));
    let failing = options().with_health(|| async { Err("<no server>".to_owned()) });
    let page = get(&app(&store, failing), "/health").await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(page.body.contains("&lt;no server&gt;"));
}

#[tokio::test]
async fn assets_are_embedded() {
    let store = memory().await;
    let app = app(&store, options());
    for (name, kind) in [
        ("htmx-2.0.4.min.js", "text/javascript"),
        ("htmx-ext-sse-2.2.2.js", "text/javascript"),
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
        ("htmx-LICENSE", "text/plain"),
    ] {
        let reply = get(&app, &format!("/assets/{name}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{name}");
        assert!(reply.header("content-type").unwrap().starts_with(kind));
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
        assert!(reply.body.len() > 100, "{name}");
    }
    assert_eq!(
        get(&app, "/assets/nothing.js").await.status,
        StatusCode::NOT_FOUND
    );
    let page = get(&app, "/").await;
    assert!(page
        .body
        .contains("<script src=\"/assets/htmx-2.0.4.min.js\"></script>"));
    assert!(page.body.contains("includeIndicatorStyles"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
}

#[tokio::test]
async fn nested_under_a_prefix_every_link_keeps_it() {
    let store = populated().await;
    let nested = axum::Router::new().nest("/admin/console", app(&store, writable()));
    for uri in [
        "/admin/console",
        "/admin/console/sessions",
        "/admin/console/sessions/chat-1",
        "/admin/console/dead-letters?consumer=agent",
        "/admin/console/redrive-all?consumer=agent",
        "/admin/console/sessions/chat-1/delete",
        "/admin/console/health",
    ] {
        let page = get(&nested, uri).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}: {}", page.body);
        page.assert_safe();
        for attr in [
            "href=\"",
            "action=\"",
            "src=\"",
            "hx-get=\"",
            "sse-connect=\"",
        ] {
            for (at, _) in page.body.match_indices(attr) {
                let rest = &page.body[at + attr.len()..];
                let link = &rest[..rest.find('"').unwrap()];
                assert!(
                    link.starts_with("/admin/console/")
                        || link == "/admin/console"
                        || link.starts_with('#')
                        || link == "data:,",
                    "{uri}: {attr}{link}"
                );
            }
        }
    }
    // Actions redirect under the prefix too.
    let reply = post_from(
        &nested,
        "/admin/console/sessions/chat-2",
        "/admin/console/sessions/chat-2/pause",
        &[("consumer", "agent")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert!(reply
        .location()
        .starts_with("/admin/console/sessions/chat-2?flash="));
    let page = follow(&nested, &reply).await;
    assert!(page.body.contains("data-testid=\"flash\""));
    // Error pages too.
    let page = get(&nested, "/admin/console/sessions?limit=0").await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(page.body.contains("href=\"/admin/console\""));
}

#[tokio::test]
async fn a_sqlite_store_renders_alike() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("console.db").display());
    let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
    messages(&store, "chat-1", 2).await;
    kill_head(&store, "chat-1", "sqlite failure").await;
    let app = app(&store, writable());
    let page = get(&app, "/sessions/chat-1").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.body.matches("data-testid=\"event\"").count(), 2);
    assert!(page.body.contains("sqlite failure"));
    let overview = get(&app, "/").await;
    assert!(overview.body.contains("data-testid=\"count-dead\">1"));
    let preview = get(&app, "/redrive-all?consumer=agent").await;
    assert!(preview.body.contains("1 heads in 1 sessions"));
    let reply = post(
        &app,
        "/redrive-all",
        &[
            ("consumer", "agent"),
            ("action", "retry"),
            ("csrf", &preview.csrf()),
        ],
    )
    .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(store.dead_letters("chat-1").await.unwrap().is_empty());
}

#[tokio::test]
async fn odd_input_never_breaks_a_page() {
    let store = populated().await;
    let app = app(&store, writable());
    let odd = [
        "",
        "%00",
        "%E2%80%AE",
        "a%2Fb",
        "..%2F..",
        "%F0%9F%98%80",
        "99999999999999999999999",
        "-1",
        "%20",
        "%3Cscript%3E",
        "x%0D%0Ay",
    ];
    for value in odd {
        for uri in [
            format!("/sessions/{value}x"),
            format!("/sessions/{value}x/live?after=0&x={value}"),
            format!("/sessions/{value}x/delete"),
            format!("/sessions?consumer={value}&prefix={value}&after={value}"),
            format!("/sessions?consumer=agent&state=dead&prefix={value}"),
            format!("/sessions/chat-1?after={value}&limit={value}&reducer={value}"),
            format!("/dead-letters?consumer={value}&lane={value}&since={value}&after={value}"),
            format!("/redrive-all?consumer={value}&lane={value}&action={value}"),
            format!("/?consumer={value}"),
            format!("/fragments/overview?consumer={value}"),
        ] {
            let request = axum::http::Request::get(uri.as_str()).body(axum::body::Body::empty());
            let Ok(request) = request else { continue };
            let is_live = uri.contains("/live");
            let reply = if is_live {
                // The stream stays open: only the head matters.
                let response = tower::ServiceExt::oneshot(app.clone(), request)
                    .await
                    .unwrap();
                assert!(!response.status().is_server_error(), "{uri}");
                continue;
            } else {
                send(&app, request).await
            };
            assert!(
                !reply.status.is_server_error() || reply.body.contains("Code"),
                "{uri}: {}",
                reply.status
            );
            reply.assert_safe();
        }
    }
}
