//! `a2-store redrive --all`: every dead letter the filters keep, listed
//! first and redriven only with `--yes`.
//!
//! The preview reads the dead letters session by session. With `--yes`
//! the store's one bulk operation, `redrive_all`, does the work: each call
//! redrives a page of matching heads atomically and says whether more
//! match, so the command pages until none are left (or `--limit` is
//! reached). A filter naming several consumers or sessions makes one such
//! series per `(consumer, session)` pair, since the operation takes one of
//! each.

use a2_store::{
    BulkRedrive, Clock, Head, RedriveAction, RedrivenHead, Store, SystemClock, MAX_WORK_LIMIT,
};
use serde::Serialize;
use serde_json::json;

use crate::across::{self, Bounds, Filter};
use crate::args::RedriveArgs;
use crate::failure::Failure;
use crate::output::{escape, print, print_json, timestamp, JSON_VERSION};
use crate::table::{or_dash, Table};
use crate::target;

/// The most heads one `redrive_all` call is asked for.
const PAGE: usize = 100;

/// What became of one redriven dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    /// Retried: claimable again.
    Retried,
    /// Skipped: its cursor moved past it.
    Skipped,
}

impl Outcome {
    fn of(action: RedriveAction) -> Self {
        match action {
            RedriveAction::Retry => Self::Retried,
            RedriveAction::Skip => Self::Skipped,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Self::Retried => "retried",
            Self::Skipped => "skipped",
        }
    }
}

/// A listed dead letter (preview) or a redriven one (applied).
enum Item {
    /// Listed by the preview, unchanged.
    Listed { session_id: String, head: Box<Head> },
    /// Redriven by `redrive_all`.
    Redriven(RedrivenHead),
}

impl Item {
    fn session_id(&self) -> &str {
        match self {
            Self::Listed { session_id, .. } => session_id,
            Self::Redriven(head) => &head.session_id,
        }
    }
}

/// Runs `redrive --all`.
pub async fn redrive_all(args: &RedriveArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let action = crate::repair::action(args);
    let dead_before = args.older_than.map(|age| {
        SystemClock
            .now_ms()
            .saturating_sub(a2_store::duration_ms(age))
    });
    let context = Context {
        args,
        action,
        dead_before,
    };
    if args.yes {
        return apply(&context).await;
    }
    // Listing writes nothing: the store is opened read-only.
    let store = target::open_read_only(url).await?;
    let filter = Filter {
        consumers: &args.consumers,
        sessions: &args.sessions,
        dead_before,
        lanes_only: false,
        lane: args.lane.as_deref(),
    };
    let bounds = Bounds {
        after: None,
        sessions: None,
        heads: args.limit,
    };
    let page = across::dead_letters(store.as_ref(), url, &filter, &bounds).await?;
    let items: Vec<Item> = page
        .sessions
        .into_iter()
        .flat_map(|s| {
            let session_id = s.session_id;
            s.heads.into_iter().map(move |head| Item::Listed {
                session_id: session_id.clone(),
                head: Box::new(head),
            })
        })
        .collect();
    let verb = match action {
        RedriveAction::Retry => "retry",
        RedriveAction::Skip => "skip",
    };
    let mode = if args.dry_run { "dry_run" } else { "preview" };
    show(&context, mode, &items)?;
    if items.is_empty() || args.dry_run {
        return Ok(());
    }
    Err(Failure::new(format!(
        "nothing changed: pass --yes to {verb} the {} dead letter(s) listed, or --dry-run to only list them",
        items.len()
    )))
}

/// The `(consumer, session)` pairs the filters name, sessions outer, in id
/// order (`None`: any).
fn scopes(args: &RedriveArgs) -> Vec<(Option<String>, Option<String>)> {
    let sorted = |list: &[String]| -> Vec<Option<String>> {
        let mut list = list.to_vec();
        list.sort();
        list.dedup();
        if list.is_empty() {
            vec![None]
        } else {
            list.into_iter().map(Some).collect()
        }
    };
    let consumers = sorted(&args.consumers);
    sorted(&args.sessions)
        .into_iter()
        .flat_map(|session| {
            consumers
                .iter()
                .map(move |consumer| (consumer.clone(), session.clone()))
        })
        .collect()
}

/// Redrives every matching dead letter with `redrive_all`, page by page.
async fn apply(context: &Context<'_>) -> Result<(), Failure> {
    let args = context.args;
    let url = args.url.as_str();
    let store = target::open_existing(url).await?;
    let mut items: Vec<Item> = Vec::new();
    let mut left = args.limit;
    for (consumer, session_id) in scopes(args) {
        let request = BulkRedrive {
            action: context.action,
            consumer,
            session_id,
            lane: args.lane.clone(),
            // The preview keeps heads dead-lettered at or before the cutoff.
            dead_before_ms: context.dead_before.map(|t| t.saturating_add(1)),
            ..BulkRedrive::new(context.action)
        };
        if let Err(failure) = pages(store.as_ref(), url, request, &mut left, &mut items).await {
            let done = items.len();
            show(context, "applied", &items)?;
            return Err(Failure::new(format!(
                "stopped after redriving {done} dead letter(s) (each page is all or nothing; the rest were not attempted): {failure}"
            )));
        }
        if left == Some(0) {
            break;
        }
    }
    show(context, "applied", &items)
}

/// Calls `redrive_all` with `request` while more match and `left` allows,
/// collecting what it redrove into `items`.
async fn pages(
    store: &dyn Store,
    url: &str,
    mut request: BulkRedrive,
    left: &mut Option<usize>,
    items: &mut Vec<Item>,
) -> Result<(), Failure> {
    loop {
        let page = left.map_or(PAGE, |n| n.min(PAGE)).min(MAX_WORK_LIMIT);
        if page == 0 {
            return Ok(());
        }
        request.limit = Some(page);
        let result = store
            .redrive_all(request.clone())
            .await
            .map_err(|e| Failure::store(url, "redriving dead letters (redrive_all)", &e))?;
        let got = result.redriven.len();
        if let Some(n) = left.as_mut() {
            *n = n.saturating_sub(got);
        }
        items.extend(result.redriven.into_iter().map(Item::Redriven));
        if !result.more {
            return Ok(());
        }
        if got == 0 {
            return Err(Failure::new(format!(
                "redrive_all on {url} said more dead letters match but redrove none: the backend is misbehaving; run `a2-store check {url}`"
            )));
        }
    }
}

/// What the output repeats of the command line.
struct Context<'a> {
    args: &'a RedriveArgs,
    action: RedriveAction,
    dead_before: Option<i64>,
}

/// Prints the listed (or redriven) dead letters as a table and a summary
/// line, or as JSON.
fn show(context: &Context<'_>, mode: &str, items: &[Item]) -> Result<(), Failure> {
    let args = context.args;
    let acted = mode == "applied";
    let outcome = Outcome::of(context.action);
    if args.json {
        let shown: Vec<_> = items
            .iter()
            .map(|item| match item {
                Item::Listed { session_id, head } => json!({
                    "session_id": session_id,
                    "consumer": head.consumer,
                    "lane": head.lane,
                    "index": head.event.index,
                    "outcome": null,
                    "head": head,
                }),
                Item::Redriven(done) => json!({
                    "session_id": done.session_id,
                    "consumer": done.cursor.consumer,
                    "lane": done.cursor.lane,
                    "index": done.cursor.index,
                    "failed_at": done.failed_at,
                    "outcome": outcome,
                }),
            })
            .collect();
        let mut consumers = args.consumers.clone();
        consumers.sort();
        consumers.dedup();
        let mut sessions = args.sessions.clone();
        sessions.sort();
        sessions.dedup();
        return print_json(&json!({
            "version": JSON_VERSION,
            "action": context.action,
            "mode": mode,
            "filters": {
                "consumers": consumers,
                "sessions": sessions,
                "lane": args.lane,
                "older_than_ms": args.older_than.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                "dead_lettered_before": context.dead_before,
                "limit": args.limit,
            },
            "items": shown,
            "redriven": acted.then_some(items.len()),
        }));
    }
    if items.is_empty() {
        return print("(no dead letters match: nothing to redrive)\n");
    }
    let mut table = if acted {
        Table::new([
            "session",
            "index",
            "consumer",
            "lane",
            "dead-lettered",
            "outcome",
        ])
        .right_align([1])
    } else {
        Table::new([
            "session",
            "index",
            "consumer",
            "lane",
            "type",
            "failures",
            "dead-lettered",
            "last error",
        ])
        .right_align([1, 5])
    };
    for item in items {
        match item {
            Item::Listed { session_id, head } => {
                let d = &head.dispatch;
                table.row([
                    escape(session_id),
                    head.event.index.to_string(),
                    escape(&head.consumer),
                    or_dash(head.lane.as_deref().map(escape)),
                    escape(&head.event.event_type),
                    d.failure_count.to_string(),
                    or_dash(d.failed_at.map(timestamp)),
                    or_dash(d.last_error.as_deref().map(|e| crate::inspect::cut(e, 60))),
                ]);
            }
            Item::Redriven(done) => table.row([
                escape(&done.session_id),
                done.cursor.index.to_string(),
                escape(&done.cursor.consumer),
                or_dash(done.cursor.lane.as_deref().map(escape)),
                timestamp(done.failed_at),
                outcome.text().to_owned(),
            ]),
        }
    }
    let sessions = {
        let mut ids: Vec<&str> = items.iter().map(Item::session_id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    };
    let verb = match context.action {
        RedriveAction::Retry => "retry",
        RedriveAction::Skip => "skip",
    };
    let summary = if acted {
        format!(
            "{} {} dead letter(s) in {sessions} session(s)\n",
            outcome.text(),
            items.len()
        )
    } else {
        format!(
            "would {verb} these {} dead letter(s) in {sessions} session(s){}\n",
            items.len(),
            if args.dry_run {
                " (dry run: nothing changed)"
            } else {
                ""
            }
        )
    };
    print(&table.render())?;
    print(&summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn redrive_args(line: &[&str]) -> RedriveArgs {
        match crate::args::Cli::try_parse_from(line) {
            Ok(crate::args::Cli {
                command: crate::args::Command::Redrive(args),
            }) => args,
            other => panic!("not a redrive: {other:?}"),
        }
    }

    #[test]
    fn filters_make_one_series_per_consumer_and_session() {
        let any = redrive_args(&["a2-store", "redrive", "memory:", "--all", "--retry"]);
        assert_eq!(scopes(&any), vec![(None, None)]);
        let named = redrive_args(&[
            "a2-store",
            "redrive",
            "memory:",
            "--all",
            "--skip",
            "--consumer",
            "b",
            "--consumer",
            "a",
            "--session",
            "s2",
            "--session",
            "s1",
            "--session",
            "s2",
        ]);
        let pair = |c: &str, s: &str| (Some(c.to_owned()), Some(s.to_owned()));
        assert_eq!(
            scopes(&named),
            vec![
                pair("a", "s1"),
                pair("b", "s1"),
                pair("a", "s2"),
                pair("b", "s2")
            ]
        );
    }
}
