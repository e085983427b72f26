//! Shared setup: stores with known contents, the router, requests, and
//! the checks every page must pass.

use std::sync::Arc;
use std::time::Duration;

use a2_store::prelude::*;
use a2_store::Store;
use a2_store_console::{router, ConsoleOptions};
use axum::body::Body;
use axum::http::{header, Request, Response, StatusCode};
use axum::Router;
use tower::ServiceExt;

pub const TOKEN: &str = "correct-horse-battery-staple";
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A memory store.
pub async fn memory() -> Arc<dyn Store> {
    a2_store::open("memory:", OpenOptions::default())
        .await
        .expect("memory store")
}

/// Appends `n` messages for agent/main to `session`.
pub async fn messages(store: &Arc<dyn Store>, session: &str, n: usize) {
    let events = (0..n)
        .map(|i| {
            NewEvent::new("msg", json!({"text": format!("hello {i}")}))
                .with_target(Target::lane("agent", "main"))
        })
        .collect();
    store
        .append(session, events, AppendOptions::default())
        .await
        .expect("append");
}

/// Makes the agent's head of `session` a dead letter (one failure at max 1).
pub async fn kill_head(store: &Arc<dyn Store>, session: &str, error: &str) {
    let claim = ClaimRequest::new(session, "w1", Duration::from_secs(30));
    let heads = store
        .claim_available(claim)
        .await
        .expect("claim")
        .into_heads();
    let head = heads.first().expect("a head to kill");
    store
        .fail_attempt(FailRequest::for_head(head, error, 1))
        .await
        .expect("fail");
}

/// A store with `chat-1` (3 messages, its head dead-lettered) and
/// `chat-2` (1 message, claimable).
pub async fn populated() -> Arc<dyn Store> {
    let store = memory().await;
    messages(&store, "chat-1", 3).await;
    kill_head(&store, "chat-1", "model timed out").await;
    messages(&store, "chat-2", 1).await;
    store
}

pub fn options() -> ConsoleOptions {
    ConsoleOptions::default().with_consumers(vec!["agent".into()])
}

pub fn writable() -> ConsoleOptions {
    options().with_writes(true)
}

pub fn app(store: &Arc<dyn Store>, options: ConsoleOptions) -> Router {
    router(store.clone(), options)
}

/// A finished response: status, headers, body text.
pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn location(&self) -> &str {
        self.header("location").unwrap_or_default()
    }

    /// The CSRF token in the page's first form.
    pub fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self.body.find(marker).expect("a form with a CSRF token") + marker.len();
        let end = self.body[start..].find('"').expect("end of token") + start;
        self.body[start..end].to_owned()
    }

    /// Asserts the security headers and that no script is inline.
    pub fn assert_safe(&self) {
        assert_eq!(
            self.header("content-security-policy"),
            Some(CSP),
            "{}",
            self.body
        );
        assert_eq!(self.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(self.header("referrer-policy"), Some("no-referrer"));
        let lower = self.body.to_lowercase();
        let mut rest = lower.as_str();
        while let Some(at) = rest.find("<script") {
            let tag_end = rest[at..].find('>').expect("script tag closes") + at;
            let tag = &rest[at..tag_end];
            assert!(tag.contains(" src="), "inline script: {tag}");
            let close = rest[tag_end..].find("</script>").expect("closed") + tag_end;
            assert_eq!(close, tag_end + 1, "script with a body");
            rest = &rest[close..];
        }
        assert!(!lower.contains(" style="), "inline style attribute");
        assert!(!lower.contains("<style"), "inline style element");
        assert!(!lower.contains(" onclick="), "inline handler");
    }
}

pub async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response: Response<Body> = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 16 * 1024 * 1024)
        .await
        .expect("body");
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

pub async fn get(app: &Router, uri: &str) -> Reply {
    send(app, Request::get(uri).body(Body::empty()).expect("request")).await
}

pub fn form_request(uri: &str) -> axum::http::request::Builder {
    Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
}

pub fn encode(form: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(form).expect("form")
}

/// POSTs `form` (as a browser on this site would, with Sec-Fetch-Site).
pub async fn post(app: &Router, uri: &str, form: &[(&str, &str)]) -> Reply {
    let request = form_request(uri)
        .header("sec-fetch-site", "same-origin")
        .body(Body::from(encode(form)))
        .expect("request");
    send(app, request).await
}

/// GETs `page`, then POSTs `form` to `action` with the page's CSRF token.
pub async fn post_from(app: &Router, page: &str, action: &str, form: &[(&str, &str)]) -> Reply {
    let token = get(app, page).await.csrf();
    let mut fields: Vec<(&str, &str)> = form.to_vec();
    fields.push(("csrf", &token));
    post(app, action, &fields).await
}

/// Follows a 303 and returns the page it leads to.
pub async fn follow(app: &Router, reply: &Reply) -> Reply {
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    get(app, reply.location()).await
}

/// A request with a bearer token.
pub fn with_bearer(uri: &str, token: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .expect("request")
}
