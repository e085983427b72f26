//! Authentication: bearer tokens, or the login cookie `POST /login` sets.
//!
//! The cookie holds the token's id and a MAC of the token under the
//! router's random key, never the token; it lasts as long as the router
//! (a restart logs everyone out). Tokens and MACs are compared in
//! constant time.

use axum::body::Bytes;
use axum::extract::{Request, State as StateExtractor};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use maud::html;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::context::{base_from_parts, hex, is_https, Ctx, Failure, Operator, State};
use crate::params::Params;
use crate::render;
use crate::token_id;

/// The login cookie's name.
pub(crate) const COOKIE: &str = "a2_console";

/// The token of `tokens` that `given` is, compared in constant time.
fn matching_token<'a>(tokens: &'a [String], given: &str) -> Option<&'a str> {
    let given = Sha256::digest(given.as_bytes());
    let mut found = None;
    for token in tokens {
        let digest = Sha256::digest(token.as_bytes());
        if bool::from(digest.as_slice().ct_eq(given.as_slice())) && found.is_none() {
            found = Some(token.as_str());
        }
    }
    found
}

/// The cookie value for `token`: `<token id>.<mac>`.
fn cookie_value(state: &State, token: &str) -> String {
    format!(
        "{}.{}",
        token_id(token),
        hex(&state.mac(&["cookie", token]))
    )
}

/// The operator a request authenticates as, if any.
fn authenticate(state: &State, headers: &HeaderMap) -> Option<String> {
    let tokens = &state.options.tokens;
    if let Some(auth) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let mut words = auth.splitn(2, ' ');
        let scheme = words.next().unwrap_or("");
        let given = words.next().unwrap_or("").trim();
        if scheme.eq_ignore_ascii_case("bearer") && !given.is_empty() {
            if let Some(token) = matching_token(tokens, given) {
                return Some(token_id(token));
            }
        }
    }
    for value in headers.get_all(header::COOKIE) {
        let Ok(text) = value.to_str() else { continue };
        for pair in text.split(';') {
            let Some((name, given)) = pair.trim().split_once('=') else {
                continue;
            };
            if name != COOKIE {
                continue;
            }
            let mut found = None;
            for token in tokens {
                let expected = cookie_value(state, token);
                if bool::from(expected.as_bytes().ct_eq(given.as_bytes())) && found.is_none() {
                    found = Some(token_id(token));
                }
            }
            if found.is_some() {
                return found;
            }
        }
    }
    None
}

/// The 401 page (never naming what was sent).
fn unauthorized(base: &str, message: &str) -> Response {
    Failure::new(base, StatusCode::UNAUTHORIZED, "Unauthorized", message)
        .with_testid("unauthorized")
        .with_extra(html! {
            p { a href={ (base) "/login" } { "Log in with a token" } }
        })
        .into_response()
}

/// The auth layer: with tokens configured, a request needs a valid bearer
/// token or login cookie; it records the operator for handlers and logs.
pub(crate) async fn require(
    StateExtractor(state): StateExtractor<State>,
    mut request: Request,
    next: Next,
) -> Response {
    if state.options.tokens.is_empty() {
        request
            .extensions_mut()
            .insert(Operator("local".to_owned()));
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    match authenticate(&state, &parts.headers) {
        Some(operator) => {
            parts.extensions.insert(Operator(operator));
            next.run(Request::from_parts(parts, body)).await
        }
        None => {
            let base = base_from_parts(&parts);
            unauthorized(
                &base,
                "This console needs a token: send 'Authorization: Bearer <token>' or log in.",
            )
        }
    }
}

/// The login form.
fn login_form(base: &str) -> maud::Markup {
    html! {
        form.stack method="post" action={ (base) "/login" } {
            label {
                "Token"
                input type="password" name="token" autocomplete="current-password" required;
            }
            button.primary type="submit" { "Log in" }
        }
    }
}

/// `GET /login`: a password field for the token.
pub(crate) async fn login_page(request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let base = base_from_parts(&parts);
    let chrome = render::Chrome {
        base: &base,
        operator: None,
        writes: None,
        flash: None,
        logout: None,
    };
    let body = html! {
        h1 { "Log in" }
        p { "Enter one of the console's tokens. The browser keeps a cookie naming it (not the token) until the console restarts or you log out." }
        (login_form(&base))
    };
    render::page(&chrome, "Log in", body).into_response()
}

/// `POST /login`: sets the cookie for a valid token, else 401.
pub(crate) async fn login(
    StateExtractor(state): StateExtractor<State>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let base = base_from_parts(&parts);
    let cross_site = parts
        .headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| site != "same-origin" && site != "none");
    if cross_site {
        return Failure::new(
            &base,
            StatusCode::FORBIDDEN,
            "Forbidden",
            "a login from another site is refused",
        )
        .with_testid("csrf")
        .into_response();
    }
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return Failure::new(
            &base,
            StatusCode::BAD_REQUEST,
            "Bad request",
            "the form is too large",
        )
        .into_response();
    };
    let form = match Params::parse_body(&bytes) {
        Ok(form) => form,
        Err(e) => {
            return Failure::new(&base, StatusCode::BAD_REQUEST, "Bad request", e).into_response()
        }
    };
    let tokens = &state.options.tokens;
    let token = form
        .get("token")
        .and_then(|given| matching_token(tokens, given));
    let Some(token) = token else {
        return Failure::new(
            &base,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "That token is not accepted.",
        )
        .with_testid("unauthorized")
        .with_extra(login_form(&base))
        .into_response();
    };
    tracing::info!(action = "login", operator = %token_id(token), "a2-store console");
    let path = if base.is_empty() { "/" } else { base.as_str() };
    let secure = if is_https(&parts) { "; Secure" } else { "" };
    let cookie = format!(
        "{COOKIE}={}; Path={path}; HttpOnly; SameSite=Strict{secure}",
        cookie_value(&state, token)
    );
    see_other(&render::home(&base), Some(cookie))
}

/// `POST /logout`: forgets the cookie.
pub(crate) async fn logout(ctx: Ctx, body: Bytes) -> Result<Response, Failure> {
    crate::actions::check_csrf(&ctx, &body)?;
    let path = if ctx.base.is_empty() {
        "/"
    } else {
        ctx.base.as_str()
    };
    let cookie = format!("{COOKIE}=; Path={path}; HttpOnly; SameSite=Strict; Max-Age=0");
    Ok(see_other(&format!("{}/login", ctx.base), Some(cookie)))
}

/// A 303 to `location`, optionally setting a cookie.
pub(crate) fn see_other(location: &str, cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    match HeaderValue::from_str(location) {
        Ok(value) => {
            headers.insert(header::LOCATION, value);
        }
        Err(_) => {
            headers.insert(header::LOCATION, HeaderValue::from_static("./"));
        }
    }
    if let Some(cookie) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    response
}
