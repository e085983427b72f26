//! `a2-store inspect`: sessions, a log, cursors, dead letters and presence
//! as tables or JSON, and the work, dead letters and blocked lanes of the
//! whole store.

use std::cmp::Ordering;

use a2_store::{
    Cause, Clock, CursorKind, Head, ListSessions, ReadOptions, SessionWork, Store, SystemClock,
};
use serde_json::json;

use crate::across::{self, Blocking, Bounds, Consumers, Filter};
use crate::args::{InspectArgs, InspectCommand};
use crate::failure::Failure;
use crate::output::{
    age, eprint_line, escape, payload_cell, print, print_json, timestamp, JSON_VERSION,
};
use crate::table::{or_dash, Table};
use crate::target;

/// Sessions in a page of the store-wide dead letters when no --limit is given.
const DEFAULT_PAGE: usize = 100;

/// Widest payload or error shown in a table cell; `--json` shows everything.
const CELL_MAX: usize = 60;

/// Runs `inspect`.
pub async fn run(args: &InspectArgs) -> Result<(), Failure> {
    if let InspectCommand::Health = args.what {
        return crate::health::run(&args.url, args.json).await;
    }
    let store = target::open_read_only_with(&args.url, &args.payloads).await?;
    let store = store.as_ref();
    let url = args.url.as_str();
    match &args.what {
        InspectCommand::Sessions { after, limit } => {
            sessions(store, url, args.json, after.clone(), *limit).await
        }
        InspectCommand::Log {
            session,
            after,
            limit,
        } => log(store, url, args.json, session, *after, *limit).await,
        InspectCommand::Cursors { session } => cursors(store, url, args.json, session).await,
        InspectCommand::DeadLetters {
            session: Some(session),
            ..
        } => dead_letters(store, url, args.json, session).await,
        InspectCommand::DeadLetters {
            session: None,
            consumers,
            after,
            limit,
        } => {
            let page = Page {
                consumers,
                after: after.clone(),
                limit: *limit,
            };
            stuck(store, url, args.json, &page, View::DeadLetters).await
        }
        InspectCommand::Blocked {
            consumers,
            after,
            limit,
        } => {
            let page = Page {
                consumers,
                after: after.clone(),
                limit: *limit,
            };
            stuck(store, url, args.json, &page, View::Blocked).await
        }
        InspectCommand::Presence { session } => presence(store, url, args.json, session).await,
        InspectCommand::Paused => paused(store, url, args.json).await,
        InspectCommand::Health => crate::health::run(url, args.json).await,
        InspectCommand::Work { consumers, limit } => {
            work(store, url, args.json, consumers, *limit).await
        }
    }
}

/// The work of each consumer in each session, longest waiting first.
async fn work(
    store: &dyn Store,
    url: &str,
    json: bool,
    given: &[String],
    limit: Option<usize>,
) -> Result<(), Failure> {
    let consumers = across::consumers(store, url, given).await?;
    note(&consumers);
    let mut rows: Vec<(String, SessionWork)> = Vec::new();
    for consumer in &consumers.names {
        let work = across::work_of(store, url, consumer).await?;
        rows.extend(work.into_iter().map(|w| (consumer.clone(), w)));
    }
    let now = SystemClock.now_ms();
    rows.sort_by(|a, b| waiting_order(&a.1, &b.1).then_with(|| a.0.cmp(&b.0)));
    let total = rows.len();
    if let Some(limit) = limit {
        rows.truncate(limit);
    }
    if json {
        let shown: Vec<_> = rows
            .iter()
            .map(|(consumer, w)| {
                json!({
                    "session_id": w.session_id,
                    "consumer": consumer,
                    "claimable": w.claimable,
                    "busy": w.busy,
                    "dead_lettered": w.dead_lettered,
                    "ready_since": w.ready_since,
                    "next_expiry": w.next_expiry,
                })
            })
            .collect();
        return print_json(&json!({
            "version": JSON_VERSION,
            "view": "work",
            "now": now,
            "consumers": consumers.names,
            "consumers_found_by_scan": consumers.scanned.is_some(),
            "total": total,
            "rows": shown,
        }));
    }
    let mut table = Table::new([
        "session",
        "consumer",
        "claimable",
        "busy",
        "dead",
        "ready since",
        "waited",
        "next expiry",
    ])
    .right_align([2, 3, 4, 6]);
    for (consumer, w) in &rows {
        table.row([
            w.session_id.clone(),
            consumer.clone(),
            w.claimable.to_string(),
            w.busy.to_string(),
            w.dead_lettered.to_string(),
            or_dash(w.ready_since.map(timestamp)),
            or_dash(w.ready_since.map(|t| age(now - t))),
            or_dash(w.next_expiry.map(timestamp)),
        ]);
    }
    print_table(
        &table,
        "no work: no session has claimable, busy or dead-lettered heads of these consumers",
    )?;
    if rows.len() < total {
        print(&format!(
            "({} more row(s) not shown: raise --limit)\n",
            total - rows.len()
        ))?;
    }
    Ok(())
}

/// The order of the `work` view: claimable work by how long it has waited,
/// then busy work by its next expiry, then dead letters only; each by
/// session id.
fn waiting_order(a: &SessionWork, b: &SessionWork) -> Ordering {
    fn key(w: &SessionWork) -> (u8, i64) {
        match (w.ready_since, w.next_expiry) {
            (Some(ready), _) => (0, ready),
            (None, Some(expiry)) => (1, expiry),
            (None, None) => (2, 0),
        }
    }
    key(a)
        .cmp(&key(b))
        .then_with(|| a.session_id.cmp(&b.session_id))
}

fn note(consumers: &Consumers) {
    if let Some(note) = consumers.note() {
        eprint_line(&note);
    }
}

/// Which page of the store-wide dead letters to show.
struct Page<'a> {
    consumers: &'a [String],
    after: Option<String>,
    limit: Option<usize>,
}

/// The two store-wide views of dead letters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    /// Every dead letter.
    DeadLetters,
    /// Dead letters of lane and log cursors: lanes they hold.
    Blocked,
}

/// A page of the dead letters of the whole store, with what each holds up.
async fn stuck(
    store: &dyn Store,
    url: &str,
    json: bool,
    page: &Page<'_>,
    view: View,
) -> Result<(), Failure> {
    let filter = Filter {
        consumers: page.consumers,
        lanes_only: view == View::Blocked,
        ..Filter::default()
    };
    let limit = page.limit.unwrap_or(DEFAULT_PAGE);
    let bounds = Bounds {
        after: page.after.clone(),
        sessions: Some(limit),
        heads: None,
    };
    let found = across::dead_letters(store, url, &filter, &bounds).await?;
    let mut items: Vec<Blocking> = Vec::new();
    for session in &found.sessions {
        items.extend(across::blocking(store, url, session).await?);
    }
    let name = match view {
        View::DeadLetters => "dead-letters",
        View::Blocked => "blocked",
    };
    if json {
        let mut names = page.consumers.to_vec();
        names.sort();
        names.dedup();
        return print_json(&json!({
            "version": JSON_VERSION,
            "view": name,
            "consumers": (!names.is_empty()).then_some(names),
            "after": page.after,
            "limit": limit,
            "sessions": found.sessions.len(),
            "dead_letters": items,
            "next_after": found.next_after,
        }));
    }
    let table = match view {
        View::DeadLetters => {
            let mut table = Table::new([
                "session",
                "index",
                "consumer",
                "lane",
                "kind",
                "type",
                "failures",
                "dead-lettered",
                "behind",
                "last error",
            ])
            .right_align([1, 6, 8]);
            for item in &items {
                let h = &item.head;
                table.row([
                    item.session_id.clone(),
                    h.event.index.to_string(),
                    h.consumer.clone(),
                    or_dash(h.lane.as_deref()),
                    item.kind.map_or("?", kind).to_owned(),
                    h.event.event_type.clone(),
                    h.dispatch.failure_count.to_string(),
                    or_dash(h.dispatch.failed_at.map(timestamp)),
                    waiting(item),
                    or_dash(h.dispatch.last_error.as_deref().map(|e| cut(e, CELL_MAX))),
                ]);
            }
            table
        }
        View::Blocked => {
            let mut table = Table::new([
                "session",
                "consumer",
                "lane",
                "kind",
                "head",
                "dead-lettered",
                "behind",
                "last error",
            ])
            .right_align([4, 6]);
            for item in &items {
                let h = &item.head;
                table.row([
                    item.session_id.clone(),
                    h.consumer.clone(),
                    or_dash(h.lane.as_deref()),
                    item.kind.map_or("?", kind).to_owned(),
                    h.event.index.to_string(),
                    or_dash(h.dispatch.failed_at.map(timestamp)),
                    waiting(item),
                    or_dash(h.dispatch.last_error.as_deref().map(|e| cut(e, CELL_MAX))),
                ]);
            }
            table
        }
    };
    let empty = match (view, page.after.is_some()) {
        (View::DeadLetters, false) => "no dead letters in the store",
        (View::DeadLetters, true) => "no more dead letters",
        (View::Blocked, false) => "no lane is held by a dead letter",
        (View::Blocked, true) => "no more lanes held by a dead letter",
    };
    print_table(&table, empty)?;
    if let Some(next) = &found.next_after {
        print(&format!(
            "(more sessions follow: continue with --after '{}')\n",
            escape(next)
        ))?;
    }
    Ok(())
}

/// The `behind` cell: events waiting behind a head on its lane (`<=N` when only a
/// bound is known, `-` for an event cursor, `?` for a cursor gone meanwhile).
fn waiting(item: &Blocking) -> String {
    match (item.kind, item.waiting_behind, item.later_events) {
        (Some(CursorKind::Event), _, _) => "-".to_owned(),
        (_, Some(n), _) => n.to_string(),
        (_, None, Some(bound)) => format!("<={bound}"),
        (_, None, None) => "?".to_owned(),
    }
}

async fn sessions(
    store: &dyn Store,
    url: &str,
    json: bool,
    after: Option<String>,
    limit: Option<usize>,
) -> Result<(), Failure> {
    let sessions = store
        .sessions(ListSessions { after, limit })
        .await
        .map_err(|e| Failure::store(url, "listing sessions", &e))?;
    if json {
        return print_json(&sessions);
    }
    let mut table = Table::new([
        "session",
        "head",
        "cleared at",
        "reclaimed through",
        "forked from",
    ])
    .right_align([1, 2, 3]);
    for s in &sessions {
        table.row([
            s.session_id.clone(),
            s.head.to_string(),
            s.clear_index.to_string(),
            s.reclaimed_through.to_string(),
            or_dash(
                s.forked_from.as_ref().map(|origin| {
                    format!("{} through {}", escape(&origin.session_id), origin.index)
                }),
            ),
        ]);
    }
    print_table(&table, "no sessions")
}

/// The pauses in force across the store.
async fn paused(store: &dyn Store, url: &str, json: bool) -> Result<(), Failure> {
    let pauses = store
        .pauses(None)
        .await
        .map_err(|e| Failure::store(url, "listing the pauses", &e))?;
    if json {
        return print_json(&json!({ "version": JSON_VERSION, "pauses": pauses }));
    }
    let mut table = Table::new(["consumer", "session", "until", "paused at"]);
    for p in &pauses {
        table.row([
            escape(&p.consumer),
            p.session_id
                .as_deref()
                .map_or_else(|| "*".to_owned(), escape),
            p.until_ms.map_or_else(|| "resumed".to_owned(), timestamp),
            timestamp(p.paused_at),
        ]);
    }
    print_table(&table, "no consumer is paused")
}

async fn log(
    store: &dyn Store,
    url: &str,
    json: bool,
    session: &str,
    after: Option<u64>,
    limit: Option<usize>,
) -> Result<(), Failure> {
    let shown = escape(session);
    let rows = store
        .read(
            session,
            ReadOptions {
                after,
                through: None,
                limit,
            },
        )
        .await
        .map_err(|e| Failure::store(url, &format!("reading the log of session '{shown}'"), &e))?;
    if json {
        return print_json(&rows);
    }
    let mut table =
        Table::new(["index", "type", "id", "created", "cause", "payload"]).right_align([0]);
    for row in &rows {
        table.row([
            row.index.to_string(),
            row.event_type.clone(),
            row.id.clone(),
            timestamp(row.created_at),
            row.cause.as_ref().map_or_else(|| "-".to_owned(), cause),
            payload_cell(&row.payload, CELL_MAX),
        ]);
    }
    print_table(&table, &format!("no events in session '{shown}'"))
}

async fn cursors(store: &dyn Store, url: &str, json: bool, session: &str) -> Result<(), Failure> {
    let shown = escape(session);
    let cursors = store.cursors(session).await.map_err(|e| {
        Failure::store(
            url,
            &format!("listing the cursors of session '{shown}'"),
            &e,
        )
    })?;
    if json {
        return print_json(&cursors);
    }
    let mut table = Table::new([
        "consumer",
        "lane",
        "kind",
        "position",
        "head",
        "attempts",
        "failures",
        "holder",
        "expires",
        "dead-lettered",
        "paused",
        "last error",
    ])
    .right_align([3, 4, 5, 6]);
    for c in &cursors {
        let d = &c.dispatch;
        let paused = c.pause.as_ref().map(|p| {
            let scope = if p.session_id.is_some() {
                "here"
            } else {
                "everywhere"
            };
            match p.until_ms {
                Some(at) => format!("{scope} until {}", timestamp(at)),
                None => format!("{scope} until resumed"),
            }
        });
        table.row([
            c.consumer.clone(),
            or_dash(c.lane.as_deref()),
            kind(c.kind).to_owned(),
            c.position.to_string(),
            or_dash(c.head),
            d.attempt_count.to_string(),
            d.failure_count.to_string(),
            or_dash(d.claim_holder.as_deref()),
            or_dash(d.claim_expires_at.map(timestamp)),
            or_dash(d.failed_at.map(timestamp)),
            or_dash(paused),
            or_dash(d.last_error.as_deref().map(|e| cut(e, CELL_MAX))),
        ]);
    }
    print_table(&table, &format!("no cursors in session '{shown}'"))
}

async fn dead_letters(
    store: &dyn Store,
    url: &str,
    json: bool,
    session: &str,
) -> Result<(), Failure> {
    let shown = escape(session);
    let heads = store.dead_letters(session).await.map_err(|e| {
        Failure::store(
            url,
            &format!("listing the dead letters of session '{shown}'"),
            &e,
        )
    })?;
    if json {
        return print_json(&heads);
    }
    let mut table = Table::new([
        "index",
        "consumer",
        "lane",
        "type",
        "attempts",
        "failures",
        "dead-lettered",
        "last error",
    ])
    .right_align([0, 4, 5]);
    for head in &heads {
        table.row(dead_letter_row(head));
    }
    print_table(&table, &format!("no dead letters in session '{shown}'"))
}

fn dead_letter_row(head: &Head) -> [String; 8] {
    let d = &head.dispatch;
    [
        head.event.index.to_string(),
        head.consumer.clone(),
        or_dash(head.lane.as_deref()),
        head.event.event_type.clone(),
        d.attempt_count.to_string(),
        d.failure_count.to_string(),
        or_dash(d.failed_at.map(timestamp)),
        or_dash(d.last_error.as_deref().map(|e| cut(e, CELL_MAX))),
    ]
}

async fn presence(store: &dyn Store, url: &str, json: bool, session: &str) -> Result<(), Failure> {
    let shown = escape(session);
    let rows = store.read_presence(session).await.map_err(|e| {
        Failure::store(
            url,
            &format!("reading the presence of session '{shown}'"),
            &e,
        )
    })?;
    if json {
        return print_json(&rows);
    }
    let mut table =
        Table::new(["participant", "field", "value", "seen", "at", "expires"]).right_align([3]);
    for row in &rows {
        table.row([
            row.participant.clone(),
            row.field.clone(),
            payload_cell(&row.value, CELL_MAX),
            or_dash(row.seen),
            timestamp(row.at),
            timestamp(row.expires_at),
        ]);
    }
    print_table(&table, &format!("no live presence in session '{shown}'"))
}

fn print_table(table: &Table, empty: &str) -> Result<(), Failure> {
    if table.is_empty() {
        print(&format!("({empty})\n"))
    } else {
        print(&table.render())
    }
}

fn kind(kind: CursorKind) -> &'static str {
    match kind {
        CursorKind::Event => "event",
        CursorKind::Lane => "lane",
        CursorKind::Log => "log",
    }
}

/// A cause as `consumer/lane@index#attempt` (`-` for no lane).
fn cause(cause: &Cause) -> String {
    format!(
        "{}/{}@{}#{}",
        cause.consumer,
        cause.lane.as_deref().unwrap_or("-"),
        cause.index,
        cause.attempt
    )
}

/// `text` on one line, cut to `max` characters with `…`.
pub fn cut(text: &str, max: usize) -> String {
    let flat: Vec<&str> = text.split_whitespace().collect();
    let flat = flat.join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_and_errors_fit_a_cell() {
        let c = Cause {
            consumer: "agent".into(),
            lane: Some("L1".into()),
            index: 4,
            attempt: 2,
        };
        assert_eq!(cause(&c), "agent/L1@4#2");
        assert_eq!(cut("boom\nat line 3", 80), "boom at line 3");
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}
