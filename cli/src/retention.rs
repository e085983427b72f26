//! Retention: `delete` (one session, after a preview and a confirmation)
//! and `prune` (every idle session with nothing left to do, page by page).

use std::io::{BufRead, IsTerminal, Write};

use a2_store::backend::retention::{self, HeadWork};
use a2_store::{
    Clock, Cursor, DeleteSessionRequest, DeleteSessionResult, ErrorCode, ListSessions, PruneFrom,
    PruneRequest, PruneResult, Removed, SessionInfo, Store, StoreError, SystemClock,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::json;

use crate::args::{DeleteArgs, PruneArgs};
use crate::failure::Failure;
use crate::output::{escape, print, print_json, timestamp, JSON_VERSION};
use crate::target;

/// Sessions one listing page reads while looking a session up.
const LOOKUP_PAGE: usize = 1_000;

/// A head that still has work, as the preview shows it.
#[derive(Debug, Serialize)]
struct Busy {
    consumer: String,
    lane: Option<String>,
    index: u64,
    /// `leased`, `retrying` (waiting out a retry delay) or `waiting`
    /// (claimable, scheduled or held by a pause).
    state: &'static str,
    /// Who holds the lease, when leased.
    holder: Option<String>,
    /// When the lease or the retry delay ends, ms.
    until_ms: Option<i64>,
}

/// What a delete of one session would remove, read through the trait.
#[derive(Debug, Serialize)]
struct Preview {
    session_id: String,
    incarnation: u64,
    head: u64,
    /// Event rows still stored (those not reclaimed).
    events_stored: u64,
    cursors: usize,
    /// Heads with work: they refuse the delete unless `--force`.
    with_work: Vec<Busy>,
    dead_letters: usize,
    presence_fields: usize,
    pauses: usize,
}

/// Runs `delete`.
pub async fn delete(args: &DeleteArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let session = args.session.as_str();
    let shown = escape(session);
    let store = target::open_existing(url).await?;
    let Some(info) = find_session(store.as_ref(), url, session).await? else {
        return Err(not_found(url, &shown));
    };
    let preview = preview(store.as_ref(), url, info).await?;
    if !args.json {
        print(&render(&preview, args.force))?;
    }
    if let Some(expected) = args.if_last_index.filter(|n| *n != preview.head) {
        return Err(not_deleted(url, &shown, expected, preview.head));
    }
    let mut if_last_index = args.if_last_index;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(format!(
                "nothing deleted: stdin is not a terminal, so there is no one to confirm the delete of session '{shown}' — pass --yes to delete it"
            )));
        }
        if !confirm(&format!(
            "delete session '{shown}' and everything listed above? [y/N] "
        ))
        .await?
        {
            return Err(Failure::new(format!(
                "nothing deleted: session '{shown}' was kept"
            )));
        }
        // What the user agreed to is the session as shown.
        if_last_index = Some(preview.head);
    }
    let mut request = DeleteSessionRequest::new(session);
    request.force = args.force;
    request.if_last_index = if_last_index;
    let result = store
        .delete_session(request)
        .await
        .map_err(|e| delete_failure(url, &shown, &e))?;
    match result {
        DeleteSessionResult::Deleted { removed } => {
            if args.json {
                return print_json(&json!({
                    "version": JSON_VERSION,
                    "session_id": session,
                    "outcome": "deleted",
                    "preview": preview,
                    "removed": removed_json(&removed),
                }));
            }
            print(&removed_text(&shown, &removed))
        }
        DeleteSessionResult::NotDeleted { head } => Err(not_deleted(
            url,
            &shown,
            if_last_index.unwrap_or(preview.head),
            head,
        )),
        DeleteSessionResult::NotFound => Err(not_found(url, &shown)),
        other => Err(Failure::new(format!(
            "session '{shown}': the store answered {other:?}, an outcome this build of a2-store does not know; use a CLI built from the same version as the store"
        ))),
    }
}

/// The failure of a delete call, with what to do for the retention errors.
fn delete_failure(url: &str, shown: &str, error: &StoreError) -> Failure {
    let doing = format!("deleting session '{shown}'");
    match error.code() {
        ErrorCode::SessionInUse => Failure::new(format!(
            "nothing deleted: {error} — rerun with --force to end that work and delete the session anyway, or wait for it to finish (`a2-store inspect {url} cursors {shown}` shows it)"
        )),
        _ => Failure::store(url, &doing, error),
    }
}

fn not_found(url: &str, shown: &str) -> Failure {
    Failure::new(format!(
        "no session '{shown}' in '{url}': nothing was deleted — check the id with `a2-store inspect {url} sessions`"
    ))
}

fn not_deleted(url: &str, shown: &str, expected: u64, head: u64) -> Failure {
    Failure::new(format!(
        "not deleted: session '{shown}' ends at index {head}, not {expected} — look at it with `a2-store inspect {url} log {shown}`, then rerun (with --if-last-index {head} to delete exactly that)"
    ))
}

/// The listing entry of `session`, or `None` when no session has that id.
/// Sessions are listed in id order from the id without its last
/// character (which sorts before it), a page at a time, until past it.
async fn find_session(
    store: &dyn Store,
    url: &str,
    session: &str,
) -> Result<Option<SessionInfo>, Failure> {
    let mut after = session
        .char_indices()
        .last()
        .map(|(at, _)| session[..at].to_owned())
        .filter(|prefix| !prefix.is_empty());
    loop {
        let page = store
            .sessions(ListSessions {
                after: after.clone(),
                limit: Some(LOOKUP_PAGE),
            })
            .await
            .map_err(|e| {
                Failure::store(
                    url,
                    &format!("looking up session '{}'", escape(session)),
                    &e,
                )
            })?;
        let full = page.len() == LOOKUP_PAGE;
        for info in page {
            match info.session_id.as_str().cmp(session) {
                std::cmp::Ordering::Less => after = Some(info.session_id),
                std::cmp::Ordering::Equal => return Ok(Some(info)),
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        if !full {
            return Ok(None);
        }
    }
}

/// Reads what a delete of the session `info` lists would remove.
async fn preview(store: &dyn Store, url: &str, info: SessionInfo) -> Result<Preview, Failure> {
    let session = info.session_id.as_str();
    let shown = escape(session);
    let reading = |what: &str| format!("reading the {what} of session '{shown}'");
    let cursors = store
        .cursors(session)
        .await
        .map_err(|e| Failure::store(url, &reading("cursors"), &e))?;
    let dead_letters = store
        .dead_letters(session)
        .await
        .map_err(|e| Failure::store(url, &reading("dead letters"), &e))?;
    let presence = store
        .read_presence(session)
        .await
        .map_err(|e| Failure::store(url, &reading("presence"), &e))?;
    let pauses = store
        .pauses(Some(session))
        .await
        .map_err(|e| Failure::store(url, &reading("pauses"), &e))?;
    let now = SystemClock.now_ms();
    Ok(Preview {
        session_id: info.session_id.clone(),
        incarnation: info.incarnation,
        head: info.head,
        events_stored: info.head.saturating_sub(info.reclaimed_through),
        cursors: cursors.len(),
        with_work: cursors.iter().filter_map(|c| busy(c, now)).collect(),
        dead_letters: dead_letters.len(),
        presence_fields: presence.len(),
        pauses: pauses
            .iter()
            .filter(|p| p.session_id.as_deref() == Some(session))
            .count(),
    })
}

/// `cursor`'s head when it still has work at `now`, as
/// `retention::work_left` (the rule the delete itself applies) says.
fn busy(cursor: &Cursor, now: i64) -> Option<Busy> {
    let index = cursor.head?;
    let (state, holder, until_ms) = match retention::work_left(cursor, now)? {
        HeadWork::Leased { holder, until } => ("leased", Some(holder), Some(until)),
        HeadWork::Retrying { until } => ("retrying", None, Some(until)),
        HeadWork::Waiting => ("waiting", None, None),
    };
    Some(Busy {
        consumer: cursor.consumer.clone(),
        lane: cursor.lane.clone(),
        index,
        state,
        holder,
        until_ms,
    })
}

/// The preview as text.
fn render(preview: &Preview, force: bool) -> String {
    let shown = escape(&preview.session_id);
    let mut text = format!(
        "session '{shown}' (incarnation {}): head {}, {} event(s) stored, {} cursor(s), {} dead letter(s), {} live presence field(s), {} pause(s)\n",
        preview.incarnation,
        preview.head,
        preview.events_stored,
        preview.cursors,
        preview.dead_letters,
        preview.presence_fields,
        preview.pauses,
    );
    for head in &preview.with_work {
        let lane = head
            .lane
            .as_deref()
            .map(|lane| format!(" lane '{}'", escape(lane)))
            .unwrap_or_default();
        let state = match (&head.holder, head.until_ms) {
            (Some(holder), Some(until)) => {
                format!("leased by '{}' until {}", escape(holder), timestamp(until))
            }
            (None, Some(until)) => format!("waits for a retry until {}", timestamp(until)),
            _ => "waits to be claimed".to_owned(),
        };
        text.push_str(&format!(
            "  work left: head {} of consumer '{}'{lane} {state}\n",
            head.index,
            escape(&head.consumer)
        ));
    }
    if !preview.with_work.is_empty() {
        text.push_str(if force {
            "  --force: these heads end with the session\n"
        } else {
            "  without --force the store refuses to delete a session with work left\n"
        });
    }
    text.push_str("  snapshots and their pins go too; forks of the session keep their copy\n");
    text
}

/// What one delete removed, as text.
fn removed_text(shown: &str, removed: &Removed) -> String {
    format!(
        "deleted session '{shown}' (incarnation {}): head {}, {} event row(s), {} cursor(s), {} head(s) with work ended; the id can be used again\n",
        removed.incarnation, removed.head, removed.events, removed.cursors, removed.ended
    )
}

fn removed_json(removed: &Removed) -> serde_json::Value {
    json!({
        "incarnation": removed.incarnation,
        "head": removed.head,
        "events": removed.events,
        "cursors": removed.cursors,
        "ended": removed.ended,
    })
}

/// Asks `question` on stderr and reads the answer from stdin: `y` or `yes`
/// agrees, anything else (or end of input) declines.
async fn confirm(question: &str) -> Result<bool, Failure> {
    let question = question.to_owned();
    let answer = tokio::task::spawn_blocking(move || {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "{question}");
        let _ = stderr.flush();
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| Failure::new(format!("asking for confirmation: {e}")))?
    .map_err(|e| Failure::new(format!("reading the answer from stdin: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// What every page of a prune added up to.
#[derive(Debug, Default)]
struct Totals {
    sessions: Vec<String>,
    examined: usize,
    pages: u64,
    expired_presence: u64,
    checkpoints: u64,
}

impl Totals {
    fn add(&mut self, page: PruneResult) {
        self.examined += page.examined;
        self.pages += 1;
        self.expired_presence += page.expired_presence;
        self.checkpoints += page.checkpoints;
        self.sessions.extend(page.sessions);
    }
}

/// Runs `prune`: pages until the store says no idle session is left.
pub async fn prune(args: &PruneArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let store = target::open_existing(url).await?;
    let mut request = PruneRequest::idle_for(args.idle);
    request.limit = args.limit;
    request.dry_run = args.dry_run;
    request.include_dead_letters = args.include_dead_letters;
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} {prefix} {pos} examined, {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    bar.set_prefix(if args.dry_run {
        "prune (dry run)"
    } else {
        "prune"
    });
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    let mut totals = Totals::default();
    let mut after: Option<PruneFrom> = None;
    loop {
        let page = store
            .prune(request.clone().after(after.clone()))
            .await
            .map_err(|e| {
                bar.finish_and_clear();
                Failure::store(
                    url,
                    &format!(
                        "pruning after {} page(s), {} session(s) {verb} so far",
                        totals.pages,
                        totals.sessions.len()
                    ),
                    &e,
                )
            })?;
        if page.more() && page.next <= after {
            bar.finish_and_clear();
            return Err(Failure::new(format!(
                "prune on {url} made no progress after {} page(s): the store answered the same place to continue from; the backend is misbehaving, run `a2-store check {url}`",
                totals.pages + 1
            )));
        }
        if !args.json {
            let lines: String = page
                .sessions
                .iter()
                .map(|s| format!("{verb} {}\n", escape(s)))
                .collect();
            bar.suspend(|| print(&lines))?;
        }
        bar.inc(u64::try_from(page.examined).unwrap_or(u64::MAX));
        after = page.next.clone();
        let more = page.more();
        totals.add(page);
        bar.set_message(format!("{} {verb}", totals.sessions.len()));
        if !more {
            break;
        }
    }
    bar.finish_and_clear();
    if args.json {
        return print_json(&json!({
            "version": JSON_VERSION,
            "dry_run": args.dry_run,
            "idle_ms": a2_store::duration_ms(args.idle),
            "include_dead_letters": args.include_dead_letters,
            "sessions": totals.sessions,
            "deleted": if args.dry_run { 0 } else { totals.sessions.len() },
            "examined": totals.examined,
            "kept": totals.examined.saturating_sub(totals.sessions.len()),
            "pages": totals.pages,
            "expired_presence": totals.expired_presence,
            "checkpoints": totals.checkpoints,
        }));
    }
    print(&totals_text(args, &totals))
}

/// The closing line of a prune.
fn totals_text(args: &PruneArgs, totals: &Totals) -> String {
    let idle = humantime::format_duration(args.idle);
    let kept = totals.examined.saturating_sub(totals.sessions.len());
    let why = if args.include_dead_letters {
        "work left"
    } else {
        "work left or a dead letter; --include-dead-letters also takes those whose only heads are dead letters"
    };
    let kept = if kept == 0 {
        String::new()
    } else {
        format!("; {kept} kept ({why})")
    };
    if args.dry_run {
        format!(
            "dry run: {} of {} session(s) idle for {idle} would be deleted{kept}; nothing was changed (run without --dry-run to delete them)\n",
            totals.sessions.len(),
            totals.examined,
        )
    } else {
        format!(
            "pruned {} of {} session(s) idle for {idle} in {} page(s){kept}; removed {} expired presence field(s) and {} snapshot checkpoint(s)\n",
            totals.sessions.len(),
            totals.examined,
            totals.pages,
            totals.expired_presence,
            totals.checkpoints,
        )
    }
}

#[cfg(test)]
mod tests {
    use a2_store::{CursorKind, Dispatch};

    use super::*;

    fn cursor(head: Option<u64>, dispatch: Dispatch) -> Cursor {
        let mut cursor =
            Cursor::new("agent", Some("main".into()), CursorKind::Lane, 0).with_head(head);
        cursor.dispatch = dispatch;
        cursor
    }

    #[test]
    fn only_heads_with_work_are_busy_and_say_who_holds_them() {
        assert!(busy(&cursor(None, Dispatch::default()), 0).is_none());
        assert!(busy(&cursor(Some(2), Dispatch::dead_lettered_at(5)), 0).is_none());
        let waiting = busy(&cursor(Some(3), Dispatch::default()), 0).unwrap();
        assert_eq!((waiting.state, waiting.holder), ("waiting", None));
        let mut leased = Dispatch::default();
        leased.claim("w1".into(), 1_000, 2_000);
        let held = busy(&cursor(Some(4), leased.clone()), 1_000).unwrap();
        assert_eq!(
            (held.state, held.holder.as_deref(), held.until_ms),
            ("leased", Some("w1"), Some(2_000))
        );
        // A lease that ran out is waiting to be claimed again.
        assert_eq!(
            busy(&cursor(Some(4), leased), 3_000).unwrap().state,
            "waiting"
        );
    }

    #[test]
    fn the_preview_warns_what_force_would_end() {
        let preview = Preview {
            session_id: "chat".into(),
            incarnation: 3,
            head: 7,
            events_stored: 5,
            cursors: 2,
            with_work: vec![Busy {
                consumer: "agent".into(),
                lane: Some("main".into()),
                index: 6,
                state: "waiting",
                holder: None,
                until_ms: None,
            }],
            dead_letters: 1,
            presence_fields: 0,
            pauses: 0,
        };
        let text = render(&preview, false);
        assert!(text.contains("head 7, 5 event(s) stored"), "{text}");
        assert!(
            text.contains("head 6 of consumer 'agent' lane 'main' waits to be claimed"),
            "{text}"
        );
        assert!(text.contains("without --force"), "{text}");
        assert!(render(&preview, true).contains("--force: these heads end"));
    }
}
