//! `claim_available`: handing out heads under leases.

use std::collections::HashSet;

use a2_store_api::order::compare_heads;
use a2_store_api::pause::hold;
use a2_store_api::{
    ClaimRequest, ClaimResult, ClaimStep, ConsumerDeclaration, CursorRef, Dispatch, Pause,
    StoreError,
};
use rusqlite::Connection;

use crate::cursor_rows::{self, cursor_columns, refresh_log_types, release_head_pins, CursorRow};
use crate::errors::SqlContext;
use crate::pause::covering;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};
use crate::values::{SqlIndex, SqlLimit};
use crate::work;

/// How many candidate cursors one query fetches while walking claimable heads.
const PAGE: usize = 256;

/// Which cursors a claim looks at: served consumers, not excluded, head in range.
struct Filter {
    served: Option<HashSet<String>>,
    /// Excluded cursors by key `(consumer, lane, ev_index)`.
    excluded: HashSet<(String, String, u64)>,
}

impl Filter {
    fn new(consumers: Option<&[ConsumerDeclaration]>, exclude: &[CursorRef]) -> Self {
        let served = consumers.map(|list| list.iter().map(|c| c.name.clone()).collect());
        let excluded = exclude
            .iter()
            .map(|r| match &r.lane {
                Some(lane) => (r.consumer.clone(), lane.clone(), 0),
                None => (r.consumer.clone(), String::new(), r.index),
            })
            .collect();
        Self { served, excluded }
    }

    fn serves(&self, consumer: &str) -> bool {
        self.served
            .as_ref()
            .is_none_or(|served| served.contains(consumer))
    }

    fn admits(&self, consumer: &str, lane: Option<&str>, ev_index: u64) -> bool {
        if let Some(served) = &self.served {
            if !served.contains(consumer) {
                return false;
            }
        }
        self.excluded.is_empty()
            || !self.excluded.contains(&(
                consumer.to_owned(),
                lane.unwrap_or_default().to_owned(),
                ev_index,
            ))
    }
}

/// Claims every claimable head of the served cursors in `(index, consumer,
/// lane)` order, up to `limit`, counting expired claims as failures first.
///
/// First the busy heads whose claim or retry delay has expired are promoted
/// (`expired = 1`, found by expiry on `cursors_busy`, each promoted once),
/// which puts them back on `cursors_ready` beside the idle heads. Then the
/// ready heads are walked in claim order, page by page, until `limit`.
/// Heads still busy are on neither walk, so work in flight costs a claim
/// nothing. Last, the work rows of the served consumers are rewritten to
/// what is left (`work::serve`), in the same transaction.
pub(crate) fn claim(
    tx: &Connection,
    ctx: &Ctx,
    request: &ClaimRequest,
) -> Result<ClaimResult, StoreError> {
    let now = ctx.clock.now_ms();
    let expires_at = request.lease_expiry(now)?;
    let Some(session) = session::find(tx, &request.session_id)? else {
        return Ok(ClaimResult::Settled);
    };
    let result = claim_heads(tx, &session, request, now, expires_at)?;
    work::serve(tx, &session, request.consumers.as_deref(), now)?;
    Ok(result)
}

/// The claim of `session`'s heads at `now` under a lease ending at `expires_at`.
fn claim_heads(
    tx: &Connection,
    session: &SessionRow,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
) -> Result<ClaimResult, StoreError> {
    refresh_log_types(tx, session, request.consumers.as_deref())?;
    promote_expired(tx, session, now)?;
    // A paused consumer's heads are skipped (open-ended) or busy until the
    // pause ends.
    let mut pauses = covering(tx, &session.name)?;
    let filter = Filter::new(request.consumers.as_deref(), &request.exclude);
    pauses.retain(|pause| pause.in_force(now) && filter.serves(&pause.consumer));
    let through = request.through.map_or(SqlIndex::MAX, SqlIndex::clamped);
    let limit = request.limit.unwrap_or(usize::MAX);
    let mut heads = Vec::new();
    let mut dead_lettered = Vec::new();
    // A promoted head whose expiry is in the future again (the clock moved
    // back) is busy: it sets the retry time and is skipped.
    let mut early_busy: Option<i64> = None;
    // Keyset walk; rows are updated between pages, never while a page's
    // statement is open.
    // Every head is at least 1, so the walk starts after `(0, "", "")`.
    let mut after: (SqlIndex, String, String) = Default::default();
    'walk: while heads.len() < limit {
        // No more rows than claims still allowed (dead letters, filtered and
        // busy cursors just lead to another page).
        let left = limit - heads.len();
        let want = left.clamp(1, PAGE);
        let page = ready_page(tx, session, through, &after, want)?;
        let last_page = page.len() < want;
        for mut candidate in page {
            after = (
                SqlIndex::clamped(candidate.head.unwrap_or_default()),
                candidate.consumer.clone(),
                candidate.lane.clone().unwrap_or_default(),
            );
            if !filter.admits(
                &candidate.consumer,
                candidate.lane.as_deref(),
                candidate.ev_index,
            ) {
                continue;
            }
            let held = hold(&pauses, &candidate.consumer, &session.name, now);
            if held.hides() {
                continue;
            }
            if let Some(expiry) = candidate.dispatch.busy_until_held(now, held) {
                early_busy = Some(early_busy.map_or(expiry, |early| early.min(expiry)));
                continue;
            }
            let step = candidate.dispatch.take(
                request.holder.clone(),
                now,
                expires_at,
                request.max_failures,
            );
            match step {
                ClaimStep::Claim => cursor_rows::save_claim(tx, &candidate)?,
                ClaimStep::DeadLetter => {
                    release_head_pins(tx, &candidate)?;
                    cursor_rows::save(tx, &candidate)?;
                }
            }
            let head = candidate.to_head(tx, session)?;
            match step {
                ClaimStep::Claim => {
                    heads.push(head);
                    if heads.len() >= limit {
                        break 'walk;
                    }
                }
                ClaimStep::DeadLetter => dead_lettered.push(head),
            }
        }
        if last_page {
            break;
        }
    }
    if !heads.is_empty() || !dead_lettered.is_empty() {
        heads.sort_by(compare_heads);
        dead_lettered.sort_by(compare_heads);
        return Ok(ClaimResult::Claimed {
            heads,
            dead_lettered,
            head: session.head,
        });
    }
    let busy = earliest_busy(tx, session, now, through, &filter, &pauses)?;
    let retry_at = match (busy, early_busy) {
        (Some(busy), Some(early)) => Some(busy.min(early)),
        (busy, early) => busy.or(early),
    };
    match retry_at {
        Some(retry_at) => Ok(ClaimResult::Busy { retry_at }),
        None => Ok(ClaimResult::Settled),
    }
}

/// Moves the busy heads whose claim or retry delay expired at or before
/// `now` back to the ready heads (each is promoted once, in expiry order).
fn promote_expired(tx: &Connection, session: &SessionRow, now: i64) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE cursors INDEXED BY cursors_busy SET expired = 1 WHERE sid = ?1 \
         AND head IS NOT NULL AND failed_at IS NULL AND claim_expires_at IS NOT NULL \
         AND expired = 0 AND claim_expires_at <= ?2",
    )
    .and_then(|mut stmt| stmt.execute((session.sid, now)))
    .ctx("promoting expired claims")?;
    Ok(())
}

/// The next page of ready heads (head set, not dead-lettered, idle or
/// promoted, head within `through`) after the key `after`, in claim order.
fn ready_page(
    tx: &Connection,
    session: &SessionRow,
    through: SqlIndex,
    after: &(SqlIndex, String, String),
    want: usize,
) -> Result<Vec<CursorRow>, StoreError> {
    let mut stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors INDEXED BY cursors_ready WHERE sid = ?1 AND head IS NOT NULL \
             AND failed_at IS NULL AND (claim_expires_at IS NULL OR expired = 1) \
             AND head <= ?2 AND (head, consumer, lane) > (?3, ?4, ?5) \
             ORDER BY head, consumer, lane LIMIT ?6"
        ))
        .ctx("finding claimable heads")?;
    let mut rows = stmt
        .query(rusqlite::params![
            session.sid,
            through,
            after.0,
            after.1,
            after.2,
            SqlLimit(Some(want))
        ])
        .ctx("finding claimable heads")?;
    let mut page = Vec::new();
    while let Some(row) = rows.next().ctx("finding claimable heads")? {
        page.push(cursor_rows::decode(row)?);
    }
    Ok(page)
}

/// The earliest expiry among busy served candidates, by the expiry index,
/// under the session's `pauses`: a head paused until resumed is skipped, one
/// paused until a time is busy until then at least. Without pauses the
/// first admitted head is the earliest; with some, every busy head is read.
fn earliest_busy(
    tx: &Connection,
    session: &SessionRow,
    now: i64,
    through: SqlIndex,
    filter: &Filter,
    pauses: &[Pause],
) -> Result<Option<i64>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT consumer, lane, ev_index, claim_expires_at FROM cursors INDEXED BY cursors_busy \
             WHERE sid = ?1 AND head IS NOT NULL AND failed_at IS NULL \
             AND claim_expires_at IS NOT NULL AND expired = 0 AND claim_expires_at > ?2 \
             AND head <= ?3 ORDER BY claim_expires_at",
        )
        .ctx("finding busy heads")?;
    let mut rows = stmt
        .query((session.sid, now, through))
        .ctx("finding busy heads")?;
    let mut earliest: Option<i64> = None;
    while let Some(row) = rows.next().ctx("finding busy heads")? {
        let consumer: String = row.get(0).ctx("finding busy heads")?;
        let lane: String = row.get(1).ctx("finding busy heads")?;
        let ev_index: SqlIndex = row.get(2).ctx("finding busy heads")?;
        let expiry: i64 = row.get(3).ctx("finding busy heads")?;
        let lane = (!lane.is_empty()).then_some(lane.as_str());
        if !filter.admits(&consumer, lane, ev_index.get()) {
            continue;
        }
        if pauses.is_empty() {
            return Ok(Some(expiry));
        }
        let held = hold(pauses, &consumer, &session.name, now);
        if held.hides() {
            continue;
        }
        let own = Dispatch::leased_until(Some(expiry));
        if let Some(until) = own.busy_until_held(now, held) {
            earliest = Some(earliest.map_or(until, |early| early.min(until)));
        }
    }
    Ok(earliest)
}
