//! The work index (`a2_store_api::work`): the `work` table's rows per
//! `(session, consumer)`, kept in the transaction of every cursor change,
//! and the queries of `claim_work` and `list_work` over it.
//!
//! Lock order: a transaction takes every cursor row lock it needs before
//! any `work` row lock.
//! Writers upsert their rows after their cursor writes ([`Touched::flush`]);
//! claims lock their rows after their cursor locks (`claim_available`) or
//! before taking any that may wait (`claim_work`: `SKIP LOCKED`, see
//! [`TRY_LOCK`]). So no two transactions wait on each other in a cycle.

pub(crate) mod pairs;
mod sql;

pub(crate) use sql::{PICK_MANY, TRY_LOCK};

use std::collections::{BTreeMap, BTreeSet};

use a2_store_api::sql::from_sql_int;
use a2_store_api::work::{ReadyWork, WorkRow, WorkSummary};
use a2_store_api::{ClaimWorkRequest, ListWork, SessionWork};

use crate::db::{execute, query, query_opt, Stmt, Tx};
use crate::error::TxResult;
use crate::rows::CursorRow;

/// The `NOTIFY` channel of a schema's work wake-ups: `a2_work_<schema>`,
/// cut to the 63 bytes PostgreSQL allows (schema names are ASCII). Two long
/// names sharing a prefix share it, which only wakes a waiter needlessly.
pub(crate) fn work_channel(schema: &str) -> String {
    let mut channel = format!("a2_work_{schema}");
    channel.truncate(crate::options::MAX_SCHEMA_NAME_LEN);
    channel
}

/// The consumers whose cursors a transaction changed, and what their work
/// rows become. A cursor left with a live head may only make its
/// consumer's work claimable sooner: the row becomes
/// `a2_store_api::work::sooner(old, Dispatch::ready_at)` (no read of the
/// other cursors). A cursor that lost its head or had it dead-lettered may
/// leave its consumer with nothing claimable or busy: that row is rewritten
/// from the consumer's cursors (`WorkSummary::touched_row`), so a finished
/// pair's row goes and the `Busy`/`Settled` answers stay exact.
#[derive(Debug)]
pub(crate) struct Touched {
    now: i64,
    sooner: BTreeMap<String, Option<i64>>,
    recheck: BTreeSet<String>,
}

impl Touched {
    /// Nothing touched yet, by a transaction at `now`.
    pub(crate) fn new(now: i64) -> Self {
        Self {
            now,
            sooner: BTreeMap::new(),
            recheck: BTreeSet::new(),
        }
    }

    /// The time of the transaction.
    pub(crate) fn now(&self) -> i64 {
        self.now
    }

    /// Notes a cursor whose bookkeeping changed in a way that may make its
    /// consumer's work later (a failure, a renewal, a redrive): its row is
    /// rewritten from the consumer's heads, whatever the cursor's state.
    pub(crate) fn rewrite(&mut self, cursor: &CursorRow) {
        self.recheck.insert(cursor.consumer.clone());
    }

    /// Notes the cursor just written, which may only make its consumer's
    /// work sooner unless it lost its head or had it dead-lettered.
    pub(crate) fn cursor(&mut self, cursor: &CursorRow) {
        if cursor.head.is_none() || cursor.dispatch.is_dead_lettered() {
            self.recheck.insert(cursor.consumer.clone());
            return;
        }
        let at = cursor.dispatch.ready_at(self.now);
        let entry = self.sooner.entry(cursor.consumer.clone()).or_insert(at);
        *entry = match (*entry, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Writes the touched rows; call it after the transaction's cursor
    /// writes (and before `has_pending`). The `sooner` rows are one upsert:
    /// `LEAST` skips `NULL`s, so a missing or dead-letters-only row becomes
    /// `at`, and an earlier one stays. The rechecked rows are locked, then
    /// rewritten from the cursors. When a row was made ready (inserted or
    /// moved earlier with a time), returns `true`: after the commit the
    /// store wakes this process's waiters and, through its work notifier,
    /// other processes' (`NOTIFY` outside this transaction, see
    /// [`crate::inner::Inner::committed`]).
    pub(crate) async fn flush(self, tx: &Tx<'_>, session_id: &str) -> TxResult<bool> {
        let mut ready = false;
        let consumers: Vec<&str> = self
            .sooner
            .keys()
            .map(String::as_str)
            .filter(|name| !self.recheck.contains(*name))
            .collect();
        if !consumers.is_empty() {
            let at: Vec<Option<i64>> = consumers
                .iter()
                .map(|name| self.sooner.get(*name).copied().flatten())
                .collect();
            // Rows in consumer order, so concurrent writers lock them in one order.
            let row = query_opt(tx, SOONER, &[&session_id, &consumers, &at]).await?;
            ready = row.is_some();
        }
        if !self.recheck.is_empty() {
            let names: Vec<String> = self.recheck.into_iter().collect();
            let sooner =
                lock_and_rewrite(tx, session_id, Some(&names), self.now, Rule::Touched).await?;
            ready |= sooner;
        }
        Ok(ready)
    }
}

/// The statement of [`Touched::flush`]'s `sooner` rows: `$1` session, `$2`
/// consumers in order, `$3` their ready times; answers a row when one was
/// made ready.
const SOONER: &str = "WITH up AS ( \
       INSERT INTO work AS w (session_id, consumer, ready_at) \
       SELECT $1, k.consumer, k.ready_at \
       FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS k(consumer, ready_at, n) \
       ORDER BY k.n \
       ON CONFLICT (session_id, consumer) DO UPDATE \
       SET ready_at = LEAST(w.ready_at, EXCLUDED.ready_at) \
       WHERE w.ready_at IS DISTINCT FROM LEAST(w.ready_at, EXCLUDED.ready_at) \
       RETURNING w.ready_at) \
     SELECT true FROM up WHERE up.ready_at IS NOT NULL LIMIT 1";

/// The parameters of a [`TouchedPlan`]'s statements: the [`SOONER`] upsert
/// and the [`REWRITE`], each when needed.
pub(crate) type WorkParams<'a> = (
    Option<[&'a (dyn tokio_postgres::types::ToSql + Sync); 3]>,
    Option<[&'a (dyn tokio_postgres::types::ToSql + Sync); 4]>,
);

/// [`Touched::flush`] as statements to send with the call's `COMMIT`: the
/// `sooner` upsert and the rewrite of the rechecked rows ([`REWRITE`], the
/// touched rule), each when needed.
pub(crate) struct TouchedPlan<'t> {
    session_id: &'t str,
    consumers: Vec<&'t str>,
    at: Vec<Option<i64>>,
    recheck: Option<Vec<String>>,
    now: i64,
    served: bool,
}

impl<'t> TouchedPlan<'t> {
    /// The parameters of [`SOONER`] and of [`REWRITE`], each when needed.
    pub(crate) fn params(&self) -> WorkParams<'_> {
        let sooner = (!self.consumers.is_empty()).then(|| {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                [&self.session_id, &self.consumers, &self.at];
            params
        });
        let rewrite = self.recheck.is_some().then(|| {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&self.session_id, &self.recheck, &self.now, &self.served];
            params
        });
        (sooner, rewrite)
    }

    /// Adds the statements of `params` (from [`params`](Self::params)) to
    /// `statements`, last.
    pub(crate) fn push<'s>(params: &'s WorkParams<'s>, statements: &mut Vec<Stmt<'s>>) {
        if let Some(params) = &params.0 {
            statements.push(Stmt::new(SOONER, params));
        }
        if let Some(params) = &params.1 {
            statements.push(Stmt::new(REWRITE, params));
        }
    }

    /// Whether a row was made ready, from the answers of the statements
    /// [`push`](Self::push) added (taken off the end of `answers`).
    pub(crate) fn finish(
        &self,
        answers: &mut Vec<Vec<tokio_postgres::Row>>,
        sent: &WorkParams<'_>,
    ) -> TxResult<bool> {
        let mut ready = false;
        if sent.1.is_some() {
            ready |= rewritten(&answers.pop().unwrap_or_default(), self.now, Rule::Touched)?;
        }
        if sent.0.is_some() {
            ready |= !answers.pop().unwrap_or_default().is_empty();
        }
        Ok(ready)
    }
}

impl Touched {
    /// The statements of [`flush`](Self::flush), to send in the pipeline
    /// of the call's `COMMIT` (see [`TouchedPlan`]).
    pub(crate) fn plan<'t>(&'t self, session_id: &'t str) -> TouchedPlan<'t> {
        let consumers: Vec<&str> = self
            .sooner
            .keys()
            .map(String::as_str)
            .filter(|name| !self.recheck.contains(*name))
            .collect();
        let at = consumers
            .iter()
            .map(|name| self.sooner.get(*name).copied().flatten())
            .collect();
        let recheck = (!self.recheck.is_empty()).then(|| self.recheck.iter().cloned().collect());
        TouchedPlan {
            session_id,
            consumers,
            at,
            recheck,
            now: self.now,
            served: false,
        }
    }
}

/// Locks a session's rows (`$1`) of `$2` consumers (`NULL`: every one), in
/// consumer order.
const LOCK: &str = "SELECT consumer, ready_at FROM work WHERE session_id = $1 \
    AND ($2::text[] IS NULL OR consumer = ANY($2)) ORDER BY consumer FOR UPDATE";

/// The stored work rows of a session the caller locked, by consumer.
pub(crate) type Locked = BTreeMap<String, Option<WorkRow>>;

/// What [`TRY_LOCK`] answered.
pub(crate) struct TryLocked {
    /// The `ready_at` of each row locked.
    locked: Vec<Option<i64>>,
    /// The rows there are, locked or not.
    visible: i64,
}

impl TryLocked {
    /// Reads [`TRY_LOCK`]'s rows.
    pub(crate) fn read(rows: &[tokio_postgres::Row]) -> TxResult<Self> {
        let mut answer = Self {
            locked: Vec::with_capacity(rows.len()),
            visible: 0,
        };
        for row in rows {
            match row.try_get::<_, Option<&str>>(0)? {
                Some(_) => answer.locked.push(row.try_get(1)?),
                None => answer.visible = row.try_get::<_, Option<i64>>(2)?.unwrap_or(0),
            }
        }
        Ok(answer)
    }

    /// Whether another transaction holds one of the rows passed over: fewer
    /// rows locked than there are.
    pub(crate) fn held_elsewhere(&self) -> bool {
        self.visible > i64::try_from(self.locked.len()).unwrap_or(i64::MAX)
    }

    /// Whether one of the rows locked is ready by `now`.
    pub(crate) fn any_due(&self, now: i64) -> bool {
        self.locked
            .iter()
            .any(|ready_at| ready_at.is_some_and(|at| at <= now))
    }
}

/// Locks the session's work rows of `consumers` (`None`: every row), in
/// consumer order, waiting for rows another transaction holds (the caller
/// holds every cursor lock it needs).
pub(crate) async fn lock_rows(
    tx: &Tx<'_>,
    session_id: &str,
    consumers: Option<&[String]>,
) -> TxResult<Locked> {
    let rows = query(tx, LOCK, &[&session_id, &consumers]).await?;
    let mut locked = Locked::new();
    for row in &rows {
        let ready_at: Option<i64> = row.try_get(1)?;
        locked.insert(row.try_get(0)?, Some(WorkRow::from_ready_at(ready_at)));
    }
    Ok(locked)
}

/// The statement of [`summaries`]: `$1` sessions, `$2` consumers (`NULL`:
/// every one), `$3` now.
const SUMMARIES: &str = "SELECT h.session_id, h.consumer, \
    count(*) FILTER (WHERE h.failed_at IS NULL \
      AND (h.claim_expires_at IS NULL OR h.claim_expires_at <= $3)), \
    count(*) FILTER (WHERE h.failed_at IS NULL AND h.claim_expires_at > $3), \
    count(*) FILTER (WHERE h.failed_at IS NOT NULL), \
    min(h.claim_expires_at) FILTER (WHERE h.failed_at IS NULL AND h.claim_expires_at > $3) \
  FROM ( \
    SELECT c.session_id, c.consumer, c.claim_expires_at, c.failed_at FROM cursors c \
      WHERE c.session_id = ANY($1) AND ($2::text[] IS NULL OR c.consumer = ANY($2)) \
        AND c.head IS NOT NULL \
        AND c.failed_at IS NULL AND (c.claim_expires_at IS NULL OR c.expired) \
    UNION ALL \
    SELECT c.session_id, c.consumer, c.claim_expires_at, c.failed_at FROM cursors c \
      WHERE c.session_id = ANY($1) AND ($2::text[] IS NULL OR c.consumer = ANY($2)) \
        AND c.head IS NOT NULL \
        AND c.failed_at IS NULL AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
    UNION ALL \
    SELECT c.session_id, c.consumer, c.claim_expires_at, c.failed_at FROM cursors c \
      WHERE c.session_id = ANY($1) AND ($2::text[] IS NULL OR c.consumer = ANY($2)) \
        AND c.head IS NOT NULL \
        AND c.failed_at IS NOT NULL \
  ) AS h GROUP BY h.session_id, h.consumer";

/// The unfinished heads of `consumers` (`None`: every consumer) in
/// `sessions` at `now`, summed per `(session, consumer)` as
/// `WorkSummary::add` counts them: dead-lettered when `failed_at` is set,
/// busy while `claim_expires_at > now`, else claimable. Pairs without a
/// head are left out.
///
/// Three parts, each the predicate of one partial cursor index (idle and
/// promoted heads, unpromoted busy heads, dead letters), so finished
/// cursors are never visited.
async fn summaries(
    tx: &Tx<'_>,
    sessions: &[&str],
    consumers: Option<&[&str]>,
    now: i64,
) -> TxResult<BTreeMap<(String, String), WorkSummary>> {
    let mut found = BTreeMap::new();
    if sessions.is_empty() || consumers.is_some_and(<[&str]>::is_empty) {
        return Ok(found);
    }
    for row in query(tx, SUMMARIES, &[&sessions, &consumers, &now]).await? {
        let summary = WorkSummary {
            claimable: from_sql_int("claimable heads", row.try_get(2)?)?,
            busy: from_sql_int("busy heads", row.try_get(3)?)?,
            dead_lettered: from_sql_int("dead-lettered heads", row.try_get(4)?)?,
            next_expiry: row.try_get(5)?,
        };
        found.insert((row.try_get(0)?, row.try_get(1)?), summary);
    }
    Ok(found)
}

/// What a rewrite stores for a pair: `WorkSummary::served_row` after a
/// claim, `WorkSummary::touched_row` after any other change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// The pair was served by a claim.
    Served,
    /// The pair's cursors changed otherwise (a clear).
    Touched,
}

impl Rule {
    /// The row this rule stores for a pair whose heads sum to `summary`
    /// (`old`: its stored row): `WorkSummary::served_row` or `touched_row`.
    pub(crate) fn row(
        self,
        summary: &WorkSummary,
        old: Option<WorkRow>,
        now: i64,
    ) -> Option<WorkRow> {
        match self {
            Rule::Served => summary.served_row(now),
            Rule::Touched => summary.touched_row(old, now),
        }
    }
}

/// [`lock_rows`] and a rewrite of the rows from the summed heads in one
/// round trip: the two statements are pipelined, and the server runs the
/// summary after the lock (so its snapshot sees every change committed by
/// a writer that held one of the rows). For callers holding every cursor
/// lock they need.
pub(crate) async fn lock_and_rewrite(
    tx: &Tx<'_>,
    session_id: &str,
    consumers: Option<&[String]>,
    now: i64,
    rule: Rule,
) -> TxResult<bool> {
    let listed: Option<Vec<&str>> =
        consumers.map(|names| names.iter().map(String::as_str).collect());
    let sessions = [session_id];
    // Both prepared first: then each is sent when first polled, and
    // `try_join` polls in argument order, so the lock runs first.
    futures::try_join!(tx.prepare_cached(LOCK), tx.prepare_cached(SUMMARIES))?;
    let (locked, found) = futures::try_join!(
        lock_rows(tx, session_id, consumers),
        summaries(tx, &sessions, listed.as_deref(), now),
    )?;
    apply(tx, session_id, consumers, &locked, &found, now, rule).await
}

/// [`lock_and_rewrite`] as one statement, the schema's `rewrite_work`
/// function (version 8), so it can be sent in the pipeline of the call's
/// `COMMIT`: `$1` session, `$2` consumers (`NULL`: the session's rows), `$3`
/// now, `$4` whether the rule is [`Rule::Served`]. It locks the rows, then
/// sums the heads with a snapshot taken after the lock and stores each
/// pair's row as the rule says; each returned row is a pair with its
/// summary, its locked row and what was stored, which [`rewritten`] checks
/// against the Rust rule. The summary holds what the probes that decided
/// found (counts of 0 or 1): since version 13 a pair with a claimable head
/// is not probed for busy heads or dead letters, which the rule does not
/// read then.
pub(crate) const REWRITE: &str = "SELECT r_consumer, r_locked, r_old_at, r_claimable, r_busy, \
    r_dead, r_next_expiry, r_keep, r_new_at FROM rewrite_work($1, $2, $3, $4)";

/// The statements of the work index that a new connection prepares before
/// its first call (see `crate::warm`).
pub(crate) const HOT_STATEMENTS: [&str; 5] = [
    sql::READY_OR_EARLIEST,
    sql::READY,
    sql::TRY_LOCK,
    REWRITE,
    PICK_MANY,
];

/// The bound values of [`REWRITE`].
pub(crate) struct RewriteArgs<'a> {
    session_id: &'a str,
    consumers: Option<&'a [String]>,
    now: i64,
    served: bool,
}

impl<'a> RewriteArgs<'a> {
    /// The rewrite of the session's rows of `consumers` (`None`: every row).
    pub(crate) fn new(
        session_id: &'a str,
        consumers: Option<&'a [String]>,
        now: i64,
        rule: Rule,
    ) -> Self {
        Self {
            session_id,
            consumers,
            now,
            served: rule == Rule::Served,
        }
    }

    /// The parameters of [`REWRITE`].
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 4] {
        [&self.session_id, &self.consumers, &self.now, &self.served]
    }
}

/// The time a rewrite runs at.
pub(crate) fn rewrite_now(args: &RewriteArgs<'_>) -> i64 {
    args.now
}

/// The answer of [`REWRITE`] at `now` by `rule`: whether a row was made
/// ready sooner (inserted, or moved earlier), as [`apply`] decides it.
/// Checks in debug builds that each stored row is what
/// `WorkSummary::served_row` or `touched_row` gives for the summary.
pub(crate) fn rewritten(rows: &[tokio_postgres::Row], now: i64, rule: Rule) -> TxResult<bool> {
    let mut sooner = false;
    for row in rows {
        let locked: bool = row.try_get(1)?;
        let old_at: Option<i64> = row.try_get(2)?;
        let summary = WorkSummary {
            claimable: from_sql_int("claimable heads", row.try_get(3)?)?,
            busy: from_sql_int("busy heads", row.try_get(4)?)?,
            dead_lettered: from_sql_int("dead-lettered heads", row.try_get(5)?)?,
            next_expiry: row.try_get(6)?,
        };
        let keep: bool = row.try_get(7)?;
        let new_at: Option<i64> = row.try_get(8)?;
        let old = locked.then(|| WorkRow::from_ready_at(old_at));
        let stored = keep.then(|| WorkRow::from_ready_at(new_at));
        debug_assert_eq!(
            stored,
            rule.row(&summary, old, now),
            "rewrite_work stored another row than the work rule gives for {summary:?}"
        );
        if let Some(WorkRow::Ready(at)) = stored {
            sooner |= match old {
                Some(WorkRow::Ready(before)) => at < before,
                _ => true,
            };
        }
    }
    Ok(sooner)
}

/// Writes the rows [`lock_and_rewrite`] decided from the summaries `found`.
async fn apply(
    tx: &Tx<'_>,
    session_id: &str,
    consumers: Option<&[String]>,
    locked: &Locked,
    found: &BTreeMap<(String, String), WorkSummary>,
    now: i64,
    rule: Rule,
) -> TxResult<bool> {
    let names: BTreeSet<&str> = match consumers {
        Some(names) => names.iter().map(String::as_str).collect(),
        None => locked.keys().map(String::as_str).collect(),
    };
    let (mut deleted, mut updated, mut updated_at) = (Vec::new(), Vec::new(), Vec::new());
    let (mut inserted, mut inserted_at) = (Vec::new(), Vec::new());
    let mut sooner = false;
    for name in names {
        let summary = found
            .get(&(session_id.to_owned(), name.to_owned()))
            .copied()
            .unwrap_or_default();
        let old = locked.get(name).copied();
        let new = rule.row(&summary, old.flatten(), now);
        if let Some(WorkRow::Ready(at)) = new {
            sooner |= match old.flatten() {
                Some(WorkRow::Ready(before)) => at < before,
                _ => true,
            };
        }
        match (old, new) {
            (Some(_), None) => deleted.push(name),
            (Some(old), Some(new)) if old != Some(new) => {
                updated.push(name);
                updated_at.push(new.ready_at());
            }
            (Some(_), Some(_)) | (None, None) => {}
            (None, Some(new)) => {
                inserted.push(name);
                inserted_at.push(new.ready_at());
            }
        }
    }
    if !deleted.is_empty() {
        execute(
            tx,
            "DELETE FROM work WHERE session_id = $1 AND consumer = ANY($2)",
            &[&session_id, &deleted],
        )
        .await?;
    }
    if !updated.is_empty() {
        execute(
            tx,
            "UPDATE work w SET ready_at = k.ready_at \
             FROM unnest($2::text[], $3::bigint[]) AS k(consumer, ready_at) \
             WHERE w.session_id = $1 AND w.consumer = k.consumer",
            &[&session_id, &updated, &updated_at],
        )
        .await?;
    }
    if !inserted.is_empty() {
        execute(
            tx,
            "INSERT INTO work AS w (session_id, consumer, ready_at) \
             SELECT $1, k.consumer, k.ready_at \
             FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS k(consumer, ready_at, n) \
             ORDER BY k.n \
             ON CONFLICT (session_id, consumer) DO UPDATE \
             SET ready_at = LEAST(w.ready_at, EXCLUDED.ready_at)",
            &[&session_id, &inserted, &inserted_at],
        )
        .await?;
    }
    Ok(sooner)
}

/// The sessions `request` serves with a ready row (`ready_at <= now`),
/// leaving out `skip`, in fairness order by each session's earliest such
/// row: up to `limit`.
///
/// Every session: per served consumer, its first `limit` rows in
/// `(ready_at, session_id)` order from `work_ready` (enough: a session among
/// the first `limit` overall is among the first `limit` of the consumer of
/// its earliest row), merged and cut to `limit` sessions here, so the cost
/// is `O(consumers × (log n + limit + skipped))` whatever the number of
/// sessions. A session list: one primary-key probe per listed pair.
///
/// One statement on its own, outside any transaction (a read: no `BEGIN`
/// or `COMMIT` to wait for), so one round trip.
pub(crate) async fn ready_sessions(
    tx: &Tx<'_>,
    request: &ClaimWorkRequest,
    now: i64,
    skip: &[String],
    limit: usize,
) -> TxResult<Vec<String>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let consumers = request.consumer_names();
    let fetch = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = match &request.sessions {
        None => {
            tx.query_alone(sql::READY, &[&consumers, &now, &skip, &fetch])
                .await?
        }
        Some(sessions) => {
            tx.query_alone(
                sql::READY_LISTED,
                &[sessions, &consumers, &now, &skip, &fetch],
            )
            .await?
        }
    };
    distinct_sessions(&rows, limit)
}

/// The session ids of a ready read's rows (column 0), each once, in the
/// rows' order, up to `limit`; a row without one (the earliest-time row of
/// [`sql::READY_OR_EARLIEST`]) ends them.
fn distinct_sessions(rows: &[tokio_postgres::Row], limit: usize) -> TxResult<Vec<String>> {
    let mut ready: Vec<String> = Vec::with_capacity(limit.min(rows.len()));
    for row in rows {
        if ready.len() >= limit {
            break;
        }
        let Some(session_id) = row.try_get::<_, Option<String>>(0)? else {
            break;
        };
        if !ready.contains(&session_id) {
            ready.push(session_id);
        }
    }
    Ok(ready)
}

/// [`ready_sessions`], and when it finds none, [`earliest_ready`], in one
/// statement ([`sql::READY_OR_EARLIEST`], the earliest probe run only when
/// nothing is ready) outside any transaction: an empty claim costs one
/// round trip.
pub(crate) async fn ready_or_earliest(
    tx: &Tx<'_>,
    request: &ClaimWorkRequest,
    now: i64,
    skip: &[String],
    limit: usize,
) -> TxResult<ReadyWork> {
    let consumers = request.consumer_names();
    let fetch = i64::try_from(limit).unwrap_or(i64::MAX);
    let (rows, earliest_column) = match &request.sessions {
        None => (
            tx.query_alone(sql::READY_OR_EARLIEST, &[&consumers, &now, &skip, &fetch])
                .await?,
            3,
        ),
        Some(sessions) => (
            tx.query_alone(
                sql::READY_OR_EARLIEST_LISTED,
                &[sessions, &consumers, &now, &skip, &fetch],
            )
            .await?,
            2,
        ),
    };
    let ready = distinct_sessions(&rows, limit)?;
    if !ready.is_empty() {
        return Ok(ReadyWork::Sessions(ready));
    }
    // Nothing ready: the statement's one row carries the earliest time.
    Ok(ReadyWork::Earliest(match rows.last() {
        Some(row) => row.try_get(earliest_column)?,
        None => None,
    }))
}

/// The earliest `ready_at` among the ready rows `request` serves at `now`,
/// a pair held by a pause counted from the pause's end and one held until
/// resumed left out (see [`sql::EARLIEST`]): one ordered probe of
/// `work_ready` per consumer (or of the primary key per listed pair). One
/// statement on its own, outside any transaction: one round trip.
pub(crate) async fn earliest_ready(
    tx: &Tx<'_>,
    request: &ClaimWorkRequest,
    now: i64,
) -> TxResult<Option<i64>> {
    let consumers = request.consumer_names();
    let rows = match &request.sessions {
        None => tx.query_alone(sql::EARLIEST, &[&consumers, &now]).await?,
        Some(sessions) => {
            tx.query_alone(sql::EARLIEST_LISTED, &[sessions, &consumers, &now])
                .await?
        }
    };
    match rows.first() {
        Some(row) => Ok(row.try_get(0)?),
        None => Ok(None),
    }
}

/// The body of [`Store::list_work`](a2_store_api::Store::list_work) for a
/// validated request at `now`: candidate sessions in id order from
/// `work_listed` (per consumer, merged), then their heads summed; sessions
/// whose rows are stale (no head left) are passed over, and candidates are
/// fetched again until the page is full or none are left.
pub(crate) async fn list_work(
    tx: &Tx<'_>,
    request: &ListWork,
    now: i64,
) -> TxResult<Vec<SessionWork>> {
    let page = request.page_size();
    let fetch = i64::try_from(page).unwrap_or(i64::MAX);
    let names = request.consumer_names();
    let consumers: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut after = request.after.clone();
    let mut listed = Vec::with_capacity(page);
    while listed.len() < page {
        let rows = query(tx, sql::LISTED_AFTER, &[&consumers, &after, &fetch]).await?;
        let mut candidates: Vec<(String, Option<i64>)> = Vec::with_capacity(rows.len());
        for row in &rows {
            candidates.push((row.try_get(0)?, row.try_get(1)?));
        }
        let Some((last, _)) = candidates.last() else {
            break;
        };
        after = Some(last.clone());
        let ids: Vec<&str> = candidates.iter().map(|(id, _)| id.as_str()).collect();
        let found = summaries(tx, &ids, Some(&consumers), now).await?;
        let mut by_session: BTreeMap<&str, WorkSummary> = BTreeMap::new();
        for ((session_id, _), summary) in &found {
            by_session
                .entry(session_id.as_str())
                .or_default()
                .merge(summary);
        }
        for (session_id, ready_at) in &candidates {
            let Some(summary) = by_session.get(session_id.as_str()) else {
                continue;
            };
            if summary.has_work() && listed.len() < page {
                listed.push(summary.session_work(session_id, *ready_at));
            }
        }
        if candidates.len() < page {
            break;
        }
    }
    Ok(listed)
}
