//! `GET /sessions/{id}/live?after=N`: the session's appends as server-sent
//! events, each a rendered timeline row (event name `event`, id the log
//! index, so a reconnecting browser resumes after the last row it got).
//! When the stream fails (the session was deleted, the store went away)
//! a last row says so, then an event named `close` tells the page to stop.

use std::convert::Infallible;
use std::time::Duration;

use a2_store_api::StoreError;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, StreamExt};
use maud::html;

use crate::context::{Ctx, Failure, SessionId};
use crate::render::event_row;

/// An SSE event carrying `markup` as data (no bare carriage return can
/// break the framing).
fn row_event(name: &str, markup: String) -> Event {
    Event::default()
        .event(name)
        .data(markup.replace('\r', "&#13;"))
}

fn ended(message: &str) -> Vec<Event> {
    let row = html! {
        div.event.ended data-testid="stream-ended" { "Live updates ended: " (message) }
    };
    vec![
        row_event("event", row.into_string()),
        Event::default().event("close").data("end"),
    ]
}

fn ended_by(error: &StoreError) -> Vec<Event> {
    ended(&format!("{} ({})", error, error.code()))
}

/// The live stream of one session's timeline rows.
pub(crate) async fn live(ctx: Ctx, SessionId(id): SessionId) -> Result<Response, Failure> {
    let mut after = ctx.query.u64("after").map_err(|e| ctx.bad(e))?.unwrap_or(0);
    // A browser reconnecting says which row it got last.
    if let Some(last) = ctx
        .last_event_id
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
    {
        after = after.max(last);
    }
    let base = ctx.base.clone();
    let hide = ctx.options().hide_payloads;
    let keep_alive = KeepAlive::new().interval(Duration::from_secs(15));
    let events = match ctx.store().subscribe(&id, after).await {
        Ok(events) => events,
        Err(error) => {
            let once = stream::iter(ended_by(&error).into_iter().map(Ok::<_, Infallible>));
            return Ok(Sse::new(once).keep_alive(keep_alive).into_response());
        }
    };
    let rows = stream::unfold(Some(events), move |state| {
        let base = base.clone();
        async move {
            let mut events = state?;
            match events.next().await {
                Some(Ok(event)) => {
                    let row = event_row(&base, &event, hide, &[], 50).into_string();
                    let sse = row_event("event", row).id(event.index.to_string());
                    Some((vec![sse], Some(events)))
                }
                Some(Err(error)) => Some((ended_by(&error), None)),
                None => Some((ended("the store closed the stream"), None)),
            }
        }
    })
    .flat_map(stream::iter)
    .map(Ok::<_, Infallible>);
    Ok(Sse::new(rows).keep_alive(keep_alive).into_response())
}
