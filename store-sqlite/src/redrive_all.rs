//! `redrive_all`: the dead-lettered heads matching a bulk request, found
//! on the dead-letter indexes only (`cursors_dead` within one session,
//! `cursors_dead_all` by dead-letter time across sessions), so the cost
//! follows the dead letters, not the cursors or sessions; each is redriven
//! as a lane-exact `redrive` in the call's one transaction.

use std::collections::HashMap;

use a2_store_api::{BulkRedrive, BulkRedriveResult, CursorRef, RedrivenHead, StoreError};
use rusqlite::Connection;

use crate::cursor_rows::{self, cursor_columns, CursorRow};
use crate::errors::SqlContext;
use crate::fail::redrive_head;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};
use crate::values::{SqlIndex, SqlLimit};
use crate::work::Wake;

/// The dead letters of one session (`?1`, clear `?2`) matching the
/// consumer `?3`, lane `?4` and dead-letter window `?5 ..= ?6`, in
/// `(index, consumer, lane)` order, at most `?7`.
const IN_SESSION: &str = concat!(
    "SELECT ",
    cursor_columns!(),
    " FROM cursors INDEXED BY cursors_dead WHERE sid = ?1 AND head IS NOT NULL \
     AND failed_at IS NOT NULL AND head > ?2 AND (?3 IS NULL OR consumer = ?3) \
     AND (?4 IS NULL OR lane = ?4) AND failed_at >= ?5 AND failed_at <= ?6 \
     ORDER BY head, consumer, lane LIMIT ?7"
);

/// The dead letters of every session matching the consumer `?1`, lane `?2`
/// and dead-letter window `?3 ..= ?4`, above each session's clear, in
/// `(session, index, consumer, lane)` order, at most `?5`; each row ends
/// with its session's name.
const EVERYWHERE: &str = concat!(
    "SELECT ",
    cursor_columns!(),
    ", s.name FROM cursors AS c INDEXED BY cursors_dead_all JOIN sessions AS s ON s.sid = c.sid \
     WHERE c.head IS NOT NULL AND c.failed_at IS NOT NULL AND c.failed_at >= ?3 \
     AND c.failed_at <= ?4 AND c.head > s.clear_index AND (?1 IS NULL OR c.consumer = ?1) \
     AND (?2 IS NULL OR c.lane = ?2) ORDER BY s.name, c.head, c.consumer, c.lane LIMIT ?5"
);

/// Redrives up to `request.page_size()` matching dead letters (validated
/// request); `more` when further ones match.
pub(crate) fn redrive_all(
    tx: &Connection,
    ctx: &Ctx,
    request: &BulkRedrive,
) -> Result<(BulkRedriveResult, Wake), StoreError> {
    let mut wake = Wake::default();
    let now = ctx.clock.now_ms();
    let page = request.page_size();
    let mut found = matching(tx, request, page.saturating_add(1))?;
    let more = found.len() > page;
    found.truncate(page);
    let mut sessions: HashMap<String, SessionRow> = HashMap::new();
    let mut redriven = Vec::with_capacity(found.len());
    for (session_id, mut cursor) in found {
        let (Some(index), Some(failed_at)) = (cursor.head, cursor.dispatch.failed_at) else {
            continue;
        };
        if !sessions.contains_key(&session_id) {
            let Some(session) = session::find(tx, &session_id)? else {
                continue;
            };
            sessions.insert(session_id.clone(), session);
        }
        let Some(session) = sessions.get(&session_id) else {
            continue;
        };
        redrive_head(tx, session, &mut cursor, request.action, now, &mut wake)?;
        redriven.push(RedrivenHead::new(
            session_id,
            CursorRef::new(cursor.consumer.clone(), cursor.lane.as_deref(), index),
            failed_at,
        ));
    }
    Ok((BulkRedriveResult::new(redriven, more), wake))
}

/// Up to `limit` dead-lettered cursors matching `request`, with their
/// session ids, in `(session_id, index, consumer, lane)` order. The SQL
/// narrows by the filters; `BulkRedrive::matches` decides.
fn matching(
    tx: &Connection,
    request: &BulkRedrive,
    limit: usize,
) -> Result<Vec<(String, CursorRow)>, StoreError> {
    let since = request.dead_since_ms.unwrap_or(i64::MIN);
    // The window's end is exclusive; nothing is dead-lettered before i64::MIN.
    let through = match request.dead_before_ms {
        None => i64::MAX,
        Some(before) => match before.checked_sub(1) {
            Some(through) => through,
            None => return Ok(Vec::new()),
        },
    };
    let limit = SqlLimit(Some(limit));
    let mut found = Vec::new();
    match &request.session_id {
        Some(session_id) => {
            let Some(session) = session::find(tx, session_id)? else {
                return Ok(found);
            };
            let clear = SqlIndex::new("clear index", session.clear)?;
            let mut stmt = tx.prepare_cached(IN_SESSION).ctx("finding dead letters")?;
            let mut rows = stmt
                .query(rusqlite::params![
                    session.sid,
                    clear,
                    request.consumer,
                    request.lane,
                    since,
                    through,
                    limit
                ])
                .ctx("finding dead letters")?;
            while let Some(row) = rows.next().ctx("finding dead letters")? {
                found.push((session.name.clone(), cursor_rows::decode(row)?));
            }
        }
        None => {
            let mut stmt = tx.prepare_cached(EVERYWHERE).ctx("finding dead letters")?;
            let mut rows = stmt
                .query(rusqlite::params![
                    request.consumer,
                    request.lane,
                    since,
                    through,
                    limit
                ])
                .ctx("finding dead letters")?;
            while let Some(row) = rows.next().ctx("finding dead letters")? {
                let name: String = row.get(18).ctx("finding dead letters")?;
                found.push((name, cursor_rows::decode(row)?));
            }
        }
    }
    found.retain(|(session_id, cursor)| {
        cursor.dispatch.failed_at.is_some_and(|failed_at| {
            request.matches(
                session_id,
                &cursor.consumer,
                cursor.lane.as_deref(),
                failed_at,
            )
        })
    });
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::schema::query_plan as plan;

    #[test]
    fn bulk_redrive_reads_the_dead_letters_only() {
        let everywhere = plan(EVERYWHERE);
        assert!(
            everywhere.contains("c USING INDEX cursors_dead_all (failed_at>? AND failed_at<?)"),
            "{everywhere}"
        );
        assert!(
            everywhere.contains("s USING INTEGER PRIMARY KEY"),
            "{everywhere}"
        );
        let in_session = plan(IN_SESSION);
        assert!(
            in_session.contains("USING INDEX cursors_dead (sid=? AND head>?)"),
            "{in_session}"
        );
        for shown in [everywhere, in_session] {
            assert!(!shown.contains("SCAN"), "no scan: {shown}");
        }
    }
}
