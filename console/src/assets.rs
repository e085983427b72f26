//! The embedded assets: htmx 2.0.4 and its SSE extension 2.2.2 (both
//! 0BSD, vendored from npm with their licenses in `assets/`), the
//! console's script and stylesheet.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::render::{HTMX, HTMX_SSE};

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// Every asset by name: (name, content type, bytes, cache forever).
const ASSETS: [(&str, &str, &[u8], bool); 6] = [
    (
        HTMX,
        JS,
        include_bytes!("../assets/htmx-2.0.4.min.js"),
        true,
    ),
    (
        HTMX_SSE,
        JS,
        include_bytes!("../assets/htmx-ext-sse-2.2.2.js"),
        true,
    ),
    (
        "console.js",
        JS,
        include_bytes!("../assets/console.js"),
        false,
    ),
    (
        "console.css",
        CSS,
        include_bytes!("../assets/console.css"),
        false,
    ),
    (
        "htmx-LICENSE",
        TEXT,
        include_bytes!("../assets/htmx-LICENSE"),
        true,
    ),
    (
        "htmx-ext-sse-LICENSE",
        TEXT,
        include_bytes!("../assets/htmx-ext-sse-LICENSE"),
        true,
    ),
];

/// `GET /assets/{file}`: an embedded asset, or 404.
pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, ..)| *name == file) {
        Some((_, content_type, bytes, pinned)) => {
            let cache = if *pinned {
                "public, max-age=31536000, immutable"
            } else {
                "public, max-age=300"
            };
            (
                [
                    (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                    (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
                ],
                *bytes,
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
