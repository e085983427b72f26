//! The router's state, the per-request context every handler takes
//! ([`Ctx`]: the prefix, the operator, the CSRF token, the query) and the
//! error page type ([`Failure`]).

use std::sync::Arc;

use a2_store_api::{ErrorCode, Store, StoreError};
use axum::extract::{FromRequestParts, OriginalUri, Path};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, KeyInit, Mac};
use maud::{html, Markup};
use sha2::Sha256;

use crate::params::Params;
use crate::render;
use crate::ConsoleOptions;

type HmacSha256 = Hmac<Sha256>;

/// What every request shares: the store, the options and the router's
/// random key (CSRF tokens and login cookies are MACs under it).
pub(crate) struct Inner {
    pub store: Arc<dyn Store>,
    pub options: ConsoleOptions,
    key: [u8; 64],
}

/// The router's state.
pub(crate) type State = Arc<Inner>;

impl Inner {
    pub fn new(store: Arc<dyn Store>, options: ConsoleOptions) -> State {
        let mut key = [0u8; 64];
        if getrandom::fill(&mut key).is_err() {
            // No system randomness: a key from what is at hand. Tokens made
            // with it are still bound to this process; say so in the log.
            tracing::warn!(
                "a2-store-console: no system randomness; CSRF key derived from time and address"
            );
            let seed = format!(
                "{:?}{:p}{}",
                std::time::SystemTime::now(),
                &key,
                std::process::id()
            );
            let digest = <Sha256 as sha2::Digest>::digest(seed.as_bytes());
            key[..32].copy_from_slice(&digest);
        }
        let mut options = options;
        options.refresh_secs = options.refresh_secs.max(1);
        Arc::new(Self {
            store,
            options,
            key,
        })
    }

    /// HMAC-SHA256 of `parts` (joined with NUL) under the router's key.
    pub fn mac(&self, parts: &[&str]) -> [u8; 32] {
        let mut mac = <HmacSha256 as KeyInit>::new(&self.key.into());
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                mac.update(&[0]);
            }
            mac.update(part.as_bytes());
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(&mac.finalize().into_bytes());
        out
    }

    /// The CSRF token of `operator`: a MAC, as hex.
    pub fn csrf_for(&self, operator: &str) -> String {
        hex(&self.mac(&["csrf", operator]))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Who is acting, set by the auth layer: a token id, or "local" without tokens.
#[derive(Debug, Clone)]
pub(crate) struct Operator(pub String);

/// Everything a handler needs about its request.
pub(crate) struct Ctx {
    pub state: State,
    /// The prefix the console is nested under, no trailing slash ("" at the root).
    pub base: String,
    pub operator: String,
    pub csrf: String,
    pub query: Params,
    pub flash: Option<String>,
    pub sec_fetch_site: Option<String>,
    pub last_event_id: Option<String>,
}

impl Ctx {
    pub fn store(&self) -> &dyn Store {
        self.state.store.as_ref()
    }

    pub fn options(&self) -> &ConsoleOptions {
        &self.state.options
    }

    pub fn fail(&self, status: StatusCode, title: &str, message: impl Into<String>) -> Failure {
        Failure::new(&self.base, status, title, message)
    }

    pub fn bad(&self, message: impl Into<String>) -> Failure {
        self.fail(StatusCode::BAD_REQUEST, "Bad request", message)
    }

    pub fn store_error(&self, error: StoreError) -> Failure {
        store_failure(&self.base, error)
    }

    /// The page chrome for this request.
    pub fn chrome(&self) -> render::Chrome<'_> {
        render::Chrome {
            base: &self.base,
            operator: Some(&self.operator),
            writes: Some(self.options().allow_writes),
            flash: self.flash.as_deref(),
            logout: (!self.options().tokens.is_empty()).then_some(self.csrf.as_str()),
        }
    }
}

/// The prefix a request was nested under: its original path less the path
/// the console's router saw. Never starts with `//` or `/\` (a link built
/// from it must stay on this site).
pub(crate) fn base_of(original: &str, inner: &str) -> String {
    let base = match original.strip_suffix(inner) {
        Some(base) => base,
        None if inner == "/" => original,
        None => "",
    };
    let base = base.trim_end_matches('/');
    if !base.starts_with('/') || base.starts_with("//") || base.starts_with("/\\") {
        return String::new();
    }
    base.to_owned()
}

pub(crate) fn base_from_parts(parts: &Parts) -> String {
    let inner = parts.uri.path();
    match parts.extensions.get::<OriginalUri>() {
        Some(OriginalUri(original)) => base_of(original.path(), inner),
        None => String::new(),
    }
}

pub(crate) fn is_https(parts: &Parts) -> bool {
    let forwarded = parts
        .headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    forwarded || parts.uri.scheme_str() == Some("https")
}

impl FromRequestParts<State> for Ctx {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Self, Failure> {
        let base = base_from_parts(parts);
        let query = Params::parse(parts.uri.query().unwrap_or(""))
            .map_err(|e| Failure::new(&base, StatusCode::BAD_REQUEST, "Bad request", e))?;
        let operator = parts
            .extensions
            .get::<Operator>()
            .map(|o| o.0.clone())
            .unwrap_or_else(|| "local".to_owned());
        let header_text = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Ok(Self {
            state: state.clone(),
            csrf: state.csrf_for(&operator),
            flash: query.get("flash").map(str::to_owned),
            sec_fetch_site: header_text("sec-fetch-site"),
            last_event_id: header_text("last-event-id"),
            base,
            operator,
            query,
        })
    }
}

/// The session id from the path, or a 400 page.
pub(crate) struct SessionId(pub String);

impl FromRequestParts<State> for SessionId {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Self, Failure> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) if !id.is_empty() => Ok(Self(id)),
            Ok(_) => Err(Failure::new(
                &base_from_parts(parts),
                StatusCode::BAD_REQUEST,
                "Bad request",
                "the session id is empty",
            )),
            Err(e) => Err(Failure::new(
                &base_from_parts(parts),
                StatusCode::BAD_REQUEST,
                "Bad request",
                format!("bad session id in the path: {}", e.body_text()),
            )),
        }
    }
}

/// An error answered as an HTML page (boxed: results stay small).
#[derive(Debug)]
pub(crate) struct Failure(Box<FailureBody>);

#[derive(Debug)]
pub(crate) struct FailureBody {
    base: String,
    status: StatusCode,
    title: String,
    message: String,
    code: Option<&'static str>,
    testid: &'static str,
    extra: Option<Markup>,
}

impl Failure {
    pub fn new(base: &str, status: StatusCode, title: &str, message: impl Into<String>) -> Self {
        Self(Box::new(FailureBody {
            base: base.to_owned(),
            status,
            title: title.to_owned(),
            message: message.into(),
            code: None,
            testid: "error",
            extra: None,
        }))
    }

    pub fn with_testid(mut self, testid: &'static str) -> Self {
        self.0.testid = testid;
        self
    }

    pub fn with_extra(mut self, extra: Markup) -> Self {
        self.0.extra = Some(extra);
        self
    }

    fn with_code(mut self, code: &'static str) -> Self {
        self.0.code = Some(code);
        self
    }
}

/// The HTTP status a store error answers with.
pub(crate) fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorCode::NoSuchEvent | ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::SessionDeleted => StatusCode::GONE,
        ErrorCode::SessionInUse
        | ErrorCode::SupersededAttempt
        | ErrorCode::SessionCleared
        | ErrorCode::IdempotencyConflict
        | ErrorCode::PartialDuplicateBatch
        | ErrorCode::PayloadMismatch => StatusCode::CONFLICT,
        ErrorCode::Busy | ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub(crate) fn store_failure(base: &str, error: StoreError) -> Failure {
    let code = error.code();
    Failure::new(base, status_of(code), "Store error", error.to_string()).with_code(code.as_str())
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let this = *self.0;
        let chrome = render::Chrome {
            base: &this.base,
            operator: None,
            writes: None,
            flash: None,
            logout: None,
        };
        let body = html! {
            section.failure data-testid=(this.testid) {
                h1 { (this.title) }
                @if let Some(code) = this.code {
                    p { "Code: " code { (code) } }
                }
                p.message { (this.message) }
                @if let Some(extra) = &this.extra { (extra) }
                p { a href=(render::home(&this.base)) { "Back to the overview" } }
            }
        };
        let page = render::page(&chrome, &this.title, body);
        let mut response = (this.status, page).into_response();
        if this.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"a2-store console\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_a_user_can_act_on_has_its_own_status() {
        assert_eq!(status_of(ErrorCode::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(status_of(ErrorCode::NoSuchEvent), StatusCode::NOT_FOUND);
        assert_eq!(status_of(ErrorCode::PayloadMismatch), StatusCode::CONFLICT);
        assert_eq!(
            status_of(ErrorCode::Unavailable),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status_of(ErrorCode::Backend),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
