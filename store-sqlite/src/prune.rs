//! `prune`: a page of idle sessions, found in last-activity order on
//! `sessions_idle`, each deleted in a transaction of its own when
//! `a2_store_api::retention::prunable` says it has nothing left to do;
//! then a bounded sweep of expired presence and unpinned checkpoints.
//!
//! The page is read in one read transaction; each deletion checks again,
//! in its write, that the session is the one read (same incarnation) and
//! still idle (same last activity), so an append between the read and the
//! delete keeps the session. A dry run decides the whole page in its read.

use a2_store_api::retention::prunable;
use a2_store_api::{PruneFrom, PruneRequest, StoreError};
use rusqlite::Connection;

use crate::cursors;
use crate::delete_session::{free_pages, remove};
use crate::errors::SqlContext;
use crate::session;
use crate::values::{SqlIndex, SqlLimit};

/// The idle sessions (last activity below `?1`) in `(last_activity, name)`
/// order, at most `?2`: a range of `sessions_idle`.
const IDLE: &str =
    "SELECT name, last_activity, incarnation FROM sessions INDEXED BY sessions_idle \
     WHERE last_activity < ?1 ORDER BY last_activity, name LIMIT ?2";

/// [`IDLE`] after `(?2, ?3)`, at most `?4`.
const IDLE_AFTER: &str = "SELECT name, last_activity, incarnation FROM sessions \
     INDEXED BY sessions_idle WHERE last_activity < ?1 AND (last_activity, name) > (?2, ?3) \
     ORDER BY last_activity, name LIMIT ?4";

/// Deletes up to `?2` presence fields expired before `?1`, the earliest
/// first: a range of `presence_expiry`, each deleted by primary key.
const EXPIRED_PRESENCE: &str = "DELETE FROM presence WHERE (sid, participant, field) IN \
     (SELECT sid, participant, field FROM presence INDEXED BY presence_expiry \
     WHERE expires_at < ?1 ORDER BY expires_at LIMIT ?2)";

/// Deletes up to `?1` checkpoints no pin holds (one `pins_by_checkpoint`
/// probe per checkpoint read).
const UNPINNED: &str = "DELETE FROM checkpoints WHERE (sid, reducer, idx) IN \
     (SELECT c.sid, c.reducer, c.idx FROM checkpoints AS c WHERE NOT EXISTS \
     (SELECT 1 FROM pins AS p INDEXED BY pins_by_checkpoint \
     WHERE p.sid = c.sid AND p.reducer = c.reducer AND p.cp_idx = c.idx) LIMIT ?1)";

/// An idle session of a page, as the page's read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Its id.
    pub name: String,
    /// Its last activity, ms.
    pub last_activity: i64,
    /// Its incarnation.
    pub incarnation: u64,
}

impl Candidate {
    /// Where the next page starts when this is the last one examined.
    pub(crate) fn from(&self) -> PruneFrom {
        PruneFrom {
            last_activity_ms: self.last_activity,
            session_id: self.name.clone(),
        }
    }
}

/// The idle sessions (last activity below `cutoff`) after `request.after`
/// in `(last_activity, id)` order, at most the request's page size: one
/// range of `sessions_idle`.
pub(crate) fn candidates(
    tx: &Connection,
    request: &PruneRequest,
    cutoff: i64,
) -> Result<Vec<Candidate>, StoreError> {
    let limit = SqlLimit(Some(request.page_size()));
    let decode = |row: &rusqlite::Row<'_>| {
        Ok(Candidate {
            name: row.get(0)?,
            last_activity: row.get(1)?,
            incarnation: row.get::<_, SqlIndex>(2)?.get(),
        })
    };
    match &request.after {
        Some(after) => tx.prepare_cached(IDLE_AFTER).and_then(|mut stmt| {
            stmt.query_map(
                (cutoff, after.last_activity_ms, &after.session_id, limit),
                decode,
            )?
            .collect()
        }),
        None => tx
            .prepare_cached(IDLE)
            .and_then(|mut stmt| stmt.query_map((cutoff, limit), decode)?.collect()),
    }
    .ctx("finding idle sessions")
}

/// Whether `candidate` is still the idle session the page read and has
/// nothing left to do at `now`; when so and `delete`, deletes it as a
/// delete without force would (every row, then [`free_pages`]).
pub(crate) fn prune_one(
    tx: &Connection,
    candidate: &Candidate,
    include_dead_letters: bool,
    delete: bool,
    now: i64,
) -> Result<bool, StoreError> {
    let Some(session) = session::find(tx, &candidate.name)? else {
        return Ok(false);
    };
    if session.incarnation != candidate.incarnation
        || session.last_activity != Some(candidate.last_activity)
    {
        return Ok(false);
    }
    let listed = cursors::listed(tx, &session, now)?;
    if !prunable(&listed, include_dead_letters) {
        return Ok(false);
    }
    if delete {
        remove(tx, &session, listed.len() as u64, 0)?;
        free_pages(tx)?;
    }
    Ok(true)
}

/// Deletes up to `limit` presence fields expired before `now` (found by
/// `presence_expiry`) and up to `limit` checkpoints no pin holds, then
/// gives free pages back; returns how many of each went.
///
/// Checkpoints are dropped as soon as their last pin is released (a pin
/// row exists exactly while its head holds it), so the second sweep
/// normally finds none; it reads the checkpoints, which exist only while
/// pinned heads are in flight.
pub(crate) fn sweep(tx: &Connection, now: i64, limit: usize) -> Result<(u64, u64), StoreError> {
    let limit = SqlLimit(Some(limit));
    let presence = tx
        .prepare_cached(EXPIRED_PRESENCE)
        .and_then(|mut stmt| stmt.execute((now, limit)))
        .ctx("deleting expired presence")?;
    let checkpoints = tx
        .prepare_cached(UNPINNED)
        .and_then(|mut stmt| stmt.execute([limit]))
        .ctx("deleting unpinned checkpoints")?;
    free_pages(tx)?;
    Ok((presence as u64, checkpoints as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::query_plan as plan;

    #[test]
    fn a_page_reads_one_range_of_the_idle_index_and_sorts_nothing() {
        for sql in [IDLE, IDLE_AFTER] {
            let shown = plan(sql);
            assert!(
                shown.contains("SEARCH sessions USING INDEX sessions_idle (")
                    && shown.contains("last_activity<?)"),
                "{shown}"
            );
            assert!(!shown.contains("TEMP B-TREE"), "no sort: {shown}");
            assert!(!shown.contains("SCAN"), "no scan: {shown}");
        }
        let expired = plan(EXPIRED_PRESENCE);
        assert!(
            expired.contains("USING COVERING INDEX presence_expiry (expires_at<?)"),
            "{expired}"
        );
        assert!(!expired.contains("SCAN presence"), "{expired}");
        let unpinned = plan(UNPINNED);
        assert!(
            unpinned.contains(
                "USING COVERING INDEX pins_by_checkpoint (sid=? AND reducer=? AND cp_idx=?)"
            ),
            "{unpinned}"
        );
    }
}
