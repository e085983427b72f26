//! `list_work`: a page, by session id, of the sessions with work for some
//! consumers, counted from their cursors.
//!
//! Candidate sessions come from `work_listed` `(consumer, session)`, one
//! range read per consumer merged by session id; each candidate's counts
//! come from its pending heads (`cursors_pending`) and dead letters
//! (`cursors_dead`) of those consumers. A session whose rows have nothing
//! left is skipped (the store rewrites a pair's row whenever its work may
//! finish, so none is expected). The cost follows the sessions and heads
//! listed.

use a2_store_api::work::WorkSummary;
use a2_store_api::{ListWork, SessionWork, StoreError};
use rusqlite::Connection;

use crate::errors::SqlContext;
use crate::pool::Ctx;
use crate::session;
use crate::values::SqlLimit;
use crate::work::{full_summary, stored};

/// The page `request` asks for (validated).
pub(crate) fn list_work(
    tx: &Connection,
    ctx: &Ctx,
    request: &ListWork,
) -> Result<Vec<SessionWork>, StoreError> {
    let now = ctx.clock.now_ms();
    let page = request.page_size();
    let consumers = request.consumer_names();
    let mut after = request.after.clone().unwrap_or_default();
    let mut listed = Vec::new();
    loop {
        let (candidates, complete) = candidates(tx, &consumers, &after, page)?;
        for name in &candidates {
            if let Some(work) = session_work(tx, name, &consumers, now)? {
                listed.push(work);
                if listed.len() >= page {
                    return Ok(listed);
                }
            }
        }
        match candidates.last() {
            Some(last) if !complete => after = last.clone(),
            _ => return Ok(listed),
        }
    }
}

/// The sessions after `after` having a row of some consumer, by id, as far
/// as every consumer's read reaches (up to `page` rows each); `true` when
/// no consumer has rows beyond them.
fn candidates(
    tx: &Connection,
    consumers: &[String],
    after: &str,
    page: usize,
) -> Result<(Vec<String>, bool), StoreError> {
    let mut merged: Vec<String> = Vec::new();
    // The last session of a consumer whose read was cut at `page`: later
    // sessions may have rows of that consumer not read yet.
    let mut reach: Option<String> = None;
    for consumer in consumers {
        let found: Vec<String> = tx
            .prepare_cached(
                "SELECT session FROM work INDEXED BY work_listed \
                 WHERE consumer = ?1 AND session > ?2 ORDER BY session LIMIT ?3",
            )
            .and_then(|mut stmt| {
                stmt.query_map((consumer, after, SqlLimit(Some(page))), |row| row.get(0))?
                    .collect()
            })
            .ctx("listing sessions with work")?;
        if found.len() >= page {
            if let Some(last) = found.last() {
                if reach.as_ref().is_none_or(|reach| last < reach) {
                    reach = Some(last.clone());
                }
            }
        }
        merged.extend(found);
    }
    merged.sort();
    merged.dedup();
    if let Some(reach) = &reach {
        merged.retain(|session| session <= reach);
    }
    Ok((merged, reach.is_none()))
}

/// The work of `consumers` in the session named `name`, `None` when it has
/// none left (only finished rows).
fn session_work(
    tx: &Connection,
    name: &str,
    consumers: &[String],
    now: i64,
) -> Result<Option<SessionWork>, StoreError> {
    let Some(session) = session::find(tx, name)? else {
        return Ok(None);
    };
    let mut summary = WorkSummary::default();
    let mut ready_at: Option<i64> = None;
    for consumer in consumers {
        let Some(row) = stored(tx, name, consumer)? else {
            continue;
        };
        if let Some(at) = row.ready_at() {
            ready_at = Some(ready_at.map_or(at, |earliest| earliest.min(at)));
        }
        summary.merge(&full_summary(tx, &session, consumer, now)?);
    }
    Ok(summary
        .has_work()
        .then(|| summary.session_work(name, ready_at)))
}
