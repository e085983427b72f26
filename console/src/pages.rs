//! The read-only pages. Each costs what it shows: one listing page, or a
//! bounded number of calls, never a scan of every session.

use std::collections::BTreeMap;

use a2_store_api::{
    Cursor, Head, ListSessions, ListWork, Pause, ReadOptions, ReadStateOptions, RedriveAction,
    SessionInfo, SessionWork, StoreError, MAX_WORK_LIMIT,
};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use futures::StreamExt;
use maud::{html, Markup};

use crate::context::{Ctx, Failure, SessionId};
use crate::params::{now_ms, parse_time, shorten};
use crate::render::{
    self, count, csrf_field, cursor_name, event_row, head_state, json_block, payload, session_path,
    url, when,
};

/// Sessions the overview counts per consumer: one `list_work` page.
pub(crate) const OVERVIEW_SCAN: usize = MAX_WORK_LIMIT;
/// "Leases running out soon": busy heads ending within this, ms.
const SOON_MS: i64 = 60_000;
/// Rows per page by default, and at most.
const PAGE: usize = 50;
const MAX_PAGE: usize = 200;
/// The redrive preview examines at most this many sessions with dead letters.
pub(crate) const PREVIEW_SESSIONS: usize = 500;
/// ... and at most this many `list_work` pages to find them.
const PREVIEW_PAGES: usize = 5;
/// Calls in flight at once when a page reads several sessions.
const CONCURRENCY: usize = 8;

type Page = Result<Response, Failure>;

fn ok(ctx: &Ctx, title: &str, body: Markup) -> Page {
    Ok(render::page(&ctx.chrome(), title, body).into_response())
}

/// The consumers a page lists: `?consumer=` (repeated or comma-separated),
/// else the configured ones.
fn consumers(ctx: &Ctx) -> Vec<String> {
    let asked = ctx.query.all("consumer");
    if asked.is_empty() {
        ctx.options().consumers.clone()
    } else {
        asked
    }
}

/// The largest string sorting below `prefix` that any id is likely to
/// follow: listing `after` it starts just before the first id with the
/// prefix (ids in between are skipped while they sort below the prefix).
pub(crate) fn below(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    let last = chars.pop()?;
    let mut out: String = chars.into_iter().collect();
    if last == '\0' {
        return Some(out);
    }
    let mut code = u32::from(last) - 1;
    if (0xD800..=0xDFFF).contains(&code) {
        code = 0xD7FF;
    }
    if let Some(c) = char::from_u32(code) {
        out.push(c);
    }
    out.push(char::MAX);
    Some(out)
}

/// Where a listing with `after` and `prefix` starts.
fn start_after(after: Option<&str>, prefix: Option<&str>) -> Option<String> {
    let low = prefix.and_then(below);
    match (after, low) {
        (Some(a), Some(l)) => Some(if a > l.as_str() { a.to_owned() } else { l }),
        (Some(a), None) => Some(a.to_owned()),
        (None, l) => l,
    }
}

// ---------------------------------------------------------------- overview

struct Counts {
    consumer: String,
    sessions: usize,
    claimable: (u64, u64),
    busy: (u64, u64),
    dead: (u64, u64),
    capped: bool,
    soon: Vec<(String, i64)>,
}

async fn count_consumer(ctx: &Ctx, consumer: &str, now: i64) -> Result<Counts, StoreError> {
    let page = ctx
        .store()
        .list_work(ListWork::new([consumer]).with_limit(OVERVIEW_SCAN))
        .await?;
    let mut counts = Counts {
        consumer: consumer.to_owned(),
        sessions: page.len(),
        claimable: (0, 0),
        busy: (0, 0),
        dead: (0, 0),
        capped: page.len() >= OVERVIEW_SCAN,
        soon: Vec::new(),
    };
    for work in &page {
        let add = |slot: &mut (u64, u64), n: u64| {
            if n > 0 {
                slot.0 += 1;
                slot.1 += n;
            }
        };
        add(&mut counts.claimable, work.claimable);
        add(&mut counts.busy, work.busy);
        add(&mut counts.dead, work.dead_lettered);
        if let Some(at) = work.next_expiry {
            if at <= now + SOON_MS {
                counts.soon.push((work.session_id.clone(), at));
            }
        }
    }
    counts.soon.sort_by_key(|(_, at)| *at);
    counts.soon.truncate(10);
    Ok(counts)
}

fn consumer_pairs(consumers: &[String]) -> Vec<(&str, &str)> {
    consumers.iter().map(|c| ("consumer", c.as_str())).collect()
}

async fn overview_block(ctx: &Ctx, consumers: &[String]) -> Result<Markup, Failure> {
    let now = now_ms();
    let mut all = Vec::new();
    for consumer in consumers {
        all.push(
            count_consumer(ctx, consumer, now)
                .await
                .map_err(|e| ctx.store_error(e))?,
        );
    }
    let refresh = ctx.options().refresh_secs;
    let fragment = url(&ctx.base, "/fragments/overview", &consumer_pairs(consumers));
    let base = &ctx.base;
    Ok(html! {
        section #overview data-testid="overview" data-refresh
            hx-get=(fragment) hx-trigger={ "every " (refresh) "s" } hx-swap="outerHTML" {
            @if consumers.is_empty() {
                p.muted { "No consumers to count: the store keeps no registry of them. Name one below (or start the console with its consumers)." }
            }
            div.cards {
                @for c in &all {
                    div.card data-testid="consumer-counts" data-consumer=(c.consumer) {
                        h3 { code { (c.consumer) } }
                        dl {
                            dt { a href=(url(base, "/sessions", &[("consumer", &c.consumer)])) { "sessions with work" } }
                            dd data-testid="count-sessions" { (count(c.sessions as u64, c.capped)) }
                            dt { a href=(url(base, "/sessions", &[("consumer", &c.consumer), ("state", "claimable")])) { "with claimable heads" } }
                            dd data-testid="count-claimable" { (count(c.claimable.0, c.capped)) small { " (" (count(c.claimable.1, c.capped)) " heads)" } }
                            dt { a href=(url(base, "/sessions", &[("consumer", &c.consumer), ("state", "busy")])) { "with busy heads" } }
                            dd data-testid="count-busy" { (count(c.busy.0, c.capped)) small { " (" (count(c.busy.1, c.capped)) " heads)" } }
                            dt { a href=(url(base, "/dead-letters", &[("consumer", &c.consumer)])) { "with dead letters" } }
                            dd.dead data-testid="count-dead" { (count(c.dead.0, c.capped)) small { " (" (count(c.dead.1, c.capped)) " heads)" } }
                        }
                        @if c.capped {
                            p.muted { small { "Counted on the first " (OVERVIEW_SCAN) " sessions with work." } }
                        }
                        @if !c.soon.is_empty() {
                            h4 { "Busy heads ending within " (SOON_MS / 1000) " s" }
                            ul.soon {
                                @for (session, at) in &c.soon {
                                    li { a href=(session_path(base, session)) { (session) } " " (when(Some(*at))) }
                                }
                            }
                        }
                        @if c.dead.0 > 0 {
                            p { a href=(url(base, "/redrive-all", &[("consumer", &c.consumer), ("action", "retry")])) { "Redrive all dead letters…" } }
                        }
                    }
                }
            }
            p.muted { small { "Counts as of " (render::time(now)) "; refreshed every " (refresh) " s." } }
        }
    })
}

/// `GET /`: the overview.
pub(crate) async fn overview(ctx: Ctx) -> Page {
    let consumers = consumers(&ctx);
    let block = overview_block(&ctx, &consumers).await?;
    let pauses = ctx
        .store()
        .pauses(None)
        .await
        .map_err(|e| ctx.store_error(e))?;
    let body = html! {
        h1 { "Overview" }
        div.toolbar {
            form.stack method="get" action=(render::home(&ctx.base)) {
                label { "Consumers (comma-separated)" input type="text" name="consumer" value=(consumers.join(",")); }
                button type="submit" { "Show" }
            }
            button type="button" data-refresh-toggle aria-pressed="false" data-testid="refresh-toggle" { "Pause refresh" }
        }
        (block)
        h2 { "Pauses in force" }
        (pauses_table(&ctx, &pauses, None))
    };
    ok(&ctx, "Overview", body)
}

/// `GET /fragments/overview`: the counts block alone, for the timed refresh.
pub(crate) async fn overview_fragment(ctx: Ctx) -> Page {
    let consumers = consumers(&ctx);
    let block = overview_block(&ctx, &consumers).await?;
    Ok(Html(block.into_string()).into_response())
}

const PAUSES_SHOWN: usize = 100;

fn pauses_table(ctx: &Ctx, pauses: &[Pause], session: Option<&str>) -> Markup {
    html! {
        @if pauses.is_empty() {
            p.muted { "None." }
        } @else {
            table data-testid="pauses" {
                thead { tr { th { "consumer" } th { "where" } th { "since" } th { "until" } th {} } }
                tbody {
                    @for p in pauses.iter().take(PAUSES_SHOWN) {
                        tr data-testid="pause" {
                            td { code { (p.consumer) } }
                            td {
                                @match &p.session_id {
                                    Some(id) => a href=(session_path(&ctx.base, id)) { (id) },
                                    None => "every session",
                                }
                            }
                            td { (when(Some(p.paused_at))) }
                            td { (when(p.until_ms)) }
                            td {
                                @if let (Some(id), Some(_)) = (&p.session_id, session) {
                                    form.inline method="post" action={ (session_path(&ctx.base, id)) "/resume" } {
                                        (csrf_field(&ctx.csrf))
                                        input type="hidden" name="consumer" value=(p.consumer);
                                        button type="submit" { "Resume" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if pauses.len() > PAUSES_SHOWN {
                p.muted { "and " (pauses.len() - PAUSES_SHOWN) " more" }
            }
        }
    }
}

// ---------------------------------------------------------------- sessions

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Any,
    Claimable,
    Busy,
    Dead,
}

impl State {
    fn parse(text: Option<&str>) -> Result<Self, String> {
        match text {
            None | Some("any") => Ok(Self::Any),
            Some("claimable") => Ok(Self::Claimable),
            Some("busy") => Ok(Self::Busy),
            Some("dead") => Ok(Self::Dead),
            Some(other) => Err(format!(
                "unknown state '{}': use claimable, busy or dead",
                shorten(other)
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Any => "",
            Self::Claimable => "claimable",
            Self::Busy => "busy",
            Self::Dead => "dead",
        }
    }

    fn keeps(self, work: &SessionWork) -> bool {
        match self {
            Self::Any => true,
            Self::Claimable => work.claimable > 0,
            Self::Busy => work.busy > 0,
            Self::Dead => work.dead_lettered > 0,
        }
    }
}

/// `GET /sessions`: a page of sessions, by consumer, state and id prefix.
pub(crate) async fn sessions(ctx: Ctx) -> Page {
    let q = &ctx.query;
    let limit = q.limit(PAGE, MAX_PAGE).map_err(|e| ctx.bad(e))?;
    let state = State::parse(q.get("state")).map_err(|e| ctx.bad(e))?;
    let consumer = q.get("consumer");
    let prefix = q.get("prefix");
    let after = q.get("after");
    if state != State::Any && consumer.is_none() {
        return Err(ctx.bad("a state needs a consumer: sessions have work only for a consumer"));
    }
    let start = start_after(after, prefix);
    let matches = |id: &str| prefix.is_none_or(|p| id.starts_with(p));
    // Rows shown, and where the next page starts when there is one.
    let (rows, next): (Markup, Option<String>) = match consumer {
        None => {
            let mut listing = ListSessions::default().with_limit(limit + 1);
            if let Some(start) = &start {
                listing = listing.with_after(start.clone());
            }
            let page = ctx
                .store()
                .sessions(listing)
                .await
                .map_err(|e| ctx.store_error(e))?;
            let more = page.len() > limit;
            let mut shown: Vec<&SessionInfo> = Vec::new();
            let mut ended = false;
            for info in page.iter().take(limit) {
                if matches(&info.session_id) {
                    shown.push(info);
                } else if prefix.is_some_and(|p| info.session_id.as_str() > p) {
                    ended = true;
                    break;
                }
            }
            let next = match page
                .get(..limit.min(page.len()))
                .and_then(<[SessionInfo]>::last)
            {
                Some(last) if more && !ended => Some(last.session_id.clone()),
                _ => None,
            };
            (session_rows(&ctx, &shown), next)
        }
        Some(consumer) => {
            let mut listing = ListWork::new([consumer]).with_limit(limit);
            if let Some(start) = &start {
                listing = listing.with_after(start.clone());
            }
            let page = ctx
                .store()
                .list_work(listing)
                .await
                .map_err(|e| ctx.store_error(e))?;
            let mut shown: Vec<&SessionWork> = Vec::new();
            let mut ended = false;
            for work in &page {
                if !matches(&work.session_id) {
                    if prefix.is_some_and(|p| work.session_id.as_str() > p) {
                        ended = true;
                        break;
                    }
                    continue;
                }
                if state.keeps(work) {
                    shown.push(work);
                }
            }
            let next = match page.last() {
                Some(last) if page.len() >= limit && !ended => Some(last.session_id.clone()),
                _ => None,
            };
            (work_rows(&ctx, &shown), next)
        }
    };
    let base = &ctx.base;
    let here = |after: &str| {
        url(
            base,
            "/sessions",
            &[
                ("consumer", consumer.unwrap_or("")),
                ("state", state.name()),
                ("prefix", prefix.unwrap_or("")),
                ("after", after),
                ("limit", &limit.to_string()),
            ],
        )
    };
    let body = html! {
        h1 { "Sessions" }
        form.stack method="get" action={ (base) "/sessions" } data-testid="sessions-filter" {
            label { "Consumer" input type="text" name="consumer" value=(consumer.unwrap_or("")); }
            label { "State"
                select name="state" {
                    @for (value, label) in [("", "any"), ("claimable", "claimable"), ("busy", "busy"), ("dead", "dead-lettered")] {
                        option value=(value) selected[state.name() == value] { (label) }
                    }
                }
            }
            label { "Id prefix" input type="text" name="prefix" value=(prefix.unwrap_or("")); }
            label { "Per page" input type="number" name="limit" min="1" max=(MAX_PAGE) value=(limit); }
            button type="submit" { "Filter" }
        }
        @if consumer.is_some() && state != State::Any {
            p.muted { small { "Sessions with " (state.name()) " heads among the next " (limit) " sessions with work for the consumer." } }
        }
        (rows)
        div.pager {
            @if after.is_some() {
                a href=(here("")) data-testid="first-page" { "« First page" }
            }
            @if let Some(next) = &next {
                a href=(here(next)) data-testid="next-page" rel="next" { "Next page »" }
            }
        }
    };
    ok(&ctx, "Sessions", body)
}

fn session_rows(ctx: &Ctx, rows: &[&SessionInfo]) -> Markup {
    html! {
        table data-testid="sessions" {
            thead { tr { th { "session" } th.num { "head" } th.num { "clear index" } th.num { "reclaimed through" } th.num { "incarnation" } th { "forked from" } } }
            tbody {
                @for info in rows {
                    tr data-testid="session-row" data-session=(info.session_id) {
                        td { a href=(session_path(&ctx.base, &info.session_id)) { (info.session_id) } }
                        td.num { (info.head) }
                        td.num { (info.clear_index) }
                        td.num { (info.reclaimed_through) }
                        td.num { (info.incarnation) }
                        td {
                            @if let Some(origin) = &info.forked_from {
                                a href={ (session_path(&ctx.base, &origin.session_id)) "#event-" (origin.index) } { (origin.session_id) " #" (origin.index) }
                            }
                        }
                    }
                }
            }
        }
        @if rows.is_empty() { p.muted data-testid="empty" { "No sessions on this page." } }
    }
}

fn work_rows(ctx: &Ctx, rows: &[&SessionWork]) -> Markup {
    html! {
        table data-testid="sessions" {
            thead { tr { th { "session" } th.num { "claimable" } th.num { "busy" } th.num { "dead-lettered" } th { "ready since" } th { "next expiry" } } }
            tbody {
                @for work in rows {
                    tr data-testid="session-row" data-session=(work.session_id) {
                        td { a href=(session_path(&ctx.base, &work.session_id)) { (work.session_id) } }
                        td.num { (work.claimable) }
                        td.num { (work.busy) }
                        td.num { (work.dead_lettered) }
                        td { (when(work.ready_since)) }
                        td { (when(work.next_expiry)) }
                    }
                }
            }
        }
        @if rows.is_empty() { p.muted data-testid="empty" { "No sessions on this page." } }
    }
}

// ---------------------------------------------------------------- one session

/// The session named `id`, looked up with one `sessions` page.
pub(crate) async fn find_session(ctx: &Ctx, id: &str) -> Result<Option<SessionInfo>, Failure> {
    let mut listing = ListSessions::default().with_limit(4);
    if let Some(start) = below(id) {
        listing = listing.with_after(start);
    }
    let page = ctx
        .store()
        .sessions(listing)
        .await
        .map_err(|e| ctx.store_error(e))?;
    Ok(page.into_iter().find(|info| info.session_id == id))
}

/// `GET /sessions/{id}`: the timeline and everything about one session.
pub(crate) async fn session(ctx: Ctx, SessionId(id): SessionId) -> Page {
    let q = &ctx.query;
    let limit = q.limit(PAGE, MAX_PAGE).map_err(|e| ctx.bad(e))?;
    let after_param = q.u64("after").map_err(|e| ctx.bad(e))?;
    let reducer = q.get("reducer");
    let store = ctx.store();
    let hide = ctx.options().hide_payloads;
    let info = find_session(&ctx, &id).await?;
    let head = info.as_ref().map_or(0, |i| i.head);
    let after = after_param.unwrap_or_else(|| head.saturating_sub(limit as u64));
    let fail = |e| ctx.store_error(e);
    let events = store
        .read(
            &id,
            ReadOptions::default().with_after(after).with_limit(limit),
        )
        .await
        .map_err(fail)?;
    let cursors = store.cursors(&id).await.map_err(fail)?;
    let dead = store.dead_letters(&id).await.map_err(fail)?;
    let pauses = store.pauses(Some(&id)).await.map_err(fail)?;
    let presence = store.read_presence(&id).await.map_err(fail)?;
    let snapshot = match reducer {
        Some(reducer) => Some(
            store
                .read_state(&id, reducer, ReadStateOptions::default())
                .await
                .map_err(fail)?,
        ),
        None => None,
    };
    let last_shown = events.last().map_or(after, |e| e.index);
    let newest = last_shown >= head;
    let mut work: BTreeMap<u64, Vec<&Cursor>> = BTreeMap::new();
    for cursor in &cursors {
        if let Some(index) = cursor.head {
            work.entry(index).or_default().push(cursor);
        }
    }
    let base = &ctx.base;
    let path = session_path(base, &id);
    let live = format!("{path}/live?after={last_shown}");
    let now = now_ms();
    let page_link = |after: u64| format!("{path}?after={after}&limit={limit}");
    let writes_note = !ctx.options().allow_writes;
    let incarnation = info.as_ref().map(|i| i.incarnation);
    let body = html! {
        h1 { "Session " code data-testid="session-id" { (id) } }
        @match &info {
            None => p.muted data-testid="no-session" { "No session has this id (yet): nothing was appended to it, or it was deleted." },
            Some(info) => {
                dl.facts {
                    dt { "head" } dd data-testid="head" { (info.head) }
                    dt { "clear index" } dd { (info.clear_index) }
                    dt { "reclaimed through" } dd { (info.reclaimed_through) }
                    dt { "incarnation" } dd data-testid="incarnation" { (info.incarnation) }
                    @if let Some(origin) = &info.forked_from {
                        dt { "forked from" }
                        dd { a href={ (session_path(base, &origin.session_id)) "#event-" (origin.index) } { (origin.session_id) " #" (origin.index) } }
                    }
                }
            }
        }
        @if writes_note {
            p.muted { small { "Read-only: the actions below are refused unless the console was started with --allow-writes." } }
        }

        h2 { "Timeline" }
        div.pager {
            @if after > 0 {
                a href=(page_link(after.saturating_sub(limit as u64))) data-testid="older" { "« Older" }
            }
            @if !newest {
                a href=(page_link(last_shown)) data-testid="newer" { "Newer »" }
                a href=(path) { "Newest" }
            }
        }
        @if newest {
            div.timeline data-testid="timeline" hx-ext="sse" sse-connect=(live) sse-swap="event" sse-close="close" hx-swap="beforeend" {
                @for event in &events {
                    (event_row(base, event, hide, work.get(&event.index).map_or(&[][..], |v| v.as_slice()), limit))
                }
            }
            p.muted { small { "Live: new events appear at the end." } }
        } @else {
            div.timeline data-testid="timeline" {
                @for event in &events {
                    (event_row(base, event, hide, work.get(&event.index).map_or(&[][..], |v| v.as_slice()), limit))
                }
            }
        }
        @if events.is_empty() { p.muted { "No events on this page." } }

        h2 { "Cursors" }
        @if cursors.is_empty() {
            p.muted { "None." }
        } @else {
            table data-testid="cursors" {
                thead { tr {
                    th { "cursor" } th { "kind" } th.num { "position" } th.num { "head" } th { "state" }
                    th { "holder" } th.num { "attempt" } th { "lease / delay ends" } th.num { "failures" } th { "last error" } th {}
                } }
                tbody {
                    @for c in &cursors {
                        tr data-testid="cursor" {
                            td { code { (cursor_name(&c.consumer, c.lane.as_deref())) } }
                            td { (format!("{:?}", c.kind).to_lowercase()) }
                            td.num { (c.position) }
                            td.num { @if let Some(h) = c.head { a href={ (page_link(h.saturating_sub(1))) "#event-" (h) } { (h) } } @else { "—" } }
                            td { (head_state(c, now)) }
                            td { (c.dispatch.claim_holder.as_deref().unwrap_or("—")) }
                            td.num { (c.dispatch.attempt_count) }
                            td { (when(c.dispatch.claim_expires_at)) }
                            td.num { (c.dispatch.failure_count) }
                            td { (c.dispatch.last_error.as_deref().unwrap_or("")) }
                            td {
                                @if let (Some(h), 0) = (c.head, c.dispatch.attempt_count) {
                                    form.inline method="post" action={ (path) "/reschedule" } data-testid="reschedule" {
                                        (csrf_field(&ctx.csrf))
                                        input type="hidden" name="consumer" value=(c.consumer);
                                        @if let Some(lane) = &c.lane { input type="hidden" name="lane" value=(lane); }
                                        input type="hidden" name="index" value=(h);
                                        @if let Some(inc) = incarnation { input type="hidden" name="incarnation" value=(inc); }
                                        input type="text" name="at" placeholder="now, +10m, ms" size="8";
                                        button type="submit" { "Reschedule" }
                                        button type="submit" name="cancel" value="1" { "Cancel" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }

        h2 { "Dead letters" }
        (dead_table(&ctx, &dead, DeadBack::Session))

        h2 { "Pauses" }
        (pauses_table(&ctx, &pauses, Some(&id)))
        form.stack method="post" action={ (path) "/pause" } data-testid="pause-form" {
            (csrf_field(&ctx.csrf))
            label { "Consumer" input type="text" name="consumer" required list="consumers"; }
            datalist #consumers {
                @for name in cursor_consumers(&cursors) { option value=(name) {} }
            }
            label { "Until (optional: +1h, ms, YYYY-MM-DDTHH:MM)" input type="text" name="until"; }
            button type="submit" { "Pause in this session" }
        }

        h2 { "Presence" }
        @if presence.is_empty() {
            p.muted { "None." }
        } @else {
            table data-testid="presence" {
                thead { tr { th { "participant" } th { "field" } th { "value" } th.num { "seen" } th { "at" } th { "expires" } } }
                tbody {
                    @for row in &presence {
                        tr {
                            td { (row.participant) }
                            td { code { (row.field) } }
                            td { (payload(&row.value, hide)) }
                            td.num { (row.seen.map(|s| s.to_string()).unwrap_or_default()) }
                            td { (when(Some(row.at))) }
                            td { (when(Some(row.expires_at))) }
                        }
                    }
                }
            }
        }

        h2 { "Snapshot" }
        form.stack method="get" action=(path) data-testid="snapshot-form" {
            label { "Reducer" input type="text" name="reducer" value=(reducer.unwrap_or("")) required; }
            button type="submit" { "Look up" }
        }
        @if let (Some(reducer), Some(read)) = (reducer, &snapshot) {
            div data-testid="snapshot" {
                @match &read.snapshot {
                    Some(s) => {
                        p { "Reducer " code { (reducer) } " folded through index " (s.index) " (clear index " (read.clear_index) "):" }
                        (json_block(&s.state, hide))
                    }
                    None => p.muted { "No snapshot of reducer " code { (reducer) } " above the clear (index " (read.clear_index) ")." },
                }
            }
        }

        h2 { "Repair" }
        @if info.is_some() {
            form.stack method="post" action={ (path) "/fork" } data-testid="fork-form" {
                (csrf_field(&ctx.csrf))
                label { "Fork into (a new session id)" input type="text" name="into" required; }
                label { "Through index (default: the head)" input type="number" name="through" min="1" max=(head); }
                button type="submit" { "Fork" }
            }
            form.stack method="post" action={ (path) "/clear" } data-testid="clear-form" {
                (csrf_field(&ctx.csrf))
                input type="hidden" name="if_last_index" value=(head);
                @if let Some(inc) = incarnation { input type="hidden" name="incarnation" value=(inc); }
                button.danger type="submit" { "Clear (if nothing was appended since index " (head) ")" }
            }
            p { a href={ (path) "/delete" } data-testid="delete-link" { "Delete this session…" } }
        }
    };
    ok(&ctx, &format!("Session {}", shorten(&id)), body)
}

fn cursor_consumers(cursors: &[Cursor]) -> Vec<&str> {
    let mut names: Vec<&str> = cursors.iter().map(|c| c.consumer.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[derive(Clone, Copy)]
enum DeadBack {
    Session,
    DeadLetters,
}

fn dead_table(ctx: &Ctx, dead: &[Head], back: DeadBack) -> Markup {
    let hide = ctx.options().hide_payloads;
    html! {
        @if dead.is_empty() {
            p.muted data-testid="no-dead-letters" { "None." }
        } @else {
            table data-testid="dead-letters" {
                thead { tr {
                    th { "session" } th.num { "index" } th { "cursor" } th { "type" } th.num { "attempts" }
                    th.num { "failures" } th { "last error" } th { "dead since" } th { "payload" } th {}
                } }
                tbody {
                    @for h in dead {
                        tr data-testid="dead-letter" data-session=(h.event.session_id) data-index=(h.event.index) {
                            td { a href=(session_path(&ctx.base, &h.event.session_id)) { (h.event.session_id) } }
                            td.num { a href={ (session_path(&ctx.base, &h.event.session_id)) "?after=" (h.event.index.saturating_sub(1)) "#event-" (h.event.index) } { (h.event.index) } }
                            td { code { (cursor_name(&h.consumer, h.lane.as_deref())) } }
                            td { code { (h.event.event_type) } }
                            td.num { (h.dispatch.attempt_count) }
                            td.num { (h.dispatch.failure_count) }
                            td { (h.dispatch.last_error.as_deref().unwrap_or("")) }
                            td { (when(h.dispatch.failed_at)) }
                            td { (payload(h.event.payload.as_value(), hide)) }
                            td {
                                form.inline method="post" action={ (session_path(&ctx.base, &h.event.session_id)) "/redrive" } data-testid="redrive-form" {
                                    (csrf_field(&ctx.csrf))
                                    input type="hidden" name="consumer" value=(h.consumer);
                                    @if let Some(lane) = &h.lane { input type="hidden" name="lane" value=(lane); }
                                    input type="hidden" name="index" value=(h.event.index);
                                    input type="hidden" name="incarnation" value=(h.incarnation);
                                    @if let DeadBack::DeadLetters = back { input type="hidden" name="back" value="dead-letters"; }
                                    button type="submit" name="action" value="retry" data-testid="redrive-retry" { "Retry" }
                                    button type="submit" name="action" value="skip" data-testid="redrive-skip" { "Skip" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- dead letters

/// The dead letters of each session of `ids`, a few calls at a time.
async fn dead_letters_of(ctx: &Ctx, ids: &[&str]) -> Vec<Result<Vec<Head>, StoreError>> {
    let calls = ids.iter().map(|id| {
        let store = ctx.state.store.clone();
        let id = (*id).to_owned();
        async move { store.dead_letters(&id).await }
    });
    futures::stream::iter(calls.collect::<Vec<_>>())
        .buffered(CONCURRENCY)
        .collect()
        .await
}

/// `GET /dead-letters`: dead letters of one consumer across a page of sessions.
pub(crate) async fn dead_letters(ctx: Ctx) -> Page {
    let q = &ctx.query;
    let limit = q.limit(PAGE, MAX_PAGE).map_err(|e| ctx.bad(e))?;
    let consumer = q
        .get("consumer")
        .map(str::to_owned)
        .or_else(|| ctx.options().consumers.first().cloned());
    let lane = q.get("lane");
    let since = match q.get("since") {
        Some(text) => Some(parse_time(text, now_ms()).map_err(|e| ctx.bad(e))?),
        None => None,
    };
    let after = q.get("after");
    let base = &ctx.base;
    let filter = html! {
        form.stack method="get" action={ (base) "/dead-letters" } data-testid="dead-letters-filter" {
            label { "Consumer" input type="text" name="consumer" value=(consumer.as_deref().unwrap_or("")) required; }
            label { "Lane" input type="text" name="lane" value=(lane.unwrap_or("")); }
            label { "Dead since (-1h, ms, YYYY-MM-DDTHH:MM)" input type="text" name="since" value=(q.get("since").unwrap_or("")); }
            button type="submit" { "Filter" }
        }
    };
    let Some(consumer) = consumer else {
        let body = html! {
            h1 { "Dead letters" }
            (filter)
            p.muted { "Name a consumer: dead letters are listed through the sessions with work for it." }
        };
        return ok(&ctx, "Dead letters", body);
    };
    let mut listing = ListWork::new([consumer.as_str()]).with_limit(limit);
    if let Some(after) = after {
        listing = listing.with_after(after);
    }
    let page = ctx
        .store()
        .list_work(listing)
        .await
        .map_err(|e| ctx.store_error(e))?;
    let with_dead: Vec<&str> = page
        .iter()
        .filter(|w| w.dead_lettered > 0)
        .map(|w| w.session_id.as_str())
        .collect();
    let lists = dead_letters_of(&ctx, &with_dead).await;
    let mut dead = Vec::new();
    for list in lists {
        let list = list.map_err(|e| ctx.store_error(e))?;
        dead.extend(list.into_iter().filter(|h| {
            h.consumer == consumer
                && lane.is_none_or(|l| h.lane.as_deref() == Some(l))
                && since.is_none_or(|s| h.dispatch.failed_at.is_some_and(|at| at >= s))
        }));
    }
    let next = match page.last() {
        Some(last) if page.len() >= limit => Some(last.session_id.clone()),
        _ => None,
    };
    let since_text = q.get("since").unwrap_or("");
    let here = |after: &str| {
        url(
            base,
            "/dead-letters",
            &[
                ("consumer", &consumer),
                ("lane", lane.unwrap_or("")),
                ("since", since_text),
                ("after", after),
                ("limit", &limit.to_string()),
            ],
        )
    };
    let body = html! {
        h1 { "Dead letters of " code { (consumer) } }
        (filter)
        p.muted { small { "From the next " (limit) " sessions with work for the consumer (" (with_dead.len()) " with dead letters)." } }
        (dead_table(&ctx, &dead, DeadBack::DeadLetters))
        div.pager {
            @if after.is_some() { a href=(here("")) data-testid="first-page" { "« First page" } }
            @if let Some(next) = &next { a href=(here(next)) data-testid="next-page" rel="next" { "Next page »" } }
        }
        p {
            a href=(url(base, "/redrive-all", &[("consumer", &consumer), ("lane", lane.unwrap_or("")), ("since", since_text), ("action", "retry")])) data-testid="redrive-all-link" {
                "Redrive all matching dead letters…"
            }
        }
    };
    ok(&ctx, "Dead letters", body)
}

// ---------------------------------------------------------------- bulk redrive preview

/// What a bulk redrive would change, read with bounded calls.
pub(crate) struct Preview {
    pub heads: Vec<Head>,
    pub sessions: usize,
    pub capped: bool,
}

pub(crate) async fn preview(
    ctx: &Ctx,
    consumer: &str,
    lane: Option<&str>,
    since: Option<i64>,
) -> Result<Preview, Failure> {
    let store = ctx.store();
    let mut heads = Vec::new();
    let mut sessions = 0;
    let mut examined = 0;
    let mut capped = false;
    let mut after: Option<String> = None;
    for page_number in 0..PREVIEW_PAGES {
        let mut listing = ListWork::new([consumer]).with_limit(MAX_WORK_LIMIT);
        if let Some(after) = &after {
            listing = listing.with_after(after.clone());
        }
        let page = store
            .list_work(listing)
            .await
            .map_err(|e| ctx.store_error(e))?;
        let mut ids: Vec<&str> = page
            .iter()
            .filter(|w| w.dead_lettered > 0)
            .map(|w| w.session_id.as_str())
            .collect();
        if examined + ids.len() > PREVIEW_SESSIONS {
            ids.truncate(PREVIEW_SESSIONS - examined);
            capped = true;
        }
        examined += ids.len();
        let lists = dead_letters_of(ctx, &ids).await;
        for list in lists {
            let list = list.map_err(|e| ctx.store_error(e))?;
            let matching: Vec<Head> = list
                .into_iter()
                .filter(|h| {
                    h.consumer == consumer
                        && lane.is_none_or(|l| h.lane.as_deref() == Some(l))
                        && since.is_none_or(|s| h.dispatch.failed_at.is_some_and(|at| at >= s))
                })
                .collect();
            if !matching.is_empty() {
                sessions += 1;
                heads.extend(matching);
            }
        }
        if capped {
            break;
        }
        if page.len() < MAX_WORK_LIMIT {
            break;
        }
        if page_number + 1 == PREVIEW_PAGES {
            capped = true;
            break;
        }
        after = page.last().map(|w| w.session_id.clone());
    }
    Ok(Preview {
        heads,
        sessions,
        capped,
    })
}

pub(crate) fn parse_action(text: Option<&str>) -> Result<RedriveAction, String> {
    match text {
        None => Err("the field 'action' is required: retry or skip".to_owned()),
        Some(text) => text
            .parse::<RedriveAction>()
            .map_err(|_| format!("unknown action '{}': use retry or skip", shorten(text))),
    }
}

/// `GET /redrive-all`: how many heads in how many sessions a bulk redrive
/// will change, and the form that runs it.
pub(crate) async fn redrive_preview(ctx: Ctx) -> Page {
    let q = &ctx.query;
    let consumer = q.required("consumer").map_err(|e| ctx.bad(e))?.to_owned();
    let action = parse_action(Some(q.get("action").unwrap_or("retry"))).map_err(|e| ctx.bad(e))?;
    let lane = q.get("lane");
    // Resolved once, so the run redrives what the preview counted.
    let since = match q.get("since") {
        Some(text) => Some(parse_time(text, now_ms()).map_err(|e| ctx.bad(e))?),
        None => None,
    };
    let found = preview(&ctx, &consumer, lane, since).await?;
    let verb = match action {
        RedriveAction::Retry => "retried (claimable again)",
        RedriveAction::Skip => "skipped (their cursors move past them)",
    };
    let action_name = match action {
        RedriveAction::Retry => "retry",
        RedriveAction::Skip => "skip",
    };
    let base = &ctx.base;
    let body = html! {
        h1 { "Redrive all dead letters of " code { (consumer) } }
        p.preview data-testid="redrive-preview" {
            @if found.capped { "At least " }
            (found.heads.len()) " heads in " (found.sessions) " sessions"
            " will be " (verb) "."
        }
        @if found.capped {
            p.muted { "Counted on the first " (PREVIEW_SESSIONS) " sessions with dead letters (or " (PREVIEW_PAGES * MAX_WORK_LIMIT) " sessions with work): more may match, and the run redrives every match." }
        }
        p.muted { small {
            "Filter: consumer " code { (consumer) }
            @if let Some(lane) = lane { ", lane " code { (lane) } }
            @if let Some(since) = since { ", dead since " (render::time(since)) }
            ". A head that dies or is redriven between this preview and the run changes the count."
        } }
        form.stack method="post" action={ (base) "/redrive-all" } {
            (csrf_field(&ctx.csrf))
            input type="hidden" name="consumer" value=(consumer);
            @if let Some(lane) = lane { input type="hidden" name="lane" value=(lane); }
            @if let Some(since) = since { input type="hidden" name="since" value=(since); }
            input type="hidden" name="action" value=(action_name);
            button.primary type="submit" data-testid="redrive-confirm" { "Redrive " (found.heads.len()) @if found.capped { "+" } " heads (" (action_name) ")" }
        }
        p { a href=(url(base, "/redrive-all", &[("consumer", &consumer), ("lane", lane.unwrap_or("")), ("since", q.get("since").unwrap_or("")), ("action", if action_name == "retry" { "skip" } else { "retry" })])) {
            "Preview " (if action_name == "retry" { "skip" } else { "retry" }) " instead"
        } }
        h2 { "The first heads" }
        (dead_table(&ctx, &found.heads[..found.heads.len().min(20)], DeadBack::DeadLetters))
    };
    ok(&ctx, "Redrive all", body)
}

// ---------------------------------------------------------------- delete confirm

/// `GET /sessions/{id}/delete`: what a delete will remove, and the form.
pub(crate) async fn delete_confirm(ctx: Ctx, SessionId(id): SessionId) -> Page {
    let info = find_session(&ctx, &id).await?;
    let path = session_path(&ctx.base, &id);
    let Some(info) = info else {
        let body = html! {
            h1 { "Delete " code { (id) } }
            p.muted data-testid="no-session" { "No session has this id: nothing to delete." }
        };
        return ok(&ctx, "Delete", body);
    };
    let store = ctx.store();
    let fail = |e| ctx.store_error(e);
    let cursors = store.cursors(&id).await.map_err(fail)?;
    let dead = store.dead_letters(&id).await.map_err(fail)?;
    let presence = store.read_presence(&id).await.map_err(fail)?;
    let pauses = store.pauses(Some(&id)).await.map_err(fail)?;
    let now = now_ms();
    let busy: Vec<(&Cursor, a2_store_api::retention::HeadWork)> = cursors
        .iter()
        .filter_map(|c| a2_store_api::retention::work_left(c, now).map(|w| (c, w)))
        .collect();
    let events = info.head.saturating_sub(info.reclaimed_through);
    let session_pauses = pauses.iter().filter(|p| p.session_id.is_some()).count();
    let body = html! {
        h1 { "Delete " code { (id) } "?" }
        p { "Deleting removes every row of this session in one step; its open live views end. Forks keep their copy. The id can be used again, by a new incarnation." }
        ul data-testid="delete-summary" {
            li { (events) " events (head " (info.head) ", incarnation " (info.incarnation) ")" }
            li { (cursors.len()) " cursors and their records" }
            li { (dead.len()) " dead letters" }
            li { (presence.len()) " presence fields" }
            li { (session_pauses) " pauses of this session" }
            li { "its snapshots and pins" }
        }
        @if !busy.is_empty() {
            h2 { "Heads with work" }
            p { "These heads still have work: the delete is refused unless forced, and a forced delete ends them." }
            ul data-testid="delete-busy" {
                @for (c, w) in &busy {
                    li {
                        code { (cursor_name(&c.consumer, c.lane.as_deref())) }
                        " at #" (c.head.unwrap_or(0)) ": "
                        @match w {
                            a2_store_api::retention::HeadWork::Leased { holder, until } => { "leased by " (holder) " until " (when(Some(*until))) }
                            a2_store_api::retention::HeadWork::Retrying { until } => { "waiting for a retry until " (when(Some(*until))) }
                            _ => { "waiting to be claimed" }
                        }
                    }
                }
            }
        }
        form.stack method="post" action={ (path) "/delete" } data-testid="delete-form" {
            (csrf_field(&ctx.csrf))
            input type="hidden" name="if_last_index" value=(info.head);
            @if !busy.is_empty() {
                label { "End the heads with work" input type="checkbox" name="force" value="1"; }
            }
            button.danger type="submit" data-testid="delete-confirm" { "Delete (if nothing was appended since index " (info.head) ")" }
        }
        p { a href=(path) { "Cancel" } }
    };
    ok(&ctx, "Delete", body)
}

// ---------------------------------------------------------------- health

/// `GET /health`: the health source's report.
pub(crate) async fn health(ctx: Ctx) -> Page {
    let Some(source) = ctx.options().health.clone() else {
        let body = html! {
            h1 { "Health" }
            p.muted data-testid="no-health" { "No health source configured (PostgreSQL stores provide one)." }
        };
        return ok(&ctx, "Health", body);
    };
    match source().await {
        Ok(report) => {
            let body = html! {
                h1 { "Health" }
                div data-testid="health" { (value_table(&report)) }
                p.muted { small { "As of " (render::time(now_ms())) "." } }
            };
            ok(&ctx, "Health", body)
        }
        Err(message) => Err(ctx.fail(
            StatusCode::SERVICE_UNAVAILABLE,
            "Health unavailable",
            message,
        )),
    }
}

fn scalar(key: &str, value: &serde_json::Value) -> Markup {
    use serde_json::Value;
    html! {
        @match value {
            Value::Null => span.none { "—" },
            Value::String(s) => (s),
            Value::Number(n) => {
                (n.to_string())
                @if key.ends_with("_bytes") || key == "bytes" {
                    @if let Some(b) = n.as_u64() { " " small { "(" (render::bytes(b)) ")" } }
                }
            },
            Value::Bool(b) => (if *b { "yes" } else { "no" }),
            other => code { (other.to_string()) },
        }
    }
}

/// A JSON report as tables.
fn value_table(value: &serde_json::Value) -> Markup {
    use serde_json::Value;
    match value {
        Value::Object(map) => html! {
            table.report {
                tbody {
                    @for (key, v) in map {
                        tr {
                            th { (key) }
                            td { (value_table_or_scalar(key, v)) }
                        }
                    }
                }
            }
        },
        Value::Array(items) if items.iter().all(Value::is_object) && !items.is_empty() => {
            let mut columns: Vec<&str> = Vec::new();
            for item in items {
                if let Value::Object(map) = item {
                    for key in map.keys() {
                        if !columns.contains(&key.as_str()) {
                            columns.push(key);
                        }
                    }
                }
            }
            html! {
                table.report {
                    thead { tr { @for c in &columns { th { (c) } } } }
                    tbody {
                        @for item in items {
                            tr {
                                @for c in &columns {
                                    td { (value_table_or_scalar(c, item.get(*c).unwrap_or(&Value::Null))) }
                                }
                            }
                        }
                    }
                }
            }
        }
        other => scalar("", other),
    }
}

fn value_table_or_scalar(key: &str, value: &serde_json::Value) -> Markup {
    match value {
        serde_json::Value::Object(_) | serde_json::Value::Array(_) => value_table(value),
        other => scalar(key, other),
    }
}

// ---------------------------------------------------------------- not found

/// Any other path: a 404 page.
pub(crate) async fn not_found(ctx: Ctx) -> Failure {
    ctx.fail(
        StatusCode::NOT_FOUND,
        "Not found",
        "The console has no page here.",
    )
}

#[cfg(test)]
mod tests {
    use super::below;

    #[test]
    fn below_sorts_just_under_the_prefix() {
        for prefix in ["a", "chat-", "z\u{E000}", "ab\0"] {
            let low = below(prefix).unwrap();
            assert!(low.as_str() < prefix, "{prefix:?}");
        }
        assert_eq!(below(""), None);
    }
}
