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

use a2_store_api::Head;
use tokio_postgres::Row;

use crate::cursor_table::{
    refresh_log_types, served_names, CursorWrites, TypeRefresh, PUT_ALL, REFRESH_TYPES,
    RELEASE_PINS,
};
use crate::db::{bound, decode_state, execute, query, SessionState, Stmt, Tx, READ_SESSION};
use crate::error::TxResult;
use crate::ops::work::{
    lock_rows, rewrite, rewrite_now, rewritten, RewriteArgs, Rule, Wait, REWRITE,
};
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
///
/// Two round trips: `BEGIN`, the log type refresh, the promotion's
/// selection of due heads and the walk go in one; the cursor writes, the
/// session read (or the `Busy` answer), the work rewrite and `COMMIT` in
/// the other. Only when heads are due (a lease or retry delay ran out) are
/// they promoted and the walk run again, and only when dead letters used up
/// the rows a limited walk fetched is it run once more.
pub(crate) async fn claim(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
) -> TxResult<ClaimResult> {
    let session_id = request.session_id.as_str();
    let candidates = Candidates::new(request, now);
    let walk = walk_sql();
    let wanted = wanted(request, 0);
    let refresh = TypeRefresh::new(session_id, request.consumers.as_deref());
    let refresh_params = refresh.params();
    let due_params: [&(dyn ToSql + Sync); 2] = [&session_id, &now];
    let walk_params = candidates.params(Some(&wanted));
    let mut statements: Vec<Stmt<'_>> = refresh_params
        .iter()
        .map(|params| Stmt::new(REFRESH_TYPES, params))
        .collect();
    statements.push(Stmt::new(sql::DUE, &due_params));
    statements.push(Stmt::new(&walk, &walk_params));
    let mut answers = tx.pipeline(&statements).await?;
    let walked = answers.pop().unwrap_or_default();
    let due = answers.pop().unwrap_or_default();
    drop(walk_params);
    let walked = if due.is_empty() {
        walked
    } else {
        // Heads ran out: promote them and walk again, so the walk sees them.
        // The first walk's rows stay locked until the commit (they are
        // candidates again, so this walk may take them).
        promote_rows(tx, session_id, &due).await?;
        query(tx, &walk, &candidates.params(Some(&wanted))).await?
    };
    let taken = take(tx, request, candidates, walked, now, expires_at).await?;
    let served = served_list(request);
    let rewrite = RewriteArgs::new(session_id, served.as_deref(), now, Rule::Served);
    let (result, _) = taken.finish(tx, request, Some(&rewrite)).await?;
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
    let candidates = Candidates::new(request, now);
    let walked = query(
        tx,
        &walk_sql(),
        &candidates.params(Some(&wanted(request, 0))),
    )
    .await?;
    let taken = take(tx, request, candidates, walked, now, expires_at).await?;
    let (result, _) = taken.finish(tx, request, None).await?;
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

/// The walk's statement with the columns a claim decodes.
fn walk_sql() -> String {
    sql::walk(&format!("{CURSOR_COLUMNS}, {EVENT_COLUMNS}"))
}

/// The walk's limit once `taken` heads are taken (`None`: no limit).
fn wanted(request: &ClaimRequest, taken: usize) -> Option<i64> {
    request
        .limit
        .map(|limit| i64::try_from(limit.saturating_sub(taken)).unwrap_or(i64::MAX))
}

/// What a claim's walks took, written by [`Taken::finish`].
struct Taken<'r> {
    candidates: Candidates<'r>,
    heads: Vec<Head>,
    dead_lettered: Vec<Head>,
    /// Every cursor whose bookkeeping the claim changed.
    changed: Vec<CursorRow>,
    /// The keys of the cursors dead-lettered, whose pins are released.
    released: Vec<CursorKey>,
}

/// The walks of a claim after promotion (`walked`: the first walk's rows):
/// decides each free head's step (`Dispatch::take`), walking again only
/// when dead letters used up the rows a limited walk fetched. Nothing is
/// written yet.
async fn take<'r>(
    tx: &Tx<'_>,
    request: &'r ClaimRequest,
    mut candidates: Candidates<'r>,
    mut walked: Vec<Row>,
    now: i64,
    expires_at: i64,
) -> TxResult<Taken<'r>> {
    let session_id = request.session_id.as_str();
    let mut heads = Vec::new();
    let mut dead_lettered = Vec::new();
    let mut changed = Vec::new();
    let mut released = Vec::new();
    // Lock only as many heads as the limit still needs (dead letters do not
    // count, so fetch again after them), lowest first; heads other claimers
    // hold are skipped, so workers pass each other.
    loop {
        let fetched = wanted(request, heads.len());
        let mut claimable = Vec::with_capacity(walked.len());
        for row in &walked {
            let cursor = CursorRow::decode(row, 0)?;
            let event = decode_event(row, CURSOR_WIDTH, session_id)?;
            claimable.push((cursor, event));
        }
        claimable.sort_by(|(a, _), (b, _)| {
            (a.head, &a.consumer, &a.lane).cmp(&(b.head, &b.consumer, &b.lane))
        });
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
                    released.push(cursor.key());
                    dead_lettered.push(head);
                    dead_now += 1;
                }
            }
            changed.push(cursor);
        }
        // Without a limit one pass took every candidate; with one, fetch
        // again only when dead letters used up part of the rows fetched.
        let full =
            fetched.is_some_and(|fetched| i64::try_from(walked.len()).unwrap_or(0) >= fetched);
        if fetched.is_none() || dead_now == 0 || !full {
            break;
        }
        let again = wanted(request, heads.len());
        walked = query(tx, &walk_sql(), &candidates.params(Some(&again))).await?;
    }
    Ok(Taken {
        candidates,
        heads,
        dead_lettered,
        changed,
        released,
    })
}

impl Taken<'_> {
    /// Writes what the claim took and answers as `claim_available` does:
    /// the dead letters' pins released, the changed cursors stored, then
    /// the session row read (after the heads are locked: any clear that
    /// touched them has committed, so the clear index reported is the one
    /// they live under) or, when nothing was taken, the `Busy` answer. With
    /// `rewrite`, the work rewrite follows and the transaction commits, all
    /// in one round trip; without, the caller continues the transaction.
    /// Also returns whether the rewrite made a row ready sooner.
    async fn finish(
        mut self,
        tx: &Tx<'_>,
        request: &ClaimRequest,
        rewrite: Option<&RewriteArgs<'_>>,
    ) -> TxResult<(ClaimResult, bool)> {
        let session_id = request.session_id.as_str();
        let pins: Vec<[&(dyn ToSql + Sync); 4]> = self
            .released
            .iter()
            .map(|(consumer, lane, slot)| {
                let params: [&(dyn ToSql + Sync); 4] = [&request.session_id, consumer, lane, slot];
                params
            })
            .collect();
        let mut statements: Vec<Stmt<'_>> = pins
            .iter()
            .map(|params| Stmt::new(RELEASE_PINS, params))
            .collect();
        let writes = CursorWrites::new(session_id, &self.changed);
        let write_params = writes.as_ref().map(CursorWrites::params);
        if let Some(params) = &write_params {
            statements.push(Stmt::new(PUT_ALL, params));
        }
        let took = !self.heads.is_empty() || !self.dead_lettered.is_empty();
        let session_params: [&(dyn ToSql + Sync); 1] = [&request.session_id];
        let retry_sql = sql::retry_at();
        let retry_params = self.candidates.params(None);
        if took {
            statements.push(Stmt::new(READ_SESSION, &session_params));
        } else {
            statements.push(Stmt::new(&retry_sql, &retry_params));
        }
        let rewrite_params = rewrite.map(RewriteArgs::params);
        if let Some(params) = &rewrite_params {
            statements.push(Stmt::new(REWRITE, params));
        }
        let mut answers = if rewrite.is_some() {
            tx.commit_with(&statements).await?
        } else {
            tx.pipeline(&statements).await?
        };
        let sooner = match rewrite {
            Some(rewrite) => rewritten(
                &answers.pop().unwrap_or_default(),
                rewrite_now(rewrite),
                Rule::Served,
            )?,
            None => false,
        };
        let answer = answers.pop().unwrap_or_default();
        let row = answer.first();
        if took {
            let state = match row {
                Some(row) => decode_state(row)?,
                None => SessionState::default(),
            };
            let clear_index = clear_of(state.clear)?;
            for head in self.heads.iter_mut().chain(self.dead_lettered.iter_mut()) {
                head.clear_index = clear_index;
            }
            self.heads.sort_by(compare_heads);
            self.dead_lettered.sort_by(compare_heads);
            return Ok((
                ClaimResult::Claimed {
                    heads: self.heads,
                    dead_lettered: self.dead_lettered,
                    head: index_of(state.head)?,
                },
                sooner,
            ));
        }
        // Nothing taken: busy heads free at their expiry; a head another
        // transaction holds locked right now may free now.
        let retry_at: Option<i64> = match row {
            Some(row) => row.try_get(0)?,
            None => None,
        };
        let result = match retry_at {
            Some(retry_at) => ClaimResult::Busy { retry_at },
            None => ClaimResult::Settled,
        };
        Ok((result, sooner))
    }
}

/// Moves the session's busy heads whose expiry passed by `now` to the ready
/// heads (see [`sql::DUE`]). Nothing is written when none is due, the usual
/// case.
async fn promote(tx: &Tx<'_>, session_id: &str, now: i64) -> TxResult<()> {
    let due = query(tx, sql::DUE, &[&session_id, &now]).await?;
    promote_rows(tx, session_id, &due).await
}

/// Marks the heads [`sql::DUE`] selected (`due`, locked) as promoted.
async fn promote_rows(tx: &Tx<'_>, session_id: &str, due: &[Row]) -> TxResult<()> {
    if due.is_empty() {
        return Ok(());
    }
    let mut consumers = Vec::with_capacity(due.len());
    let mut lanes = Vec::with_capacity(due.len());
    let mut slots = Vec::with_capacity(due.len());
    for row in due {
        consumers.push(row.try_get::<_, String>(0)?);
        lanes.push(row.try_get::<_, String>(1)?);
        slots.push(row.try_get::<_, i64>(2)?);
    }
    execute(tx, sql::PROMOTE, &[&session_id, &consumers, &lanes, &slots]).await?;
    Ok(())
}
