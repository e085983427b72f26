//! `claim_available`. A claim takes no session lock: it locks only the
//! cursor rows it takes (`SKIP LOCKED`, so concurrent workers pass each
//! other), then reads the clear index. It promotes the busy heads whose
//! expiry passed, then walks only the ready ones (see [`sql`] for the
//! statements and the indexes they use), so the heads other holders have in
//! flight cost it nothing.

mod batch;
pub(crate) mod claimed;
mod served;
mod sql;

pub(crate) use batch::{claim_next_many, Wanted};

use std::collections::BTreeSet;

use a2_store_api::order::compare_heads;
use a2_store_api::sql::from_sql_int;
use a2_store_api::work::{WorkRow, WorkSummary};
use a2_store_api::{ClaimRequest, ClaimResult, ClaimStep, ClaimWorkRequest};
use tokio_postgres::types::ToSql;

use a2_store_api::Head;
use tokio_postgres::Row;

use crate::cursor_table::{
    served_names, CursorWrites, TypeRefresh, PUT_ALL, REFRESH_TYPES, RELEASE_PINS,
};
use crate::db::{bound, decode_state, execute, query, SessionState, Stmt, Tx, READ_SESSION};
use crate::error::TxResult;
use crate::ops::work::{rewrite_now, rewritten, RewriteArgs, Rule, TryLocked, REWRITE, TRY_LOCK};
use crate::rows::{
    clear_of, decode_event, index_of, key_of, CursorKey, CursorRow, CURSOR_COLUMNS, CURSOR_WIDTH,
    EVENT_COLUMNS,
};
use claimed::Claimed;

/// The heads a claim may take: the parameters `$1` to `$7` of the walk and
/// the `Busy` answer (see [`sql`]).
struct Candidates<'a> {
    /// The session (`claim_work`'s batch claim binds the picked sessions
    /// in its place, `batch`).
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
///
/// When the store's last claim of the session (with the same consumers)
/// took nothing ([`Hint::NothingTaken`]), the due selection, the walk and
/// the empty claim's answer ([`sql::empty_answer`]) first run as a probe
/// outside any transaction ([`Tx::pipeline_alone`]): one round trip, and
/// the answer, when it finds nothing and has nothing to write (no head
/// due, none walked, and the work rewrite would store the rows already
/// stored: `WorkSummary::served_row` of each served pair's summary is its
/// row). No transaction is left to end and no lock outlives its statement,
/// so the caller's next call (on any pooled connection) sees every row as
/// it was. A probe that finds something costs that one round trip more, and
/// the claim runs as above; claims that find work do not pay for the probe.
///
/// When that last claim found no work row with a time at all
/// ([`Hint::NoWork`]: nothing claimable, busy or scheduled), the claim
/// first reads only that ([`sql::ANY_WORK`], one index probe, outside any
/// transaction): still none, and the answer is `Settled` at once, one
/// small round trip; some, and the claim runs as above (one round trip
/// more, once, when work arrives). By the work index's invariant (every
/// live head's pair has a row with a time: `ready_at` no later than when
/// it is claimable, or its expiry while busy) no row means no head to
/// claim or wait for, and the rewrite of rows that do not exist has
/// nothing to change. Declared log consumers, whose types a claim
/// refreshes (a write), always take the full path.
pub(crate) async fn claim(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
    hints: &Hints,
    claimed: &Claimed,
) -> TxResult<ClaimResult> {
    let session_id = request.session_id.as_str();
    let candidates = Candidates::new(request, now);
    let refresh = TypeRefresh::new(session_id, request.consumers.as_deref());
    let refresh_params = refresh.params();
    let key = Hints::key(session_id, candidates.served.as_deref());
    let hint = if refresh_params.is_empty() {
        hints.get(key)
    } else {
        None
    };
    if hint == Some(Hint::NoWork) {
        let any = tx
            .query_alone(sql::ANY_WORK, &[&session_id, &candidates.served])
            .await?;
        let any: bool = match any.first() {
            Some(row) => row.try_get(0)?,
            None => false,
        };
        if !any {
            return Ok(ClaimResult::Settled);
        }
    }
    let walk = walk_sql();
    let wanted = wanted(request, 0);
    let due_params: [&(dyn ToSql + Sync); 2] = [&session_id, &now];
    let walk_params = candidates.params(Some(&wanted));
    // The probe of a claim whose last one took nothing runs outside any
    // transaction (a hint is only given when no type is refreshed, so it
    // writes nothing): when it finds nothing the call answers at once,
    // with no transaction to end on the server and no lock left behind.
    if hint.is_some() {
        let empty_params = candidates.params(None);
        let probe = [
            Stmt::new(sql::DUE, &due_params),
            Stmt::new(walk, &walk_params),
            Stmt::new(empty_answer_sql(), &empty_params),
        ];
        let mut answers = tx.pipeline_alone(&probe).await?;
        let empty = answers.pop().unwrap_or_default();
        let walked = answers.pop().unwrap_or_default();
        let due = answers.pop().unwrap_or_default();
        if due.is_empty() && walked.is_empty() {
            if let Some((result, timed)) = settled_empty(&empty, now)? {
                hints.set(
                    key,
                    Some(if timed {
                        Hint::NothingTaken
                    } else {
                        Hint::NoWork
                    }),
                );
                return Ok(result);
            }
        }
        // Something to take or to rewrite: the locks the probe took ended
        // with its statements, so the claim runs again in its transaction.
    }
    let mut statements: Vec<Stmt<'_>> = refresh_params
        .iter()
        .map(|params| Stmt::new(REFRESH_TYPES, params))
        .collect();
    statements.push(Stmt::new(sql::DUE, &due_params));
    statements.push(Stmt::new(walk, &walk_params));
    let mut answers = tx.pipeline(&statements).await?;
    let walked = answers.pop().unwrap_or_default();
    let due = answers.pop().unwrap_or_default();
    drop(walk_params);
    let served = served_list(request);
    let walks = Walks {
        candidates,
        walked,
        due,
    };
    let result = take_and_commit(tx, request, walks, served.as_deref(), now, expires_at)
        .await?
        .remembered_in(claimed, session_id);
    hints.set(
        key,
        match result {
            ClaimResult::Claimed { .. } => None,
            _ => Some(Hint::NothingTaken),
        },
    );
    Ok(result)
}

/// What a store's last claim of a session (with the same served consumers)
/// found, so the next one can skip work that is likely wasted: only ever a
/// guess about cost, never about the answer (every path reads the rows it
/// answers from; a hint of another session, say after a hash collision,
/// only costs a round trip or a statement). At most [`Hints::MOST`] kept,
/// all forgotten when full.
#[derive(Debug, Default)]
pub(crate) struct Hints {
    seen: std::sync::Mutex<std::collections::HashMap<u64, Hint>>,
}

/// See [`Hints`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hint {
    /// The claim took nothing: send the empty claim's answer with the walk.
    NothingTaken,
    /// No served pair had a work row with a time: read only that first.
    NoWork,
}

impl Hints {
    /// The most sessions remembered.
    const MOST: usize = 4096;

    /// The key of a session and its served consumers (`None`: every one).
    fn key(session_id: &str, served: Option<&[&str]>) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        session_id.hash(&mut hasher);
        served.hash(&mut hasher);
        hasher.finish()
    }

    fn get(&self, key: u64) -> Option<Hint> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.get(&key).copied()
    }

    fn set(&self, key: u64, hint: Option<Hint>) {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match hint {
            Some(hint) => {
                if seen.len() >= Self::MOST && !seen.contains_key(&key) {
                    seen.clear();
                }
                seen.insert(key, hint);
            }
            None => {
                seen.remove(&key);
            }
        }
    }
}

/// The answer of a claim that took nothing, from [`sql::empty_answer`]'s
/// rows, when its work rewrite would change no row: `Busy` at the
/// `retry_at` found, else `Settled`, and whether a served pair has a row
/// with a time. `None` when a free candidate was left (another transaction
/// holds it: the claim answers `Busy` now, and its rewrite moves the row)
/// or a served pair's row is not what `WorkSummary::served_row` gives for
/// its heads: the claim goes on to its second round trip.
fn settled_empty(rows: &[Row], now: i64) -> TxResult<Option<(ClaimResult, bool)>> {
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let ready: bool = first.try_get(0)?;
    if ready {
        return Ok(None);
    }
    let mut timed = false;
    for row in rows {
        // No served pair (no consumer named, no work row): nothing to rewrite.
        let Some(_consumer) = row.try_get::<_, Option<String>>(2)? else {
            continue;
        };
        let stored: bool = row.try_get(3)?;
        let ready_at: Option<i64> = row.try_get(4)?;
        let summary = WorkSummary {
            claimable: from_sql_int("claimable heads", row.try_get(5)?)?,
            busy: from_sql_int("busy heads", row.try_get(6)?)?,
            dead_lettered: from_sql_int("dead-lettered heads", row.try_get(7)?)?,
            next_expiry: row.try_get(8)?,
        };
        let stored = stored.then(|| WorkRow::from_ready_at(ready_at));
        if summary.served_row(now) != stored {
            return Ok(None);
        }
        timed |= ready_at.is_some();
    }
    let retry_at: Option<i64> = first.try_get(1)?;
    let result = match retry_at {
        Some(retry_at) => ClaimResult::Busy { retry_at },
        None => ClaimResult::Settled,
    };
    Ok(Some((result, timed)))
}

/// One session's claim of [`Store::claim_work`](a2_store_api::Store::claim_work)
/// (`WorkSource::claim_session`): [`claim`], but the served consumers' work
/// rows are locked first without waiting, and when another transaction
/// holds one (a claimer or writer on this session's work) the session is
/// left to it: `Busy { retry_at: now }` (contended: `claim_work` tries
/// again shortly), nothing changed. The only lock a claim may wait for,
/// the log type refresh's, is taken before them.
///
/// Two round trips: `BEGIN`, the log type refresh, the work rows' lock
/// ([`TRY_LOCK`], which counts them too), the promotion's selection of
/// due heads and the walk go in one; the cursor writes, the session read
/// (or the `Busy` answer), the work rewrite ([`REWRITE`], on the rows
/// already locked) and `COMMIT` in the other. A session left to another
/// transaction costs the first and its `ROLLBACK` (when no type was
/// refreshed, it wrote nothing), which the call waits for, so the rows
/// [`TRY_LOCK`] took are free before it answers. Heads due (a lease or
/// retry delay ran out) are promoted and walked again in one more. A
/// session whose rows are none of them ready by now (a claimer served it
/// since the ready sessions were read) has nothing to claim or rewrite,
/// and is left after the same `ROLLBACK`.
pub(crate) async fn claim_session(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
    claimed: &Claimed,
) -> TxResult<ClaimResult> {
    let session_id = request.session_id.as_str();
    let candidates = Candidates::new(request, now);
    let refresh = TypeRefresh::new(session_id, request.consumers.as_deref());
    let refresh_params = refresh.params();
    let served = served_list(request);
    let lock_params: [&(dyn ToSql + Sync); 3] = [&session_id, &served, &now];
    let walk = walk_sql();
    let wanted = wanted(request, 0);
    let due_params: [&(dyn ToSql + Sync); 2] = [&session_id, &now];
    let walk_params = candidates.params(Some(&wanted));
    let mut statements: Vec<Stmt<'_>> = refresh_params
        .iter()
        .map(|params| Stmt::new(REFRESH_TYPES, params))
        .collect();
    statements.push(Stmt::new(TRY_LOCK, &lock_params));
    statements.push(Stmt::new(sql::DUE, &due_params));
    statements.push(Stmt::new(walk, &walk_params));
    let mut answers = tx.pipeline(&statements).await?;
    let walked = answers.pop().unwrap_or_default();
    let due = answers.pop().unwrap_or_default();
    let locked = TryLocked::read(&answers.pop().unwrap_or_default())?;
    drop(walk_params);
    // None of the rows locked ready by now: nothing is claimable (by the
    // work index's invariant a claimable head's row is ready no later than
    // now, an expired lease's no later than its end) and the rows are
    // already what a claim would leave; typically another claimer served
    // the session between the ready-session read and this claim.
    let held = locked.held_elsewhere();
    if held || (due.is_empty() && walked.is_empty() && !locked.any_due(now)) {
        if refresh_params.is_empty() {
            // The rows TRY_LOCK took must be free again before the caller
            // (or another claimer it races) looks at this session again.
            tx.end().await?;
        }
        return Ok(if held {
            ClaimResult::Busy { retry_at: now }
        } else {
            ClaimResult::Settled
        });
    }
    let walks = Walks {
        candidates,
        walked,
        due,
    };
    Ok(
        take_and_commit(tx, request, walks, served.as_deref(), now, expires_at)
            .await?
            .remembered_in(claimed, session_id),
    )
}

/// Whether `claim_work` may pick and claim the next ready sessions of
/// `request` in one step ([`claim_next_many`], for one session or
/// several): one targeted consumer (no log declaration, whose
/// types a claim refreshes first) in every session (no list). Otherwise it
/// reads ready sessions and claims each ([`claim_session`]).
pub(crate) fn one_step(request: &ClaimWorkRequest) -> bool {
    request.sessions.is_none()
        && request.consumer_names().len() == 1
        && request.consumers.iter().all(|c| c.log.is_none())
}

/// What a claim's first round trip found: the candidates, the walk's rows
/// and the due heads' (both locked).
struct Walks<'r> {
    candidates: Candidates<'r>,
    walked: Vec<Row>,
    due: Vec<Row>,
}

/// The rest of a claim after its first round trip, for both claims: the
/// due heads promoted and the walk run again when any are due (the first
/// walk's rows stay locked until the commit; they are candidates again, so
/// this walk may take them), each free head's step decided ([`take`]), and
/// the writes, the answer, the rewrite of the `served` consumers' work
/// rows (`None`: every row of the session) and `COMMIT` sent together.
async fn take_and_commit(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    walks: Walks<'_>,
    served: Option<&[String]>,
    now: i64,
    expires_at: i64,
) -> TxResult<Finished> {
    let session_id = request.session_id.as_str();
    let Walks {
        candidates,
        walked,
        due,
    } = walks;
    let walked = if due.is_empty() {
        walked
    } else {
        promote_rows(tx, session_id, &due).await?;
        query(
            tx,
            walk_sql(),
            &candidates.params(Some(&wanted(request, 0))),
        )
        .await?
    };
    let taken = take(tx, request, candidates, walked, now, expires_at).await?;
    let rewrite = RewriteArgs::new(session_id, served, now, Rule::Served);
    let finished = taken.finish(tx, request, Some(&rewrite)).await?;
    Ok(finished)
}

/// A claim's answer with the cursor rows it wrote and the session row it
/// read, committed.
struct Finished {
    result: ClaimResult,
    changed: Vec<CursorRow>,
    state: SessionState,
}

impl Finished {
    /// Remembers the claimed rows (see [`Claimed`]) and returns the answer.
    fn remembered_in(self, claimed: &Claimed, session_id: &str) -> ClaimResult {
        if matches!(self.result, ClaimResult::Claimed { .. }) {
            for cursor in &self.changed {
                claimed.remember(session_id, cursor, &self.state);
            }
        }
        self.result
    }
}

/// The consumer names a claim serves, sorted, without repeats (`None`: every one).
fn served_list(request: &ClaimRequest) -> Option<Vec<String>> {
    request.consumers.as_ref().map(|consumers| {
        let names: BTreeSet<String> = consumers.iter().map(|c| c.name.clone()).collect();
        names.into_iter().collect()
    })
}

/// The statements of the claims that a new connection prepares before its
/// first call (see `crate::warm`).
pub(crate) fn hot_statements() -> Vec<&'static str> {
    let mut statements = vec![
        sql::DUE,
        walk_sql(),
        empty_answer_sql(),
        sql::ANY_WORK,
        claimed::LOCK,
        claimed::UNCHANGED,
    ];
    statements.extend(batch::hot_statements());
    statements
}

/// [`sql::empty_answer`], formatted once.
fn empty_answer_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(sql::empty_answer)
}

/// The walk's statement with the columns a claim decodes, formatted once.
fn walk_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| sql::walk(&format!("{CURSOR_COLUMNS}, {EVENT_COLUMNS}")))
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
        walked = query(tx, walk_sql(), &candidates.params(Some(&again))).await?;
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
    /// Also returns the rows written and the clear index read.
    async fn finish(
        mut self,
        tx: &Tx<'_>,
        request: &ClaimRequest,
        rewrite: Option<&RewriteArgs<'_>>,
    ) -> TxResult<Finished> {
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
        // Whether the rewrite made a row ready sooner is checked, not used:
        // a claim makes no row ready sooner.
        let _sooner = match rewrite {
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
                head.incarnation = state.incarnation();
            }
            self.heads.sort_by(compare_heads);
            self.dead_lettered.sort_by(compare_heads);
            return Ok(Finished {
                result: ClaimResult::Claimed {
                    heads: self.heads,
                    dead_lettered: self.dead_lettered,
                    head: index_of(state.head)?,
                },
                changed: self.changed,
                state,
            });
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
        Ok(Finished {
            result,
            changed: Vec::new(),
            state: SessionState::default(),
        })
    }
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
