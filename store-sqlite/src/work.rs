//! The work index: one `work` row per `(session, consumer)` pair with an
//! unfinished head, written in the transaction of the cursor change that
//! calls for it, as [`a2_store_api::work`] rules.
//!
//! - A change that may make a pair's work claimable sooner moves its row
//!   earlier ([`ready_from`], `work::sooner`): one primary-key read and, only
//!   when the row moves, one write.
//! - A claim rewrites the rows of the consumers it served ([`serve`],
//!   `WorkSummary::served_row`), and a change that may leave a pair with no
//!   claimable head (a failure, a finished cursor, a clear) rewrites that
//!   pair's row ([`touch`], `WorkSummary::touched_row`).
//!
//! A pair's row depends only on whether it has a claimable head, the
//! earliest end of a busy head's lease or retry delay, and whether it has
//! a dead letter. The pending-head index `cursors_pending` is ordered by
//! `(sid, consumer, claim_expires_at)`, so its first entry for the pair
//! answers the first two in one seek (no expiry or an ended one: claimable;
//! else every pending head is busy and this is the earliest expiry).

use a2_store_api::work::{sooner, WorkRow, WorkSummary};
use a2_store_api::{ConsumerDeclaration, Dispatch, StoreError};
use rusqlite::{Connection, OptionalExtension};

use crate::cursor_rows::CursorRow;
use crate::errors::SqlContext;
use crate::session::SessionRow;

/// Whether a transaction moved some work row earlier: waiting claimers are
/// woken once it commits.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wake(bool);

impl Wake {
    /// Whether some row moved earlier.
    pub(crate) fn woke(self) -> bool {
        self.0
    }
}

/// The stored row of a pair, if any.
pub(crate) fn stored(
    tx: &Connection,
    session: &str,
    consumer: &str,
) -> Result<Option<WorkRow>, StoreError> {
    let row: Option<Option<i64>> = tx
        .prepare_cached("SELECT ready_at FROM work WHERE session = ?1 AND consumer = ?2")
        .and_then(|mut stmt| {
            stmt.query_row((session, consumer), |row| row.get(0))
                .optional()
        })
        .ctx("reading a work row")?;
    Ok(row.map(WorkRow::from_ready_at))
}

/// Stores `new` in place of `old` (`None`: no row), writing only when they
/// differ; notes in `wake` a row that became ready sooner than it was.
fn write(
    tx: &Connection,
    session: &str,
    consumer: &str,
    old: Option<WorkRow>,
    new: Option<WorkRow>,
    wake: &mut Wake,
) -> Result<(), StoreError> {
    if old == new {
        return Ok(());
    }
    match new {
        None => {
            tx.prepare_cached("DELETE FROM work WHERE session = ?1 AND consumer = ?2")
                .and_then(|mut stmt| stmt.execute((session, consumer)))
                .ctx("deleting a work row")?;
        }
        Some(row) => {
            tx.prepare_cached(
                "INSERT INTO work (session, consumer, ready_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (session, consumer) DO UPDATE SET ready_at = excluded.ready_at",
            )
            .and_then(|mut stmt| stmt.execute((session, consumer, row.ready_at())))
            .ctx("writing a work row")?;
            let sooner = match (old.and_then(WorkRow::ready_at), row.ready_at()) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(was), Some(now)) => now < was,
            };
            wake.0 |= sooner;
        }
    }
    Ok(())
}

/// After a change that may make `consumer`'s work in `session` claimable at
/// `at`: its row moves no later than `at` (`work::sooner`).
pub(crate) fn ready_from(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    at: i64,
    wake: &mut Wake,
) -> Result<(), StoreError> {
    let old = stored(tx, &session.name, consumer)?;
    let new = sooner(old, at);
    write(tx, &session.name, consumer, old, Some(new), wake)
}

/// After any other change to `consumer`'s heads in `session` (a failure, a
/// finished cursor): its row as `WorkSummary::touched_row` says.
pub(crate) fn touch(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    now: i64,
    wake: &mut Wake,
) -> Result<(), StoreError> {
    let old = stored(tx, &session.name, consumer)?;
    let new = row_summary(tx, session, consumer, now)?.touched_row(old, now);
    write(tx, &session.name, consumer, old, new, wake)
}

/// After a claim of `session` serving `consumers` (`None`: every consumer
/// with a row there): their rows as `WorkSummary::served_row` says.
pub(crate) fn serve(
    tx: &Connection,
    session: &SessionRow,
    consumers: Option<&[ConsumerDeclaration]>,
    now: i64,
) -> Result<(), StoreError> {
    let names: Vec<String> = match consumers {
        Some(list) => {
            let mut names: Vec<String> = list.iter().map(|c| c.name.clone()).collect();
            names.sort();
            names.dedup();
            names
        }
        None => rows_of(tx, session)?,
    };
    // A claim never wakes anyone: it only serves or corrects rows.
    let mut ignored = Wake::default();
    for consumer in &names {
        let old = stored(tx, &session.name, consumer)?;
        let new = row_summary(tx, session, consumer, now)?.served_row(now);
        write(tx, &session.name, consumer, old, new, &mut ignored)?;
    }
    Ok(())
}

/// After a clear of `session`: every row it has, as `touched_row` says
/// (the clear dropped or parked every cursor, so they all go).
pub(crate) fn clear(tx: &Connection, session: &SessionRow, now: i64) -> Result<(), StoreError> {
    let mut ignored = Wake::default();
    for consumer in rows_of(tx, session)? {
        touch(tx, session, &consumer, now, &mut ignored)?;
    }
    Ok(())
}

/// The consumers having a row in `session`.
fn rows_of(tx: &Connection, session: &SessionRow) -> Result<Vec<String>, StoreError> {
    tx.prepare_cached("SELECT consumer FROM work WHERE session = ?1 ORDER BY consumer")
        .and_then(|mut stmt| stmt.query_map([&session.name], |row| row.get(0))?.collect())
        .ctx("reading a session's work rows")
}

/// What decides the pair's row, at `now`, as a [`WorkSummary`] with each
/// count at most 1 (the row depends only on which counts are non-zero, and
/// on the earliest busy expiry): the pair's first pending head by expiry
/// (claimable, or busy and the earliest to end), else whether it has a
/// dead letter. Costs one or two index seeks, whatever the pair holds.
fn row_summary(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    now: i64,
) -> Result<WorkSummary, StoreError> {
    let mut summary = WorkSummary::default();
    let first: Option<Option<i64>> = tx
        .prepare_cached(
            "SELECT claim_expires_at FROM cursors INDEXED BY cursors_pending \
             WHERE sid = ?1 AND consumer = ?2 AND head IS NOT NULL AND failed_at IS NULL \
             ORDER BY claim_expires_at LIMIT 1",
        )
        .and_then(|mut stmt| {
            stmt.query_row((session.sid, consumer), |row| row.get(0))
                .optional()
        })
        .ctx("reading a consumer's earliest head")?;
    if let Some(claim_expires_at) = first {
        summary.add(&Dispatch::leased_until(claim_expires_at), now);
        return Ok(summary);
    }
    let dead = tx
        .prepare_cached(
            "SELECT 1 FROM cursors INDEXED BY cursors_dead WHERE sid = ?1 \
             AND head IS NOT NULL AND failed_at IS NOT NULL AND consumer = ?2 LIMIT 1",
        )
        .and_then(|mut stmt| stmt.exists((session.sid, consumer)))
        .ctx("looking for a consumer's dead letters")?;
    if dead {
        summary.add(&dead_letter(), now);
    }
    Ok(summary)
}

/// The bookkeeping of a dead-lettered head, as far as a summary looks at it.
fn dead_letter() -> Dispatch {
    Dispatch::dead_lettered_at(0)
}

/// The full summary of `consumer`'s heads in `session` at `now`, for
/// `list_work`: every pending head (by `cursors_pending`) and dead letter
/// (by `cursors_dead`) counted by `WorkSummary::add`.
pub(crate) fn full_summary(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    now: i64,
) -> Result<WorkSummary, StoreError> {
    let mut summary = WorkSummary::default();
    let mut stmt = tx
        .prepare_cached(
            "SELECT claim_expires_at FROM cursors INDEXED BY cursors_pending \
             WHERE sid = ?1 AND consumer = ?2 AND head IS NOT NULL AND failed_at IS NULL",
        )
        .ctx("counting a consumer's heads")?;
    let mut rows = stmt
        .query((session.sid, consumer))
        .ctx("counting a consumer's heads")?;
    while let Some(row) = rows.next().ctx("counting a consumer's heads")? {
        let claim_expires_at: Option<i64> = row.get(0).ctx("counting a consumer's heads")?;
        summary.add(&Dispatch::leased_until(claim_expires_at), now);
    }
    let dead: i64 = tx
        .prepare_cached(
            "SELECT COUNT(*) FROM cursors INDEXED BY cursors_dead WHERE sid = ?1 \
             AND head IS NOT NULL AND failed_at IS NOT NULL AND consumer = ?2",
        )
        .and_then(|mut stmt| stmt.query_row((session.sid, consumer), |row| row.get(0)))
        .ctx("counting a consumer's dead letters")?;
    let letter = dead_letter();
    for _ in 0..dead {
        summary.add(&letter, now);
    }
    Ok(summary)
}

/// After `cursor` moved past its head (a completion, a skipped or cancelled
/// head): a next head that is claimable at once moves the row to now; a
/// scheduled next head or a finished cursor may have left its consumer
/// nothing claimable, so the pair's row is rewritten.
pub(crate) fn after_advance(
    tx: &Connection,
    session: &SessionRow,
    cursor: &CursorRow,
    now: i64,
    wake: &mut Wake,
) -> Result<(), StoreError> {
    match cursor.head {
        Some(_) if cursor.dispatch.busy_until(now).is_none() => {
            ready_from(tx, session, &cursor.consumer, now, wake)
        }
        _ => touch(tx, session, &cursor.consumer, now, wake),
    }
}
