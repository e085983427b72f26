//! A web console for a2 session stores: an [`axum::Router`] over any
//! `Arc<dyn Store>` that an app nests under a path prefix, or that the
//! `a2-store console` command serves on its own.
//!
//! Server-rendered HTML (no JavaScript build step), with a vendored,
//! pinned htmx 2 for the live parts: the session timeline follows
//! [`Store::subscribe`] over server-sent events and the overview's counts
//! refresh on a timer the page can pause. Every asset is embedded in the
//! binary; every response carries a Content-Security-Policy that forbids
//! inline script.
//!
//! What it shows, and what each view costs:
//!
//! | route | view | store calls |
//! |---|---|---|
//! | `GET /` | per consumer: sessions with claimable, busy and dead-lettered heads, pauses, leases running out | one `list_work` page (≤ 1000 sessions) per consumer, `pauses` |
//! | `GET /sessions` | sessions, paged, by consumer, state and id prefix | one `sessions` or `list_work` page |
//! | `GET /sessions/{id}` | the timeline, cursors, dead letters, pauses, presence, a snapshot | one `read` page and one call of each kind |
//! | `GET /sessions/{id}/live` | server-sent events: timeline rows as they are appended | `subscribe` |
//! | `GET /dead-letters` | dead letters across sessions by consumer, lane and time | one `list_work` page, `dead_letters` per session of that page |
//! | `GET /redrive-all` | what a bulk redrive will change, before it does | bounded: `list_work` pages and `dead_letters`, capped |
//! | `GET /health` | the health source's report (PostgreSQL stores have one) | the source |
//!
//! Actions (redrive one head or in bulk, pause, resume, reschedule, fork,
//! clear, delete) are POSTs carrying a CSRF token, refused unless the
//! console was built with [`ConsoleOptions::with_writes`], and logged as
//! `tracing` events naming the action, the session and the operator's
//! [`token_id`].
//!
//! # Embedding
//!
//! ```no_run
//! use std::sync::Arc;
//! use a2_store_api::Store;
//! use a2_store_console::{router, ConsoleOptions};
//!
//! fn app(store: Arc<dyn Store>) -> axum::Router {
//!     let console = ConsoleOptions::default()
//!         .with_token("a long random secret")
//!         .with_consumers(vec!["agent".into(), "notifier".into()]);
//!     axum::Router::new()
//!         .route("/", axum::routing::get(|| async { "my app" }))
//!         // Every link the console renders is built from the request's
//!         // prefix, so it works under any path.
//!         .nest("/admin/console", router(store, console))
//! }
//! ```
//!
//! The crate's README has the guide to running it behind a reverse proxy
//! (prefix, TLS termination, tokens).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use a2_store_api::Store;
use axum::routing::{get, post};
use sha2::{Digest, Sha256};

mod actions;
mod assets;
mod auth;
mod context;
mod live;
mod pages;
mod params;
mod render;
mod security;

/// What a [`HealthSource`] returns: a report as JSON, or why there is none.
pub type HealthFuture = Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send>>;

/// A source of health reports for `GET /health`: called on every visit of
/// the page. The store trait has no health call; a PostgreSQL store's
/// `health()` is one (the `a2-store console` command wires it). The report
/// is rendered as tables: an object's scalar fields as rows, an array of
/// objects as a table with a column per field, nested objects as nested
/// tables. Fields named `*_bytes` are also shown in KiB/MiB/GiB.
pub type HealthSource = Arc<dyn Fn() -> HealthFuture + Send + Sync>;

/// How a console behaves: read-only unless told, who may use it, what it
/// shows. `Default` is read-only, without authentication, payloads shown,
/// no consumers listed, counts refreshed every 5 s.
///
/// ```
/// use a2_store_console::ConsoleOptions;
/// let options = ConsoleOptions::default()
///     .with_writes(true)
///     .with_token("s3cret-token")
///     .with_hidden_payloads(true)
///     .with_consumers(vec!["agent".into()])
///     .with_refresh_secs(10);
/// assert!(options.allow_writes && options.hide_payloads);
/// assert_eq!(options.tokens.len(), 1);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ConsoleOptions {
    /// Whether actions (redrive, pause, fork, clear, delete, ...) run. `false`
    /// (the default): every action is refused with 403 on the server,
    /// whatever the page shows.
    pub allow_writes: bool,
    /// Bearer tokens accepted (`Authorization: Bearer <token>`, or the
    /// cookie `POST /login` sets). Empty: no authentication; the
    /// `a2-store console` command refuses to listen on a non-loopback
    /// address so.
    pub tokens: Vec<String>,
    /// Replace every payload (events, snapshots, presence values) with "hidden".
    pub hide_payloads: bool,
    /// The consumers the overview and the work listings show (the store
    /// keeps no registry of consumers). Pages also take `?consumer=`.
    pub consumers: Vec<String>,
    /// How often the overview's counts refresh, seconds (at least 1; the
    /// page can pause it).
    pub refresh_secs: u64,
    /// Where `GET /health` gets its report; `None`: the page says there is none.
    pub health: Option<HealthSource>,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        Self {
            allow_writes: false,
            tokens: Vec::new(),
            hide_payloads: false,
            consumers: Vec::new(),
            refresh_secs: 5,
            health: None,
        }
    }
}

impl fmt::Debug for ConsoleOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token_ids: Vec<String> = self.tokens.iter().map(|t| token_id(t)).collect();
        f.debug_struct("ConsoleOptions")
            .field("allow_writes", &self.allow_writes)
            .field("tokens", &token_ids)
            .field("hide_payloads", &self.hide_payloads)
            .field("consumers", &self.consumers)
            .field("refresh_secs", &self.refresh_secs)
            .field("health", &self.health.as_ref().map(|_| "configured"))
            .finish()
    }
}

impl ConsoleOptions {
    /// The same options, with actions allowed (`true`) or refused.
    pub fn with_writes(mut self, allow: bool) -> Self {
        self.allow_writes = allow;
        self
    }

    /// The same options, accepting one more bearer token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.tokens.push(token.into());
        self
    }

    /// The same options, with payloads hidden (`true`) or shown.
    pub fn with_hidden_payloads(mut self, hide: bool) -> Self {
        self.hide_payloads = hide;
        self
    }

    /// The same options, listing these consumers on the overview and the
    /// work listings.
    pub fn with_consumers(mut self, consumers: Vec<String>) -> Self {
        self.consumers = consumers;
        self
    }

    /// The same options, refreshing the overview's counts every `secs`
    /// seconds (at least 1).
    pub fn with_refresh_secs(mut self, secs: u64) -> Self {
        self.refresh_secs = secs.max(1);
        self
    }

    /// The same options, with a health source for `GET /health`.
    ///
    /// ```
    /// use a2_store_console::ConsoleOptions;
    /// let options = ConsoleOptions::default().with_health(|| async {
    ///     Ok(serde_json::json!({"schema": "a2", "tables": [{"name": "events", "dead_tuples": 0}]}))
    /// });
    /// assert!(options.health.is_some());
    /// ```
    pub fn with_health<F, Fut>(mut self, source: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<serde_json::Value, String>> + Send + 'static,
    {
        let source: HealthSource = Arc::new(move || Box::pin(source()) as HealthFuture);
        self.health = Some(source);
        self
    }
}

/// What logs and pages name an operator by: the first 8 hex digits of the
/// SHA-256 of their token, never the token.
///
/// ```
/// let id = a2_store_console::token_id("s3cret-token");
/// assert_eq!(id.len(), 8);
/// assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
/// ```
pub fn token_id(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The console as an [`axum::Router`], with its state: nest it under any
/// prefix (every link and form it renders is built from the request's
/// prefix) or serve it as it is.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use a2_store_console::{router, ConsoleOptions};
/// # let store: Arc<dyn a2_store_api::Store> = unimplemented!();
/// let app = axum::Router::new().nest("/console", router(store, ConsoleOptions::default()));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await?;
/// # Ok(())
/// # }
/// ```
pub fn router(store: Arc<dyn Store>, options: ConsoleOptions) -> axum::Router {
    let state = context::Inner::new(store, options);
    let protected = axum::Router::new()
        .route("/", get(pages::overview))
        .route("/fragments/overview", get(pages::overview_fragment))
        .route("/sessions", get(pages::sessions))
        .route("/sessions/{id}", get(pages::session))
        .route("/sessions/{id}/live", get(live::live))
        .route(
            "/sessions/{id}/delete",
            get(pages::delete_confirm).post(actions::delete),
        )
        .route("/sessions/{id}/redrive", post(actions::redrive))
        .route("/sessions/{id}/pause", post(actions::pause))
        .route("/sessions/{id}/resume", post(actions::resume))
        .route("/sessions/{id}/reschedule", post(actions::reschedule))
        .route("/sessions/{id}/fork", post(actions::fork))
        .route("/sessions/{id}/clear", post(actions::clear))
        .route("/dead-letters", get(pages::dead_letters))
        .route(
            "/redrive-all",
            get(pages::redrive_preview).post(actions::redrive_all),
        )
        .route("/health", get(pages::health))
        .route("/logout", post(auth::logout))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require,
        ));
    axum::Router::new()
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/assets/{file}", get(assets::serve))
        .merge(protected)
        .fallback(pages::not_found)
        .layer(axum::middleware::map_response(security::headers))
        .with_state(state)
}
