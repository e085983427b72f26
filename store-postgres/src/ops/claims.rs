//! `claim_available`. A claim takes no session lock: it locks only the
//! cursor rows it takes (`SKIP LOCKED`, so concurrent workers pass each
//! other), then reads the clear index. It promotes the busy heads whose
//! expiry passed, then walks only the ready ones (see [`sql`] for the
//! statements and the indexes they use), so the heads other holders have in
//! flight cost it nothing.

mod sql;

use std::collections::BTreeSet;

use a2_store_api::order::compare_heads;
use a2_store_api::{ClaimRequest, ClaimResult, ClaimStep};
use tokio_postgres::types::ToSql;

use crate::cursor_table::{put_all, refresh_log_types, release_pins, served_names};
use crate::db::{bound, execute, query, query_opt, read_session, Tx};
use crate::error::TxResult;
use crate::ops::work::{lock_and_rewrite, lock_rows, rewrite, Rule, Wait};
use crate::rows::{
    clear_of, decode_event, index_of, key_of, CursorKey, CursorRow, CURSOR_COLUMNS, CURSOR_WIDTH,
    EVENT_COLUMNS,
};

/// The heads a claim may take: the parameters `$1` to `$7` of the walk and
/// the `Busy` answer (see [`sql`]).
struct Candidates<'a> {
    session_id: &'a str,
    through: Option<i64>,
    served: Option<Vec<&'a str>>,
    /// The excluded cursors' consumers, lanes and slots.
    consumers: Vec<String>,
    lanes: Vec<String>,
    slots: Vec<i64>,
    now: i64,
}

impl<'a> Candidates<'a> {
    fn new(request: &'a ClaimRequest, now: i64) -> Self {
        let mut candidates = Self {
            session_id: &request.session_id,
            through: request.through.map(bound),
            served: served_names(request.consumers.as_deref()),
            consumers: Vec::with_capacity(request.exclude.len()),
            lanes: Vec::with_capacity(request.exclude.len()),
            slots: Vec::with_capacity(request.exclude.len()),
            now,
        };
        // An event cursor beyond any index cannot exist: nothing to exclude.
        let excluded = request
            .exclude
            .iter()
            .filter_map(|r| key_of(&r.consumer, r.lane.as_deref(), r.index));
        for key in excluded {
            candidates.exclude(key);
        }
        candidates
    }

    /// Leaves the cursor `key` out of every later statement.
    fn exclude(&mut self, (consumer, lane, slot): CursorKey) {
        self.consumers.push(consumer);
        self.lanes.push(lane);
        self.slots.push(slot);
    }

    /// The bound parameters, then `limit` (the walk's `$8`) when given.
    fn params<'p>(&'p self, limit: Option<&'p Option<i64>>) -> Vec<&'p (dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &self.session_id,
            &self.through,
            &self.served,
            &self.consumers,
            &self.lanes,
            &self.slots,
            &self.now,
        ];
        if let Some(limit) = limit {
            params.push(limit);
        }
        params
    }
}

/// The body of [`Store::claim_available`](a2_store_api::Store::claim_available)
/// for a validated request, with `now` and the lease `expires_at`. After
/// the claim, the served consumers' work rows (every row of the session
/// when no consumers are given) are locked, waiting for them (every cursor
/// lock is taken by then, see `ops::work`), and rewritten to what is left.
pub(crate) async fn claim(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
) -> TxResult<ClaimResult> {
    let session_id = request.session_id.as_str();
    // Promote before the walk, so it sees the heads whose claim ran out.
    // Independent of the type refresh: pipelined.
    futures::try_join!(
        refresh_log_types(tx, session_id, request.consumers.as_deref()),
        promote(tx, session_id, now),
    )?;
    let result = take(tx, request, now, expires_at).await?;
    let served = served_list(request);
    lock_and_rewrite(tx, session_id, served.as_deref(), now, Rule::Served).await?;
    Ok(result)
}

/// One session's claim of [`Store::claim_work`](a2_store_api::Store::claim_work)
/// (`WorkSource::claim_session`): [`claim`], but the served consumers' work
/// rows are locked first without waiting, and when another transaction
/// holds one (a claimer or writer on this session's work) the session is
/// left to it: `Settled`, nothing changed. The only lock a claim may wait
/// for, the log type refresh's, is taken before them.
pub(crate) async fn claim_session(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
) -> TxResult<ClaimResult> {
    let session_id = request.session_id.as_str();
    refresh_log_types(tx, session_id, request.consumers.as_deref()).await?;
    let served = served_list(request);
    let Some(locked) = lock_rows(tx, session_id, served.as_deref(), Wait::Skip).await? else {
        return Ok(ClaimResult::Settled);
    };
    promote(tx, session_id, now).await?;
    let result = take(tx, request, now, expires_at).await?;
    rewrite(
        tx,
        session_id,
        served.as_deref(),
        &locked,
        now,
        Rule::Served,
    )
    .await?;
    Ok(result)
}

/// The consumer names a claim serves, sorted, without repeats (`None`: every one).
fn served_list(request: &ClaimRequest) -> Option<Vec<String>> {
    request.consumers.as_ref().map(|consumers| {
        let names: BTreeSet<String> = consumers.iter().map(|c| c.name.clone()).collect();
        names.into_iter().collect()
    })
}

/// The walk of a claim after promotion: takes the free heads up to the
/// limit and answers as `claim_available` does.
async fn take(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
) -> TxResult<ClaimResult> {
    let session_id = request.session_id.as_str();
    let mut candidates = Candidates::new(request, now);
    let walk = sql::walk(&format!("{CURSOR_COLUMNS}, {EVENT_COLUMNS}"));
    let mut heads = Vec::new();
    let mut dead_lettered = Vec::new();
    // Lock only as many heads as the limit still needs (dead letters do not
    // count, so fetch again after them), lowest first; heads other claimers
    // hold are skipped, so workers pass each other.
    loop {
        let wanted = request
            .limit
            .map(|limit| i64::try_from(limit.saturating_sub(heads.len())).unwrap_or(i64::MAX));
        let rows = query(tx, &walk, &candidates.params(Some(&wanted))).await?;
        let mut claimable = Vec::with_capacity(rows.len());
        for row in &rows {
            let cursor = CursorRow::decode(row, 0)?;
            let event = decode_event(row, CURSOR_WIDTH, session_id)?;
            claimable.push((cursor, event));
        }
        claimable.sort_by(|(a, _), (b, _)| {
            (a.head, &a.consumer, &a.lane).cmp(&(b.head, &b.consumer, &b.lane))
        });
        let mut changed = Vec::with_capacity(claimable.len());
        let mut dead_now = 0;
        for (mut cursor, event) in claimable {
            // Never visit a head twice in this call (a lease may already be
            // over when `expires_at_ms` is in the past).
            candidates.exclude(cursor.key());
            // The walk's `FREE` is this rule: only heads free at `now` come back.
            debug_assert_eq!(cursor.dispatch.busy_until(now), None);
            let holder = request.holder.clone();
            let step = cursor
                .dispatch
                .take(holder, now, expires_at, request.max_failures);
            let head = cursor.to_head(event, 0)?;
            match step {
                ClaimStep::Claim => heads.push(head),
                ClaimStep::DeadLetter => {
                    release_pins(tx, session_id, &cursor).await?;
                    dead_lettered.push(head);
                    dead_now += 1;
                }
            }
            changed.push(cursor);
        }
        put_all(tx, session_id, &changed).await?;
        // Without a limit one pass took every candidate; with one, fetch
        // again only when dead letters used up part of the rows fetched.
        let full = wanted.is_some_and(|wanted| i64::try_from(rows.len()).unwrap_or(0) >= wanted);
        if wanted.is_none() || dead_now == 0 || !full {
            break;
        }
    }
    if !heads.is_empty() || !dead_lettered.is_empty() {
        // Read after the heads are locked: any clear that touched them has
        // committed, so the clear index reported is the one they live under.
        let state = read_session(tx, session_id).await?;
        let clear_index = clear_of(state.clear)?;
        for head in heads.iter_mut().chain(dead_lettered.iter_mut()) {
            head.clear_index = clear_index;
        }
        heads.sort_by(compare_heads);
        dead_lettered.sort_by(compare_heads);
        return Ok(ClaimResult::Claimed {
            heads,
            dead_lettered,
            head: index_of(state.head)?,
        });
    }
    // Nothing taken: busy heads free at their expiry; a head another
    // transaction holds locked right now may free now.
    let busy = query_opt(tx, &sql::retry_at(), &candidates.params(None)).await?;
    let retry_at: Option<i64> = match busy {
        Some(row) => row.try_get(0)?,
        None => None,
    };
    Ok(match retry_at {
        Some(retry_at) => ClaimResult::Busy { retry_at },
        None => ClaimResult::Settled,
    })
}

/// Moves the session's busy heads whose expiry passed by `now` to the ready
/// heads (see [`sql::DUE`]). Nothing is written when none is due, the usual
/// case.
async fn promote(tx: &Tx<'_>, session_id: &str, now: i64) -> TxResult<()> {
    let due = query(tx, sql::DUE, &[&session_id, &now]).await?;
    if due.is_empty() {
        return Ok(());
    }
    let mut consumers = Vec::with_capacity(due.len());
    let mut lanes = Vec::with_capacity(due.len());
    let mut slots = Vec::with_capacity(due.len());
    for row in &due {
        consumers.push(row.try_get::<_, String>(0)?);
        lanes.push(row.try_get::<_, String>(1)?);
        slots.push(row.try_get::<_, i64>(2)?);
    }
    execute(tx, sql::PROMOTE, &[&session_id, &consumers, &lanes, &slots]).await?;
    Ok(())
}
