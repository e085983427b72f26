//! The operator's fixes: `redrive`, `clear` and `reclaim`, each saying what it changed.

use a2_store::{ClearRequest, ClearResult, RedriveAction, RedriveRequest};
use serde_json::json;

use crate::args::{ClearArgs, ReclaimArgs, RedriveArgs};
use crate::failure::Failure;
use crate::output::{escape, print, print_json};
use crate::target;

/// Runs `redrive`: one head, or with `--all` every dead letter the filters keep.
pub async fn redrive(args: &RedriveArgs) -> Result<(), Failure> {
    let (Some(session), Some(consumer), Some(index)) = (
        args.session.as_deref(),
        args.consumer.as_deref(),
        args.index,
    ) else {
        return crate::bulk::redrive_all(args).await;
    };
    let bulk_only = [
        (args.yes, "--yes"),
        (args.dry_run, "--dry-run"),
        (!args.consumers.is_empty(), "--consumer"),
        (!args.sessions.is_empty(), "--session"),
        (args.older_than.is_some(), "--older-than"),
        (args.limit.is_some(), "--limit"),
    ];
    if let Some((_, flag)) = bulk_only.iter().find(|(given, _)| *given) {
        return Err(Failure::new(format!(
            "{flag} goes with --all (redrive every dead letter the filters keep); to redrive one head pass only SESSION CONSUMER INDEX and --retry or --skip"
        )));
    }
    let store = target::open_existing(&args.url).await?;
    let shown = escape(session);
    let url = args.url.as_str();
    let action = action(args);
    let dead = store.dead_letters(session).await.map_err(|e| {
        Failure::store(
            url,
            &format!("listing the dead letters of session '{shown}'"),
            &e,
        )
    })?;
    let request = RedriveRequest {
        lane: args.lane.clone(),
        ..RedriveRequest::new(session, consumer, index, action)
    };
    // The head `redrive` takes: the lane's when named, else the first.
    let head = dead
        .iter()
        .find(|h| request.picks(&h.consumer, h.lane.as_deref(), h.event.index))
        .cloned();
    let result = store
        .redrive(request)
        .await
        .map_err(|e| Failure::store(url, &format!("redriving in session '{shown}'"), &e))?;
    if !result.redriven {
        return Err(Failure::new(format!(
            "nothing changed: consumer '{}' has no dead-lettered head at index {}{} in session '{shown}' — list them with `a2-store inspect {url} dead-letters {shown}`",
            escape(consumer),
            index,
            args.lane
                .as_deref()
                .map_or_else(String::new, |l| format!(" on lane '{}'", escape(l)))
        )));
    }
    if args.json {
        return print_json(&json!({
            "session_id": session,
            "consumer": consumer,
            "index": index,
            "lane": head.as_ref().and_then(|h| h.lane.clone()).or(args.lane.clone()),
            "action": action,
            "redriven": result.redriven,
            "has_pending": result.has_pending,
            "head": head,
        }));
    }
    let what = head.as_ref().map_or_else(String::new, |h| {
        format!(
            " ({} event, lane {}, {} attempts, {} failures)",
            h.event.event_type,
            h.lane.as_deref().unwrap_or("-"),
            h.dispatch.attempt_count,
            h.dispatch.failure_count
        )
    });
    let done = match action {
        RedriveAction::Retry => "retried: the head is claimable again with its failures reset",
        RedriveAction::Skip => {
            "skipped: the cursor moved past the head as if it had been processed"
        }
    };
    let pending = if result.has_pending {
        "the session has pending work"
    } else {
        "the session has no pending work"
    };
    print(&format!(
        "redrove {} at index {index}{what} in session '{shown}': {done}; {pending}\n",
        escape(consumer),
    ))
}

/// The action `--retry` or `--skip` asks for.
pub fn action(args: &RedriveArgs) -> RedriveAction {
    if args.skip {
        RedriveAction::Skip
    } else {
        RedriveAction::Retry
    }
}

/// Runs `clear`.
pub async fn clear(args: &ClearArgs) -> Result<(), Failure> {
    let session = args.session.as_str();
    let shown = escape(session);
    let url = args.url.as_str();
    if !args.yes && args.if_last_index.is_none() {
        return Err(Failure::new(format!(
            "clear drops the pending work of session '{}': pass --yes to clear it, or --if-last-index N to clear it only if it still ends at index N",
            escape(session)
        )));
    }
    let store = target::open_existing(url).await?;
    target::require_session(store.as_ref(), url, session).await?;
    let before = store.cursors(session).await.map_err(|e| {
        Failure::store(
            url,
            &format!("listing the cursors of session '{shown}'"),
            &e,
        )
    })?;
    let result = store
        .clear(ClearRequest {
            incarnation: None,
            session_id: session.to_owned(),
            if_last_index: args.if_last_index,
            cause: None,
        })
        .await
        .map_err(|e| Failure::store(url, &format!("clearing session '{shown}'"), &e))?;
    match result {
        ClearResult::Cleared { marker } => {
            let with_work = before.iter().filter(|c| c.head.is_some()).count();
            if args.json {
                return print_json(&json!({
                    "session_id": session,
                    "outcome": "cleared",
                    "marker": marker,
                    "cursors_with_work": with_work,
                }));
            }
            let below = marker.index.saturating_sub(1);
            print(&format!(
                "cleared session '{shown}': marker at index {}; {} cursor(s) had pending work, event and lane cursors were dropped and log cursors parked at the marker; {below} row(s) below it can be deleted with `a2-store reclaim {url} {shown}`\n",
                marker.index, with_work
            ))
        }
        ClearResult::NotCleared { head } => Err(Failure::new(format!(
            "not cleared: session '{shown}' ends at index {head}, not {} — look at its log, then rerun with --if-last-index {head}",
            args.if_last_index.map_or_else(|| "the index given".to_owned(), |n| n.to_string())
        ))),
        other => Err(Failure::new(format!(
            "session '{shown}': the store answered {other:?}, an outcome this build of a2-store does not know; use a CLI built from the same version as the store"
        ))),
    }
}

/// Runs `reclaim`: deletes batches until no row remains below the clear marker.
pub async fn reclaim(args: &ReclaimArgs) -> Result<(), Failure> {
    let store = target::open_existing(&args.url).await?;
    let session = args.session.as_str();
    let shown = escape(session);
    let url = args.url.as_str();
    target::require_session(store.as_ref(), url, session).await?;
    let mut total: u64 = 0;
    let mut calls: u64 = 0;
    loop {
        let result = store
            .reclaim(session)
            .await
            .map_err(|e| Failure::store(url, &format!("reclaiming session '{shown}'"), &e))?;
        total += result.reclaimed;
        calls += 1;
        if result.done {
            break;
        }
        if result.reclaimed == 0 {
            return Err(Failure::new(format!(
                "reclaim of session '{shown}' on {url} made no progress after {total} row(s) although rows remain: the backend is misbehaving; run `a2-store check {url}`"
            )));
        }
    }
    if args.json {
        return print_json(&json!({
            "session_id": session,
            "reclaimed": total,
            "calls": calls,
            "done": true,
        }));
    }
    if total == 0 {
        print(&format!(
            "nothing to reclaim in session '{shown}': no rows remain below its clear marker (a session that was never cleared has none; clear it with `a2-store clear {url} {shown}`)\n"
        ))
    } else {
        print(&format!(
            "reclaimed {total} row(s) below the clear marker of session '{shown}' in {calls} call(s); none remain\n"
        ))
    }
}
