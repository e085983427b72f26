//! The work rows of the `(session, consumer)` pairs whose cursors a batch
//! changes, read with set-based statements and decided in Rust.
//!
//! Where a single call sends `rewrite_work` (a PL/pgSQL function that
//! locks a pair's row, probes its heads and stores the row, a few
//! statements per pair), a batch of completions locks every pair's row in
//! one statement ([`LOCK_PAIRS`]) and probes the heads of every pair in one
//! more ([`PROBE_PAIRS`]), both in its first round trip, after its cursor
//! locks. The probes leave out the cursors the batch itself changes, whose
//! new states are known in memory; `WorkSummary::add` then counts the
//! probed heads and those new states, and `WorkSummary::touched_row`
//! decides each pair's row, the rules of `a2_store_api::work`. The rows
//! that change are written in the batch's second round trip: one update of
//! the rows it locked, one delete, one insert of rows that did not exist.
//!
//! A pair's row is locked before its heads are probed, as `rewrite_work`
//! does, so a writer that changes another cursor of the pair and then
//! rewrites the row waits for this batch's commit and rewrites the row
//! again from what it sees. A row that did not exist cannot be locked; a
//! transaction may insert it meanwhile, so the batch's insert keeps the
//! earlier of the two times on conflict, as `rewrite_work` does.

use std::collections::BTreeMap;

use a2_store_api::work::{WorkRow, WorkSummary};
use a2_store_api::Dispatch;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::Rule;
use crate::db::Stmt;
use crate::error::TxResult;
use crate::rows::CursorRow;

/// Locks the work rows of the pairs: `$1` sessions, `$2` consumers, in
/// (session, consumer) order. Rows: the pair's ordinal (1-based), its
/// `ready_at`.
pub(crate) const LOCK_PAIRS: &str = "SELECT k.n, w.ready_at \
    FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(session_id, consumer, n) \
    JOIN work w ON w.session_id = k.session_id AND w.consumer = k.consumer \
    ORDER BY w.session_id, w.consumer FOR UPDATE OF w";

/// The condition of [`PROBE_PAIRS`]' probes that leaves out the batch's
/// own cursors (`x`, the left-out keys).
macro_rules! left_out {
    () => {
        " AND NOT EXISTS (SELECT 1 FROM x WHERE x.session_id = c.session_id \
            AND x.consumer = c.consumer AND x.lane = c.lane AND x.slot = c.slot) "
    };
}

/// The heads that decide each pair's row, leaving out the cursors the batch
/// changes: `$1` sessions, `$2` consumers (the pairs), `$3` now, `$4`..`$7`
/// the left-out cursors' sessions, consumers, lanes and slots. Per pair at
/// most one row of each probe `rewrite_work` runs (a claimable head, a due
/// lease not yet promoted, the earliest future end of a lease or delay,
/// promoted or not, and a dead letter), each found by the partial index
/// its predicate matches. Rows: the pair's ordinal, the head's
/// `claim_expires_at` and `failed_at`.
pub(crate) const PROBE_PAIRS: &str = concat!(
    "WITH x AS (SELECT * FROM unnest($4::text[], $5::text[], \
       $6::text[], $7::bigint[]) AS x(session_id, consumer, lane, slot)) \
    SELECT k.n, p.claim_expires_at, p.failed_at \
    FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(session_id, consumer, n) \
    CROSS JOIN LATERAL ( \
      (SELECT c.claim_expires_at, c.failed_at FROM cursors c \
        WHERE c.session_id = k.session_id AND c.head IS NOT NULL AND c.failed_at IS NULL \
          AND (c.claim_expires_at IS NULL OR c.expired) AND c.consumer = k.consumer \
          AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= $3) ",
    left_out!(),
    "ORDER BY c.head LIMIT 1) \
      UNION ALL \
      (SELECT c.claim_expires_at, c.failed_at FROM cursors c \
        WHERE c.session_id = k.session_id AND c.head IS NOT NULL AND c.failed_at IS NULL \
          AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
          AND c.claim_expires_at <= $3 AND c.consumer = k.consumer ",
    left_out!(),
    "ORDER BY c.claim_expires_at LIMIT 1) \
      UNION ALL \
      (SELECT c.claim_expires_at, c.failed_at FROM cursors c \
        WHERE c.session_id = k.session_id AND c.head IS NOT NULL AND c.failed_at IS NULL \
          AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
          AND c.claim_expires_at > $3 AND c.consumer = k.consumer ",
    left_out!(),
    "ORDER BY c.claim_expires_at LIMIT 1) \
      UNION ALL \
      (SELECT c.claim_expires_at, c.failed_at FROM cursors c \
        WHERE c.session_id = k.session_id AND c.head IS NOT NULL AND c.failed_at IS NULL \
          AND c.claim_expires_at IS NOT NULL AND c.expired \
          AND c.claim_expires_at > $3 AND c.consumer = k.consumer ",
    left_out!(),
    "ORDER BY c.claim_expires_at LIMIT 1) \
      UNION ALL \
      (SELECT c.claim_expires_at, c.failed_at FROM cursors c \
        WHERE c.session_id = k.session_id AND c.head IS NOT NULL \
          AND c.failed_at IS NOT NULL AND c.consumer = k.consumer ",
    left_out!(),
    "ORDER BY c.head LIMIT 1) \
    ) AS p"
);

/// Sets the rows this batch locked: `$1` sessions, `$2` consumers, `$3`
/// their new `ready_at`.
const UPDATE_PAIRS: &str = "UPDATE work w SET ready_at = k.ready_at \
    FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(session_id, consumer, ready_at) \
    WHERE w.session_id = k.session_id AND w.consumer = k.consumer";

/// Deletes the rows this batch locked whose pair has nothing left: `$1`
/// sessions, `$2` consumers.
const DELETE_PAIRS: &str = "DELETE FROM work w \
    USING unnest($1::text[], $2::text[]) AS k(session_id, consumer) \
    WHERE w.session_id = k.session_id AND w.consumer = k.consumer";

/// Inserts the rows of pairs that had none (another transaction may have
/// inserted one since: the earlier time stays): `$1` sessions, `$2`
/// consumers, `$3` `ready_at`, in (session, consumer) order.
const INSERT_PAIRS: &str = "INSERT INTO work AS w (session_id, consumer, ready_at) \
    SELECT k.session_id, k.consumer, k.ready_at \
    FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY \
      AS k(session_id, consumer, ready_at, n) ORDER BY k.n \
    ON CONFLICT (session_id, consumer) DO UPDATE \
    SET ready_at = LEAST(w.ready_at, EXCLUDED.ready_at)";

/// The statements of pairs that a new connection prepares before its first
/// call (see `crate::warm`).
pub(crate) const HOT_STATEMENTS: [&str; 5] = [
    LOCK_PAIRS,
    PROBE_PAIRS,
    UPDATE_PAIRS,
    DELETE_PAIRS,
    INSERT_PAIRS,
];

/// A pair: a session and a consumer.
pub(crate) type Pair<'a> = (&'a str, &'a str);

/// The pairs a batch may change, in (session, consumer) order, with the
/// cursors it changes (left out of the probes), as bound columns.
pub(crate) struct Pairs<'a> {
    sessions: Vec<&'a str>,
    consumers: Vec<&'a str>,
    /// Each pair's position in `sessions` and `consumers`.
    positions: BTreeMap<Pair<'a>, usize>,
    now: i64,
    left_out: (Vec<&'a str>, Vec<&'a str>, Vec<&'a str>, Vec<i64>),
}

impl<'a> Pairs<'a> {
    /// The pairs of `cursors` (session, consumer, stored lane, slot), at `now`.
    pub(crate) fn new(
        cursors: impl IntoIterator<Item = (&'a str, &'a str, &'a str, i64)>,
        now: i64,
    ) -> Self {
        let mut pairs = std::collections::BTreeSet::new();
        let mut left_out: (Vec<&str>, Vec<&str>, Vec<&str>, Vec<i64>) = Default::default();
        for (session_id, consumer, lane, slot) in cursors {
            pairs.insert((session_id, consumer));
            left_out.0.push(session_id);
            left_out.1.push(consumer);
            left_out.2.push(lane);
            left_out.3.push(slot);
        }
        let positions = pairs
            .iter()
            .enumerate()
            .map(|(at, pair)| (*pair, at))
            .collect();
        let (sessions, consumers) = pairs.into_iter().unzip();
        Self {
            sessions,
            consumers,
            positions,
            now,
            left_out,
        }
    }

    /// The parameters of [`LOCK_PAIRS`].
    pub(crate) fn lock_params(&self) -> [&(dyn ToSql + Sync); 2] {
        [&self.sessions, &self.consumers]
    }

    /// The parameters of [`PROBE_PAIRS`].
    pub(crate) fn probe_params(&self) -> [&(dyn ToSql + Sync); 7] {
        [
            &self.sessions,
            &self.consumers,
            &self.now,
            &self.left_out.0,
            &self.left_out.1,
            &self.left_out.2,
            &self.left_out.3,
        ]
    }

    /// Decides, by `rule`, the row of every pair that holds one of
    /// `changed` (the batch's cursors in their new state, by pair) from the
    /// answers of [`LOCK_PAIRS`] and [`PROBE_PAIRS`], and adds its write to
    /// `rows`.
    pub(crate) fn decide<'c>(
        &self,
        locked: &[Row],
        probed: &[Row],
        changed: impl IntoIterator<Item = (Pair<'c>, &'c CursorRow)>,
        rule: Rule,
        rows: &mut Rows<'a>,
    ) -> TxResult<()> {
        let mut old: BTreeMap<usize, Option<i64>> = BTreeMap::new();
        for row in locked {
            old.insert(ordinal(row)?, row.try_get(1)?);
        }
        let mut summaries: BTreeMap<usize, WorkSummary> = BTreeMap::new();
        let mut head = Dispatch::default();
        for row in probed {
            head.claim_expires_at = row.try_get(1)?;
            head.failed_at = row.try_get(2)?;
            summaries
                .entry(ordinal(row)?)
                .or_default()
                .add(&head, self.now);
        }
        let mut touched: BTreeMap<usize, WorkSummary> = BTreeMap::new();
        for (pair, cursor) in changed {
            let Some(at) = self.position(pair) else {
                continue;
            };
            let summary = touched
                .entry(at)
                .or_insert_with(|| summaries.get(&at).copied().unwrap_or_default());
            if cursor.head.is_some() {
                summary.add(&cursor.dispatch, self.now);
            }
        }
        for (at, summary) in touched {
            let (Some(&session_id), Some(&consumer)) =
                (self.sessions.get(at), self.consumers.get(at))
            else {
                continue;
            };
            rows.set(
                (session_id, consumer),
                old.get(&at).copied(),
                &summary,
                rule,
                self.now,
            );
        }
        Ok(())
    }

    /// The position of `pair` among the pairs.
    fn position(&self, pair: Pair<'_>) -> Option<usize> {
        self.positions.get(&pair).copied()
    }
}

/// The 0-based position of a row's 1-based ordinal in its first column.
fn ordinal(row: &Row) -> TxResult<usize> {
    let ordinal: i64 = row.try_get(0)?;
    usize::try_from(ordinal - 1)
        .map_err(|_| a2_store_api::StoreError::corrupt_value("ordinal of a work pair").into())
}

/// The work rows a batch writes, as bound columns, and whether one was made
/// ready (inserted with a time, or moved earlier).
#[derive(Default)]
pub(crate) struct Rows<'a> {
    updates: (Vec<&'a str>, Vec<&'a str>, Vec<Option<i64>>),
    deletes: (Vec<&'a str>, Vec<&'a str>),
    inserts: (Vec<&'a str>, Vec<&'a str>, Vec<Option<i64>>),
    /// A row was made ready: waiting claimers are woken after the commit.
    pub ready: bool,
}

impl<'a> Rows<'a> {
    /// Adds the write of `pair`'s row (`was`: `None` when it has none, else
    /// its `ready_at`) whose heads sum to `summary`: the row `rule` gives
    /// (`WorkSummary::served_row` or `touched_row`), written only when it
    /// changes.
    pub(crate) fn set(
        &mut self,
        (session_id, consumer): Pair<'a>,
        was: Option<Option<i64>>,
        summary: &WorkSummary,
        rule: Rule,
        now: i64,
    ) {
        let before = was.map(WorkRow::from_ready_at);
        let after = rule.row(summary, before, now);
        if let Some(WorkRow::Ready(ready_at)) = after {
            self.ready |= !matches!(before, Some(WorkRow::Ready(b)) if b <= ready_at);
        }
        match (was, after) {
            (Some(_), None) => {
                self.deletes.0.push(session_id);
                self.deletes.1.push(consumer);
            }
            (Some(_), Some(row)) if Some(row) != before => {
                self.updates.0.push(session_id);
                self.updates.1.push(consumer);
                self.updates.2.push(row.ready_at());
            }
            (None, Some(row)) => {
                self.inserts.0.push(session_id);
                self.inserts.1.push(consumer);
                self.inserts.2.push(row.ready_at());
            }
            _ => {}
        }
    }
}

/// The bound parameters of [`Rows`]' statements, each when needed.
pub(crate) struct RowsParams<'p> {
    update: Option<[&'p (dyn ToSql + Sync); 3]>,
    delete: Option<[&'p (dyn ToSql + Sync); 2]>,
    insert: Option<[&'p (dyn ToSql + Sync); 3]>,
}

impl Rows<'_> {
    /// The parameters of the statements to send.
    pub(crate) fn params(&self) -> RowsParams<'_> {
        let update = (!self.updates.0.is_empty()).then(|| {
            let params: [&(dyn ToSql + Sync); 3] =
                [&self.updates.0, &self.updates.1, &self.updates.2];
            params
        });
        let delete = (!self.deletes.0.is_empty()).then(|| {
            let params: [&(dyn ToSql + Sync); 2] = [&self.deletes.0, &self.deletes.1];
            params
        });
        let insert = (!self.inserts.0.is_empty()).then(|| {
            let params: [&(dyn ToSql + Sync); 3] =
                [&self.inserts.0, &self.inserts.1, &self.inserts.2];
            params
        });
        RowsParams {
            update,
            delete,
            insert,
        }
    }

    /// Adds the statements of `params` to `statements`.
    pub(crate) fn push<'s>(params: &'s RowsParams<'s>, statements: &mut Vec<Stmt<'s>>) {
        if let Some(params) = &params.update {
            statements.push(Stmt::new(UPDATE_PAIRS, params));
        }
        if let Some(params) = &params.delete {
            statements.push(Stmt::new(DELETE_PAIRS, params));
        }
        if let Some(params) = &params.insert {
            statements.push(Stmt::new(INSERT_PAIRS, params));
        }
    }
}
