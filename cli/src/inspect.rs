//! `a2-store inspect`: sessions, a log, cursors, dead letters and presence as tables or JSON.

use a2_store::{Cause, CursorKind, Head, ListSessions, ReadOptions, Store};

use crate::args::{InspectArgs, InspectCommand};
use crate::failure::Failure;
use crate::output::{compact_json, escape, print, print_json, timestamp};
use crate::table::{or_dash, Table};
use crate::target;

/// Widest payload or error shown in a table cell; `--json` shows everything.
const CELL_MAX: usize = 60;

/// Runs `inspect`.
pub async fn run(args: &InspectArgs) -> Result<(), Failure> {
    let store = target::open_read_only(&args.url).await?;
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
        InspectCommand::DeadLetters { session } => {
            dead_letters(store, url, args.json, session).await
        }
        InspectCommand::Presence { session } => presence(store, url, args.json, session).await,
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
    let mut table =
        Table::new(["session", "head", "cleared at", "reclaimed through"]).right_align([1, 2, 3]);
    for s in &sessions {
        table.row([
            s.session_id.clone(),
            s.head.to_string(),
            s.clear_index.to_string(),
            s.reclaimed_through.to_string(),
        ]);
    }
    print_table(&table, "no sessions")
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
            compact_json(&row.payload, CELL_MAX),
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
        "last error",
    ])
    .right_align([3, 4, 5, 6]);
    for c in &cursors {
        let d = &c.dispatch;
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
            compact_json(&row.value, CELL_MAX),
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

fn cut(text: &str, max: usize) -> String {
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
