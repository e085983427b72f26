//! `claim_available` and `renew_claims`: handing out heads under leases.

use std::collections::{HashSet, VecDeque};

use a2_store_api::codec::{
    compare_heads, compare_refs, lease_expiry, validate_consumers, validate_name,
    validate_session_id,
};
use a2_store_api::{
    ClaimRequest, ClaimResult, ConsumerDeclaration, CursorRef, Head, RenewRequest, RenewResult,
    StoreError,
};
use rusqlite::Connection;

use crate::cursor::{self, cursor_columns, dead_letter, refresh_log_types, CursorRow};
use crate::errors::SqlContext;
use crate::pool::Ctx;
use crate::session::{self, SessionRow};

/// How many candidate cursors one query fetches while walking claimable heads.
const PAGE: i64 = 256;

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

/// Validates a claim request before any database work.
pub(crate) fn validate_claim(request: &ClaimRequest) -> Result<(), StoreError> {
    validate_session_id(&request.session_id)?;
    validate_name("holder", &request.holder)?;
    validate_consumers(request.consumers.as_deref(), &[])?;
    lease_expiry(0, request.ttl_ms, request.expires_at_ms)?;
    if request.limit == Some(0) {
        return Err(StoreError::invalid_input(
            "claim limit is 0: pass at least 1, or no limit",
        ));
    }
    Ok(())
}

/// The claim-order key of a cursor's head: `(index, consumer, lane)`, no lane first.
type HeadKey = (u64, String, String);

fn key_of(cursor: &CursorRow) -> HeadKey {
    (
        cursor.head.unwrap_or_default(),
        cursor.consumer.clone(),
        cursor.lane.clone().unwrap_or_default(),
    )
}

/// Claims every claimable head of the served cursors in `(index, consumer,
/// lane)` order, up to `limit`, counting expired claims as failures first.
///
/// Claimable heads come from two places: idle heads (never claimed, or
/// released without a retry delay), walked in claim order on the
/// `cursors_ready` index page by page, and heads whose claim or retry delay
/// has expired, read by expiry from `cursors_busy`. Heads still busy are in
/// neither, so work in flight costs a claim nothing.
pub(crate) fn claim(
    tx: &Connection,
    ctx: &Ctx,
    request: &ClaimRequest,
) -> Result<ClaimResult, StoreError> {
    let now = ctx.clock.now_ms();
    let expires_at = lease_expiry(now, request.ttl_ms, request.expires_at_ms)?;
    let Some(session) = session::find(tx, &request.session_id)? else {
        return Ok(ClaimResult::Settled);
    };
    refresh_log_types(tx, &session, request.consumers.as_deref())?;
    let filter = Filter::new(request.consumers.as_deref(), &request.exclude);
    let admits = |cursor: &CursorRow| {
        filter.admits(&cursor.consumer, cursor.lane.as_deref(), cursor.ev_index)
    };
    let through = request.through.map_or(i64::MAX, |through| {
        i64::try_from(through).unwrap_or(i64::MAX)
    });
    let limit = request.limit.unwrap_or(usize::MAX);
    let mut expired: Vec<CursorRow> = expired_heads(tx, &session, now, through)?;
    expired.retain(|cursor| admits(cursor));
    expired.sort_by_key(key_of);
    let mut expired: VecDeque<CursorRow> = expired.into();
    let mut claimed = Claimed::default();
    let take_one = |mut candidate: CursorRow, claimed: &mut Claimed| {
        let head_taken = take(
            tx,
            &mut candidate,
            &request.holder,
            now,
            expires_at,
            request.max_failures,
        )?;
        let head = candidate.to_head(tx, &session)?;
        if head_taken {
            claimed.heads.push(head);
        } else {
            claimed.dead_lettered.push(head);
        }
        Ok::<_, StoreError>(())
    };
    // Keyset walk over the idle heads, merged with the expired ones; rows
    // are updated between pages, never while a page's statement is open.
    let mut after: (i64, String, String) = (-1, String::new(), String::new());
    let mut idle_done = false;
    'walk: while claimed.heads.len() < limit {
        let page = if idle_done {
            Vec::new()
        } else {
            // No more rows than claims still allowed (dead letters and
            // filtered cursors just lead to another page).
            let left = limit - claimed.heads.len();
            let want = i64::try_from(left).map_or(PAGE, |want| want.clamp(1, PAGE));
            let page = idle_page(tx, &session, through, &after, want)?;
            idle_done = page.len() < usize::try_from(want).unwrap_or(usize::MAX);
            page
        };
        if page.is_empty() {
            while claimed.heads.len() < limit {
                let Some(candidate) = expired.pop_front() else {
                    break 'walk;
                };
                take_one(candidate, &mut claimed)?;
            }
            break;
        }
        for candidate in page {
            let key = key_of(&candidate);
            while expired.front().is_some_and(|first| key_of(first) < key) {
                if let Some(first) = expired.pop_front() {
                    take_one(first, &mut claimed)?;
                }
                if claimed.heads.len() >= limit {
                    break 'walk;
                }
            }
            after = (i64::try_from(key.0).unwrap_or(i64::MAX), key.1, key.2);
            if !admits(&candidate) {
                continue;
            }
            take_one(candidate, &mut claimed)?;
            if claimed.heads.len() >= limit {
                break 'walk;
            }
        }
    }
    let Claimed {
        mut heads,
        mut dead_lettered,
    } = claimed;
    if !heads.is_empty() || !dead_lettered.is_empty() {
        heads.sort_by(compare_heads);
        dead_lettered.sort_by(compare_heads);
        return Ok(ClaimResult::Claimed {
            heads,
            dead_lettered,
            head: session.head,
        });
    }
    match earliest_busy(tx, &session, now, through, &filter)? {
        Some(retry_at) => Ok(ClaimResult::Busy { retry_at }),
        None => Ok(ClaimResult::Settled),
    }
}

/// What one claim call handed out.
#[derive(Default)]
struct Claimed {
    heads: Vec<Head>,
    dead_lettered: Vec<Head>,
}

/// The next page of idle heads (head set, not dead-lettered, no claim
/// expiry, head within `through`) after the key `after`, in claim order.
fn idle_page(
    tx: &Connection,
    session: &SessionRow,
    through: i64,
    after: &(i64, String, String),
    want: i64,
) -> Result<Vec<CursorRow>, StoreError> {
    let mut stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors INDEXED BY cursors_ready WHERE sid = ?1 AND head IS NOT NULL \
             AND failed_at IS NULL AND claim_expires_at IS NULL AND head <= ?2 \
             AND (head, consumer, lane) > (?3, ?4, ?5) \
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
            want
        ])
        .ctx("finding claimable heads")?;
    let mut page = Vec::new();
    while let Some(row) = rows.next().ctx("finding claimable heads")? {
        page.push(cursor::decode(row)?);
    }
    Ok(page)
}

/// Heads whose claim or retry delay expired at or before `now` (claimable
/// again), by the expiry index.
fn expired_heads(
    tx: &Connection,
    session: &SessionRow,
    now: i64,
    through: i64,
) -> Result<Vec<CursorRow>, StoreError> {
    let mut stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            cursor_columns!(),
            " FROM cursors INDEXED BY cursors_busy WHERE sid = ?1 AND head IS NOT NULL \
             AND failed_at IS NULL AND claim_expires_at IS NOT NULL \
             AND claim_expires_at <= ?2 AND head <= ?3"
        ))
        .ctx("finding expired claims")?;
    let mut rows = stmt
        .query((session.sid, now, through))
        .ctx("finding expired claims")?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().ctx("finding expired claims")? {
        found.push(cursor::decode(row)?);
    }
    Ok(found)
}

/// Claims one head for `holder` and saves it. An expired claim still held
/// counts a failure first; reaching `max_failures` dead-letters the head
/// instead (returns `false`).
fn take(
    tx: &Connection,
    cursor: &mut CursorRow,
    holder: &str,
    now: i64,
    expires_at: i64,
    max_failures: Option<u32>,
) -> Result<bool, StoreError> {
    let dispatch = &mut cursor.dispatch;
    if dispatch.claim_holder.is_some() {
        dispatch.failure_count = dispatch.failure_count.saturating_add(1);
        if max_failures.is_some_and(|max| dispatch.failure_count >= max) {
            dispatch.attempt_count = dispatch.attempt_count.saturating_add(1);
            dispatch.claim_holder = None;
            dispatch.claim_expires_at = None;
            dead_letter(tx, cursor, now)?;
            cursor::save(tx, cursor)?;
            return Ok(false);
        }
    }
    dispatch.attempt_count = dispatch.attempt_count.saturating_add(1);
    dispatch.first_claimed_at.get_or_insert(now);
    dispatch.last_claimed_at = Some(now);
    dispatch.claim_holder = Some(holder.to_owned());
    dispatch.claim_expires_at = Some(expires_at);
    cursor::save_claim(tx, cursor)?;
    Ok(true)
}

/// The earliest expiry among busy served candidates, by the expiry index.
fn earliest_busy(
    tx: &Connection,
    session: &SessionRow,
    now: i64,
    through: i64,
    filter: &Filter,
) -> Result<Option<i64>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT consumer, lane, ev_index, claim_expires_at FROM cursors INDEXED BY cursors_busy \
             WHERE sid = ?1 AND head IS NOT NULL AND failed_at IS NULL \
             AND claim_expires_at IS NOT NULL AND claim_expires_at > ?2 AND head <= ?3 \
             ORDER BY claim_expires_at",
        )
        .ctx("finding busy heads")?;
    let mut rows = stmt
        .query((session.sid, now, through))
        .ctx("finding busy heads")?;
    while let Some(row) = rows.next().ctx("finding busy heads")? {
        let consumer: String = row.get(0).ctx("finding busy heads")?;
        let lane: String = row.get(1).ctx("finding busy heads")?;
        let ev_index: i64 = row.get(2).ctx("finding busy heads")?;
        let expiry: i64 = row.get(3).ctx("finding busy heads")?;
        let lane = (!lane.is_empty()).then_some(lane.as_str());
        if filter.admits(&consumer, lane, u64::try_from(ev_index).unwrap_or_default()) {
            return Ok(Some(expiry));
        }
    }
    Ok(None)
}

/// Validates a renew request before any database work.
pub(crate) fn validate_renew(request: &RenewRequest) -> Result<(), StoreError> {
    validate_session_id(&request.session_id)?;
    validate_name("holder", &request.holder)?;
    lease_expiry(0, request.ttl_ms, request.expires_at_ms).map(|_| ())
}

/// Extends the leases `holder` still holds; reports claims that can never complete.
pub(crate) fn renew(
    tx: &Connection,
    ctx: &Ctx,
    request: &RenewRequest,
) -> Result<RenewResult, StoreError> {
    let now = ctx.clock.now_ms();
    let expires_at = lease_expiry(now, request.ttl_ms, request.expires_at_ms)?;
    let session = session::find(tx, &request.session_id)?;
    let clear = session.as_ref().map_or(0, |session| session.clear);
    let mut claims = request.claims.clone();
    claims.sort_by(|a, b| compare_refs(&a.cursor, &b.cursor));
    let mut result = RenewResult::default();
    for claim in claims {
        let r = claim.cursor;
        if r.index <= clear {
            result.superseded.push(r);
            continue;
        }
        let Some(session) = &session else { continue };
        let Some(mut found) = cursor::find(tx, session, &r.consumer, r.lane.as_deref(), r.index)?
        else {
            continue;
        };
        if found.head != Some(r.index) && found.position < r.index {
            continue;
        }
        if found.head != Some(r.index) || found.dispatch.attempt_count > claim.attempt {
            result.superseded.push(r);
            continue;
        }
        let d = &mut found.dispatch;
        let held = d.failed_at.is_none()
            && d.claim_holder.as_deref() == Some(request.holder.as_str())
            && d.claim_expires_at.is_some_and(|expiry| expiry > now);
        if held {
            d.claim_expires_at = Some(expires_at);
            cursor::save_claim(tx, &found)?;
            result.renewed.push(r);
        }
    }
    Ok(result)
}
