//! HTML building blocks: the page chrome, times, links, payloads and the
//! timeline row (shared by the session page and the live stream).

use a2_store_api::{Cursor, StoredEvent};
use axum::response::Html;
use maud::{html, Markup, DOCTYPE};

use crate::params::{civil_from_days, now_ms};

/// The vendored htmx and its SSE extension, pinned.
pub(crate) const HTMX: &str = "htmx-2.0.4.min.js";
pub(crate) const HTMX_SSE: &str = "htmx-ext-sse-2.2.2.js";

/// What every page's frame shows.
pub(crate) struct Chrome<'a> {
    pub base: &'a str,
    /// The operator's token id ("local" without tokens); `None` on error pages.
    pub operator: Option<&'a str>,
    /// Whether writes are allowed; `None` when not to be said.
    pub writes: Option<bool>,
    pub flash: Option<&'a str>,
    /// With tokens configured: a logout button carrying this CSRF token.
    pub logout: Option<&'a str>,
}

/// A whole page.
pub(crate) fn page(chrome: &Chrome<'_>, title: &str, body: Markup) -> Html<String> {
    let base = chrome.base;
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false,"historyCacheSize":0}"#;
                title { (title) " · a2 console" }
                link rel="stylesheet" href={ (base) "/assets/console.css" };
                link rel="icon" href="data:,";
                script src={ (base) "/assets/" (HTMX) } {}
                script src={ (base) "/assets/" (HTMX_SSE) } {}
                script src={ (base) "/assets/console.js" } {}
            }
            body {
                header.top {
                    a.brand href=(home(base)) { "a2 console" }
                    nav {
                        a href=(home(base)) { "Overview" }
                        a href={ (base) "/sessions" } { "Sessions" }
                        a href={ (base) "/dead-letters" } { "Dead letters" }
                        a href={ (base) "/health" } { "Health" }
                    }
                    @if let Some(writes) = chrome.writes {
                        @if writes {
                            span.mode.writes data-testid="mode" { "writes allowed" }
                        } @else {
                            span.mode.readonly data-testid="mode" { "read-only" }
                        }
                    }
                    @if let Some(operator) = chrome.operator {
                        span.operator title="operator (token id)" { (operator) }
                    }
                    @if let Some(csrf) = chrome.logout {
                        form.inline method="post" action={ (base) "/logout" } {
                            (csrf_field(csrf))
                            button type="submit" data-testid="logout" { "Log out" }
                        }
                    }
                }
                main {
                    @if let Some(flash) = chrome.flash {
                        p.flash data-testid="flash" role="status" { (flash) }
                    }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

/// The overview's address: the prefix itself (an app nesting the
/// console at `/admin` serves `/admin`, not `/admin/`), or `/` at the root.
pub(crate) fn home(base: &str) -> String {
    if base.is_empty() {
        "/".to_owned()
    } else {
        base.to_owned()
    }
}

/// A UTC time, `2024-05-01 12:34:56.789Z`.
pub(crate) fn time(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, rem) = (rem / 3_600_000, rem % 3_600_000);
    let (min, rem) = (rem / 60_000, rem % 60_000);
    let (s, milli) = (rem / 1000, rem % 1000);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// How far `ms` is from now: `in 12s`, `3m ago`.
pub(crate) fn relative(ms: i64) -> String {
    let delta = ms.saturating_sub(now_ms());
    let span = delta.unsigned_abs() / 1000;
    let text = if span < 120 {
        format!("{span}s")
    } else if span < 7200 {
        format!("{}m", span / 60)
    } else if span < 172_800 {
        format!("{}h", span / 3600)
    } else {
        format!("{}d", span / 86_400)
    };
    if delta >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// A time element: absolute, with the relative time beside it.
pub(crate) fn when(ms: Option<i64>) -> Markup {
    html! {
        @match ms {
            Some(ms) => time datetime=(ms) title=(relative(ms)) { (time(ms)) " " small { "(" (relative(ms)) ")" } },
            None => span.none { "—" },
        }
    }
}

/// `text` percent-encoded for one path segment (every byte but unreserved ones).
pub(crate) fn seg(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `path?query` with the non-empty pairs of `pairs`.
pub(crate) fn url(base: &str, path: &str, pairs: &[(&str, &str)]) -> String {
    let kept: Vec<(&str, &str)> = pairs
        .iter()
        .copied()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let query = serde_urlencoded::to_string(&kept).unwrap_or_default();
    if query.is_empty() {
        format!("{base}{path}")
    } else {
        format!("{base}{path}?{query}")
    }
}

/// The page of one session.
pub(crate) fn session_path(base: &str, id: &str) -> String {
    format!("{base}/sessions/{}", seg(id))
}

/// What a payload left as stored by the payload layers shows instead:
/// `encrypted (key k2)` (the console was given no key for it) or
/// `offloaded (N bytes, sha256 …)` (not fetched); `None` for a payload.
fn placeholder(value: &serde_json::Value) -> Option<String> {
    #[cfg(feature = "payload-layers")]
    return a2_store::stored_payload_placeholder(value);
    #[cfg(not(feature = "payload-layers"))]
    {
        let _ = value;
        None
    }
}

/// A payload left as stored, in words (see [`placeholder`]).
fn sealed(text: String) -> Markup {
    html! { span.sealed data-testid="sealed" { (text) } }
}

/// A JSON value, pretty, "hidden", or what a payload left encrypted or
/// offloaded is.
pub(crate) fn json_block(value: &serde_json::Value, hide: bool) -> Markup {
    if hide {
        return html! { span.hidden data-testid="hidden" { "hidden" } };
    }
    if let Some(text) = placeholder(value) {
        return sealed(text);
    }
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre.json { (text) } }
}

/// A payload folded in `<details>`, "hidden", or what a payload left
/// encrypted or offloaded is.
pub(crate) fn payload(value: &serde_json::Value, hide: bool) -> Markup {
    if hide {
        return html! { span.hidden data-testid="hidden" { "hidden" } };
    }
    if let Some(text) = placeholder(value) {
        return sealed(text);
    }
    let compact = value.to_string();
    let summary = if compact.chars().count() > 60 {
        let cut: String = compact.chars().take(60).collect();
        format!("{cut}…")
    } else {
        compact
    };
    html! {
        details.payload {
            summary { code { (summary) } }
            (json_block(value, false))
        }
    }
}

/// What a cursor's head is doing, in words.
pub(crate) fn head_state(cursor: &Cursor, now: i64) -> &'static str {
    let d = &cursor.dispatch;
    if cursor.head.is_none() {
        "idle"
    } else if d.failed_at.is_some() {
        "dead-lettered"
    } else if cursor.pause.is_some() {
        "paused"
    } else if d.claim_expires_at.is_some_and(|t| t > now) {
        if d.claim_holder.is_some() {
            "leased"
        } else {
            "waiting (retry delay or scheduled)"
        }
    } else {
        "claimable"
    }
}

/// `consumer/lane` or `consumer` for an event cursor.
pub(crate) fn cursor_name(consumer: &str, lane: Option<&str>) -> String {
    match lane {
        Some(lane) => format!("{consumer}/{lane}"),
        None => consumer.to_owned(),
    }
}

/// One timeline row: index, type, time, id, payload, cause, the cursors
/// whose head it is.
pub(crate) fn event_row(
    base: &str,
    event: &StoredEvent,
    hide: bool,
    work: &[&Cursor],
    page_limit: usize,
) -> Markup {
    let session = session_path(base, &event.session_id);
    let now = now_ms();
    html! {
        div.event id={ "event-" (event.index) } data-testid="event" data-index=(event.index) {
            span.index { "#" (event.index) }
            span.etype { code { (event.event_type) } }
            span.time { (when(Some(event.created_at))) }
            span.id title="event id" { (event.id) }
            @if let Some(cause) = &event.cause {
                span.cause {
                    "caused by "
                    a href={ (session) "?after=" (cause.index.saturating_sub(1)) "&limit=" (page_limit) "#event-" (cause.index) } data-testid="cause" {
                        (cursor_name(&cause.consumer, cause.lane.as_deref())) " #" (cause.index) " attempt " (cause.attempt)
                    }
                }
            }
            @if !work.is_empty() {
                span.work {
                    "head of "
                    @for (i, cursor) in work.iter().enumerate() {
                        @if i > 0 { ", " }
                        span.cursor { (cursor_name(&cursor.consumer, cursor.lane.as_deref())) " (" (head_state(cursor, now)) ")" }
                    }
                }
            }
            div.body { (payload(event.payload.as_value(), hide)) }
        }
    }
}

/// The hidden CSRF field of a form.
pub(crate) fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// A number, or `n+` when it was counted on a capped page.
pub(crate) fn count(n: u64, capped: bool) -> String {
    if capped {
        format!("{n}+")
    } else {
        n.to_string()
    }
}

/// Bytes in KiB, MiB or GiB.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
