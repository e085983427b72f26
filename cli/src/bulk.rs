//! `a2-store redrive --all`: every dead letter the filters keep, listed
//! first and redriven one by one only with `--yes`.
//!
//! The store has no bulk redrive: each head goes through the per-session
//! `redrive`, after looking the head up again so that one that changed since
//! it was listed is reported instead of redriven.

use a2_store::{Clock, Head, RedriveAction, RedriveRequest, Store, SystemClock};
use serde::Serialize;
use serde_json::json;

use crate::across::{self, Bounds, Filter};
use crate::args::RedriveArgs;
use crate::failure::Failure;
use crate::output::{escape, print, print_json, timestamp, JSON_VERSION};
use crate::table::{or_dash, Table};
use crate::target;

/// What became of one listed dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    /// Retried: claimable again.
    Retried,
    /// Skipped: its cursor moved past it.
    Skipped,
    /// Still dead-lettered, but not as listed (failed again, redriven and
    /// dead-lettered again...): left alone.
    Changed,
    /// No longer dead-lettered (someone redrove it, or its session was cleared).
    Gone,
    /// Another dead letter of the consumer at the same index (a cursor the
    /// filters left out) comes first, and `redrive` would take that one.
    NotFirst,
    /// Not tried: a store call failed before its turn.
    NotAttempted,
}

impl Outcome {
    fn redriven(self) -> bool {
        matches!(self, Self::Retried | Self::Skipped)
    }

    fn text(self) -> &'static str {
        match self {
            Self::Retried => "retried",
            Self::Skipped => "skipped",
            Self::Changed => "changed since listed: left alone",
            Self::Gone => "no longer dead-lettered",
            Self::NotFirst => "another dead letter at this index comes first: left alone",
            Self::NotAttempted => "not attempted",
        }
    }
}

/// A listed dead letter and, once acted on, what became of it.
struct Item {
    session_id: String,
    head: Head,
    outcome: Option<Outcome>,
}

/// Runs `redrive --all`.
pub async fn redrive_all(args: &RedriveArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let action = crate::repair::action(args);
    let dead_before = args.older_than.map(|age| {
        let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        SystemClock.now_ms().saturating_sub(age)
    });
    // Listing writes nothing: only --yes opens the store for writing.
    let store = if args.yes {
        target::open_existing(url).await?
    } else {
        target::open_read_only(url).await?
    };
    let store = store.as_ref();
    let filter = Filter {
        consumers: &args.consumers,
        sessions: &args.sessions,
        dead_before,
        lanes_only: false,
    };
    let bounds = Bounds {
        after: None,
        sessions: None,
        heads: args.limit,
    };
    let page = across::dead_letters(store, url, &filter, &bounds).await?;
    let mut items: Vec<Item> = page
        .sessions
        .into_iter()
        .flat_map(|s| {
            let session_id = s.session_id;
            s.heads.into_iter().map(move |head| Item {
                session_id: session_id.clone(),
                head,
                outcome: None,
            })
        })
        .collect();
    let verb = match action {
        RedriveAction::Retry => "retry",
        RedriveAction::Skip => "skip",
    };
    let context = Context {
        args,
        action,
        dead_before,
    };
    if !args.yes {
        let mode = if args.dry_run { "dry_run" } else { "preview" };
        show(&context, mode, &items)?;
        if items.is_empty() || args.dry_run {
            return Ok(());
        }
        return Err(Failure::new(format!(
            "nothing changed: pass --yes to {verb} the {} dead letter(s) listed, or --dry-run to only list them",
            items.len()
        )));
    }
    if items.is_empty() {
        return show(&context, "applied", &items);
    }
    let total = items.len();
    for done in 0..total {
        let item = &items[done];
        match redrive_one(store, url, item, action).await {
            Ok(outcome) => items[done].outcome = Some(outcome),
            Err(failure) => {
                for rest in &mut items[done..] {
                    rest.outcome = Some(Outcome::NotAttempted);
                }
                show(&context, "applied", &items)?;
                return Err(Failure::new(format!(
                    "stopped after {done} of {total} dead letter(s), the rest were not attempted: {failure}"
                )));
            }
        }
    }
    show(&context, "applied", &items)?;
    let left = items
        .iter()
        .filter(|i| !i.outcome.is_some_and(Outcome::redriven))
        .count();
    if left > 0 {
        return Err(Failure::new(format!(
            "{left} of {total} dead letter(s) were left alone, as the table says (changed since they were listed, or behind another dead letter of the consumer at the same index): look again with `a2-store inspect {url} dead-letters`"
        )));
    }
    Ok(())
}

/// Redrives one listed dead letter if it is still the one `redrive` would
/// take, exactly as listed.
async fn redrive_one(
    store: &dyn Store,
    url: &str,
    item: &Item,
    action: RedriveAction,
) -> Result<Outcome, Failure> {
    let head = &item.head;
    let now = across::session_dead_letters(store, url, &item.session_id).await?;
    // `redrive` takes the first of the consumer's dead letters at the index.
    let first = now
        .iter()
        .find(|h| h.consumer == head.consumer && h.event.index == head.event.index);
    match first {
        None => return Ok(Outcome::Gone),
        Some(first) if first.lane != head.lane => {
            let listed = now.iter().any(|h| h.cursor_ref() == head.cursor_ref());
            return Ok(if listed {
                Outcome::NotFirst
            } else {
                Outcome::Gone
            });
        }
        Some(first) if first != head => return Ok(Outcome::Changed),
        Some(_) => {}
    }
    let result = store
        .redrive(RedriveRequest {
            lane: None,
            session_id: item.session_id.clone(),
            consumer: head.consumer.clone(),
            index: head.event.index,
            action,
            consumers: None,
        })
        .await
        .map_err(|e| {
            Failure::store(
                url,
                &format!("redriving in session '{}'", escape(&item.session_id)),
                &e,
            )
        })?;
    Ok(match (result.redriven, action) {
        (false, _) => Outcome::Gone,
        (true, RedriveAction::Retry) => Outcome::Retried,
        (true, RedriveAction::Skip) => Outcome::Skipped,
    })
}

/// What the output repeats of the command line.
struct Context<'a> {
    args: &'a RedriveArgs,
    action: RedriveAction,
    dead_before: Option<i64>,
}

/// Prints the listed dead letters (with their outcomes once acted on) as a
/// table and a summary line, or as JSON.
fn show(context: &Context<'_>, mode: &str, items: &[Item]) -> Result<(), Failure> {
    let args = context.args;
    let acted = mode == "applied";
    if args.json {
        let shown: Vec<_> = items
            .iter()
            .map(|item| {
                json!({
                    "session_id": item.session_id,
                    "consumer": item.head.consumer,
                    "lane": item.head.lane,
                    "index": item.head.event.index,
                    "outcome": item.outcome,
                    "head": item.head,
                })
            })
            .collect();
        let mut consumers = args.consumers.clone();
        consumers.sort();
        consumers.dedup();
        let mut sessions = args.sessions.clone();
        sessions.sort();
        sessions.dedup();
        let redriven = items
            .iter()
            .filter(|i| i.outcome.is_some_and(Outcome::redriven))
            .count();
        return print_json(&json!({
            "version": JSON_VERSION,
            "action": context.action,
            "mode": mode,
            "filters": {
                "consumers": consumers,
                "sessions": sessions,
                "older_than_ms": args.older_than.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                "dead_lettered_before": context.dead_before,
                "limit": args.limit,
            },
            "items": shown,
            "redriven": acted.then_some(redriven),
        }));
    }
    if items.is_empty() {
        return print("(no dead letters match: nothing to redrive)\n");
    }
    let last = if acted { "outcome" } else { "last error" };
    let mut table = Table::new([
        "session",
        "index",
        "consumer",
        "lane",
        "type",
        "failures",
        "dead-lettered",
        last,
    ])
    .right_align([1, 5]);
    for item in items {
        let h = &item.head;
        let d = &h.dispatch;
        table.row([
            item.session_id.clone(),
            h.event.index.to_string(),
            h.consumer.clone(),
            or_dash(h.lane.as_deref()),
            h.event.event_type.clone(),
            d.failure_count.to_string(),
            or_dash(d.failed_at.map(timestamp)),
            if acted {
                item.outcome.map_or("-", Outcome::text).to_owned()
            } else {
                or_dash(d.last_error.as_deref().map(|e| crate::inspect::cut(e, 60)))
            },
        ]);
    }
    let sessions = {
        let mut ids: Vec<&str> = items.iter().map(|i| i.session_id.as_str()).collect();
        ids.dedup();
        ids.len()
    };
    let (verb, done) = match context.action {
        RedriveAction::Retry => ("retry", "retried"),
        RedriveAction::Skip => ("skip", "skipped"),
    };
    let summary = if acted {
        let redriven = items
            .iter()
            .filter(|i| i.outcome.is_some_and(Outcome::redriven))
            .count();
        format!(
            "{done} {redriven} of {} dead letter(s) in {sessions} session(s)\n",
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
    use a2_store::{ClaimRequest, FailRequest, NewEvent, OpenOptions, Target};

    async fn two_dead_letters_at_one_index() -> (std::sync::Arc<dyn Store>, Vec<Head>) {
        let store = a2_store::open("memory:", OpenOptions::default())
            .await
            .unwrap();
        let event = NewEvent::new("msg", serde_json::json!(1))
            .with_target(Target::event("c"))
            .with_target(Target::lane("c", "L"));
        store
            .append("s", vec![event], Default::default())
            .await
            .unwrap();
        store
            .claim_available(ClaimRequest {
                session_id: "s".into(),
                holder: "w".into(),
                ttl_ms: Some(60_000),
                ..ClaimRequest::default()
            })
            .await
            .unwrap();
        for lane in [None, Some("L".to_owned())] {
            store
                .fail_attempt(FailRequest {
                    session_id: "s".into(),
                    consumer: "c".into(),
                    lane,
                    index: 1,
                    attempt: 1,
                    error: "boom".into(),
                    max_failures: Some(1),
                    retry_after_ms: None,
                })
                .await
                .unwrap();
        }
        let heads = store.dead_letters("s").await.unwrap();
        assert_eq!(heads.len(), 2, "{heads:?}");
        (store, heads)
    }

    fn item(head: &Head) -> Item {
        Item {
            session_id: "s".into(),
            head: head.clone(),
            outcome: None,
        }
    }

    #[test]
    fn a_head_is_redriven_only_as_listed_and_when_redrive_would_take_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (store, heads) = two_dead_letters_at_one_index().await;
            let store = store.as_ref();
            let (event, lane) = (&heads[0], &heads[1]);
            assert_eq!(
                (event.lane.as_deref(), lane.lane.as_deref()),
                (None, Some("L"))
            );
            let retry = RedriveAction::Retry;
            // `redrive` would take the event cursor's head first.
            let outcome = redrive_one(store, "memory:", &item(lane), retry)
                .await
                .unwrap();
            assert_eq!(outcome, Outcome::NotFirst);
            // Listed with other bookkeeping than it has now: left alone.
            let mut stale = item(event);
            stale.head.dispatch.failure_count += 1;
            let outcome = redrive_one(store, "memory:", &stale, retry).await.unwrap();
            assert_eq!(outcome, Outcome::Changed);
            assert_eq!(
                store.dead_letters("s").await.unwrap(),
                heads,
                "nothing changed"
            );

            let outcome = redrive_one(store, "memory:", &item(event), retry)
                .await
                .unwrap();
            assert_eq!(outcome, Outcome::Retried);
            let outcome = redrive_one(store, "memory:", &item(event), retry)
                .await
                .unwrap();
            assert_eq!(outcome, Outcome::Gone, "already redriven");
            let skip = RedriveAction::Skip;
            let outcome = redrive_one(store, "memory:", &item(lane), skip)
                .await
                .unwrap();
            assert_eq!(outcome, Outcome::Skipped);
            assert!(store.dead_letters("s").await.unwrap().is_empty());
        });
    }
}
