//! Tokens, the login cookie, 401 pages.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};

use crate::common::*;

fn guarded() -> a2_store_console::ConsoleOptions {
    writable().with_token(TOKEN)
}

#[tokio::test]
async fn every_page_needs_the_token() {
    let store = populated().await;
    let app = app(&store, guarded());
    for uri in [
        "/",
        "/fragments/overview",
        "/sessions",
        "/sessions/chat-1",
        "/sessions/chat-1/live",
        "/dead-letters",
        "/redrive-all?consumer=agent",
        "/health",
        "/sessions/chat-1/delete",
    ] {
        let reply = get(&app, uri).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert!(reply.body.contains("data-testid=\"unauthorized\""), "{uri}");
        reply.assert_safe();
        let wrong = send(&app, with_bearer(uri, "wrong-token")).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert!(
            !wrong.body.contains("wrong-token"),
            "the token is never echoed"
        );
    }
    for uri in [
        "/sessions/chat-1/redrive",
        "/redrive-all",
        "/sessions/chat-1/delete",
    ] {
        let reply = post(&app, uri, &[("consumer", "agent")]).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{uri}");
    }
    // Assets and the login page stay open.
    assert_eq!(
        get(&app, "/assets/console.css").await.status,
        StatusCode::OK
    );
    assert_eq!(get(&app, "/login").await.status, StatusCode::OK);
}

#[tokio::test]
async fn bearer_token_opens_pages_and_names_the_operator() {
    let store = populated().await;
    let app = app(&store, guarded());
    let reply = send(&app, with_bearer("/sessions/chat-1", TOKEN)).await;
    assert_eq!(reply.status, StatusCode::OK);
    let id = a2_store_console::token_id(TOKEN);
    assert!(reply.body.contains(&id));
    assert!(
        !reply.body.contains(TOKEN),
        "the page never shows the token"
    );
    // The CSRF token is bound to the operator: an action with bearer and token works.
    let csrf = reply.csrf();
    let request = form_request("/sessions/chat-2/pause")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::from(encode(&[
            ("consumer", "agent"),
            ("csrf", &csrf),
        ])))
        .unwrap();
    let reply = send(&app, request).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    // The unauthenticated console's token does not work here.
    let open = app_csrf_without_auth(&store).await;
    assert_ne!(open, csrf);
}

async fn app_csrf_without_auth(store: &std::sync::Arc<dyn a2_store::Store>) -> String {
    get(&app(store, writable()), "/sessions/chat-1")
        .await
        .csrf()
}

#[tokio::test]
async fn login_cookie_flow() {
    let store = populated().await;
    let app = app(&store, guarded());
    let page = get(&app, "/login").await;
    assert!(page.body.contains("type=\"password\""));
    page.assert_safe();
    // A wrong token: 401 with the form again.
    let reply = post(&app, "/login", &[("token", "nope")]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(reply.body.contains("data-testid=\"unauthorized\""));
    assert!(!reply.body.contains("nope"));
    assert!(reply.header("set-cookie").is_none());
    // The right one sets the cookie.
    let reply = post(&app, "/login", &[("token", TOKEN)]).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(reply.location(), "/");
    let cookie = reply.header("set-cookie").unwrap().to_owned();
    assert!(cookie.starts_with("a2_console="));
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && cookie.contains("Path=/")
    );
    assert!(!cookie.contains(TOKEN));
    let pair = cookie.split(';').next().unwrap().to_owned();
    let request = Request::get("/")
        .header(header::COOKIE, &pair)
        .body(Body::empty())
        .unwrap();
    let reply = send(&app, request).await;
    assert_eq!(reply.status, StatusCode::OK);
    // A forged cookie does not.
    let forged = format!(
        "a2_console={}.{}",
        a2_store_console::token_id(TOKEN),
        "00".repeat(32)
    );
    let request = Request::get("/")
        .header(header::COOKIE, forged)
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, request).await.status, StatusCode::UNAUTHORIZED);
    // Logout needs the CSRF token, and forgets the cookie.
    let request = Request::get("/")
        .header(header::COOKIE, &pair)
        .body(Body::empty())
        .unwrap();
    let csrf = send(&app, request).await.csrf();
    let request = form_request("/logout")
        .header(header::COOKIE, &pair)
        .body(Body::from(encode(&[("csrf", &csrf)])))
        .unwrap();
    let reply = send(&app, request).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(reply.header("set-cookie").unwrap().contains("Max-Age=0"));
    // A login posted from another site is refused.
    let request = form_request("/login")
        .header("sec-fetch-site", "cross-site")
        .body(Body::from(encode(&[("token", TOKEN)])))
        .unwrap();
    assert_eq!(send(&app, request).await.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn token_ids_are_short_hashes() {
    let id = a2_store_console::token_id(TOKEN);
    assert_eq!(id.len(), 8);
    assert_ne!(id, a2_store_console::token_id("other"));
    let debug = format!("{:?}", guarded());
    assert!(!debug.contains(TOKEN));
    assert!(debug.contains(&id));
}
