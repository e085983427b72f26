//! The work rows of the pairs a batch claim serves, decided in Rust, as the
//! batching writer decides its pairs' rows (`ops::work::pairs`): no
//! `rewrite_work` call.
//!
//! The claim's first round trip reads, after the walk, the heads that
//! decide each picked session's pair ([`SERVED_PROBE`](super::sql::SERVED_PROBE): the pair's
//! work row and `rewrite_work`'s probes, the claimable kinds read up to the
//! walk's limit plus one). Once the claim decided its heads,
//! [`Probed::decide`] sums, per served session, the heads read without the
//! cursors the claim changed, plus those cursors' new states
//! (`WorkSummary::add`), and stores `WorkSummary::served_row`, the rule
//! `rewrite_work` applies after a claim. The writes go with the claim's
//! other writes and `COMMIT`: one update, one delete (each when needed).
//!
//! A session it cannot decide is one whose claimable heads read were all
//! changed by the claim while a kind was read to its limit (more may be
//! left: only when dead letters made the claim walk again), or whose
//! other probe found a head the claim changed (never, as the walk reads
//! only free ready heads); those pairs are decided from the writer's probe
//! (`LOCK_PAIRS` and `PROBE_PAIRS`, leaving out the changed cursors) in a
//! round trip of their own.

use std::collections::HashMap;

use a2_store_api::work::WorkSummary;
use a2_store_api::Dispatch;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::db::{Stmt, Tx};
use crate::error::TxResult;
use crate::ops::work::pairs::{Pairs, Rows, LOCK_PAIRS, PROBE_PAIRS};
use crate::ops::work::Rule;
use crate::rows::CursorRow;

/// The kinds of head [`SERVED_PROBE`](super::sql::SERVED_PROBE) reads.
const KINDS: usize = 5;

/// The kinds that are claimable heads (ready and free, due), read up to the
/// probe's limit; the others are read one each.
const CLAIMABLE: [i32; 2] = [1, 2];

/// The parameters of [`SERVED_PROBE`](super::sql::SERVED_PROBE).
pub(crate) struct ProbeArgs<'a> {
    /// `None` in the round trip of the pick: the picked sessions.
    sessions: Option<Vec<String>>,
    consumer: &'a str,
    now: i64,
    /// How many claimable heads of each kind are read (`None`: all).
    limit: Option<i64>,
}

impl<'a> ProbeArgs<'a> {
    /// The probe of the picked sessions' pairs of `consumer` at `now`, for
    /// a claim whose walk of a session reads at most `walk_limit` heads.
    pub(crate) fn new(consumer: &'a str, now: i64, walk_limit: Option<i64>) -> Self {
        Self {
            sessions: None,
            consumer,
            now,
            limit: walk_limit.map(|limit| limit.saturating_add(1)),
        }
    }

    /// The parameters of [`SERVED_PROBE`](super::sql::SERVED_PROBE).
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 4] {
        [&self.sessions, &self.consumer, &self.now, &self.limit]
    }
}

/// What [`SERVED_PROBE`](super::sql::SERVED_PROBE) read of one session's pair.
#[derive(Default)]
struct Found {
    /// The pair's work row: `None` when it has none, else its `ready_at`.
    row: Option<Option<i64>>,
    /// The heads read: kind, lane, slot and bookkeeping.
    heads: Vec<(i32, String, i64, Dispatch)>,
    /// How many heads of each kind were read.
    read: [i64; KINDS],
}

/// The answer of [`SERVED_PROBE`](super::sql::SERVED_PROBE), by session.
pub(crate) struct Probed {
    found: HashMap<String, Found>,
    consumer: String,
    now: i64,
    /// How many heads of a claimable kind were read at most (`None`: all).
    limit: Option<i64>,
}

impl Probed {
    /// Reads the probe's `rows`, sent with `args`.
    pub(crate) fn read(rows: &[Row], args: &ProbeArgs<'_>) -> TxResult<Self> {
        let mut found: HashMap<String, Found> = HashMap::new();
        for row in rows {
            let session_id: String = row.try_get(0)?;
            let one = found.entry(session_id).or_default();
            let stored: bool = row.try_get(1)?;
            one.row = stored.then(|| row.try_get(2)).transpose()?;
            let Some(kind) = row.try_get::<_, Option<i32>>(3)? else {
                continue;
            };
            let Some(read) = usize::try_from(kind - 1)
                .ok()
                .and_then(|at| one.read.get_mut(at))
            else {
                return Err(
                    a2_store_api::StoreError::corrupt_value("kind of a probed work head").into(),
                );
            };
            *read += 1;
            let mut dispatch = Dispatch::default();
            dispatch.claim_expires_at = row.try_get(6)?;
            dispatch.failed_at = row.try_get(7)?;
            one.heads
                .push((kind, row.try_get(4)?, row.try_get(5)?, dispatch));
        }
        Ok(Self {
            found,
            consumer: args.consumer.to_owned(),
            now: args.now,
            limit: args.limit,
        })
    }

    /// Decides the pair of each `served` session (with the cursors its
    /// claim changed, in their new state) by `WorkSummary::served_row` and
    /// adds its write to `rows`; answers the sessions it cannot decide
    /// (see the module's notes), whose writes it does not add.
    pub(crate) fn decide<'a>(
        &'a self,
        served: impl IntoIterator<Item = (&'a str, &'a [CursorRow])>,
        rows: &mut Rows<'a>,
    ) -> Vec<(&'a str, &'a [CursorRow])> {
        let mut undecided = Vec::new();
        let nothing = Found::default();
        for (session_id, changed) in served {
            let found = self.found.get(session_id).unwrap_or(&nothing);
            match self.summary(found, changed) {
                Some(summary) => rows.set(
                    (session_id, self.consumer.as_str()),
                    found.row,
                    &summary,
                    Rule::Served,
                    self.now,
                ),
                None => undecided.push((session_id, changed)),
            }
        }
        undecided
    }

    /// The summary of a pair's heads after its claim: the heads `found`
    /// read without the cursors the claim `changed`, plus those cursors in
    /// their new state. `None` when what was read cannot tell: every
    /// claimable head read was changed while a claimable kind was read to
    /// its limit (more may be left), or a head of another kind read was
    /// changed (its kind was read one row deep).
    fn summary(&self, found: &Found, changed: &[CursorRow]) -> Option<WorkSummary> {
        let is_changed = |lane: &str, slot: i64| {
            changed.iter().any(|cursor| {
                cursor.consumer == self.consumer && cursor.lane == lane && cursor.slot == slot
            })
        };
        let mut summary = WorkSummary::default();
        let mut claimable_left = false;
        for (kind, lane, slot, dispatch) in &found.heads {
            if is_changed(lane, *slot) {
                if !CLAIMABLE.contains(kind) {
                    return None;
                }
                continue;
            }
            claimable_left |= CLAIMABLE.contains(kind);
            summary.add(dispatch, self.now);
        }
        let read_to_limit = self.limit.is_some_and(|limit| {
            CLAIMABLE.iter().any(|kind| {
                usize::try_from(kind - 1)
                    .ok()
                    .and_then(|at| found.read.get(at))
                    .is_some_and(|read| *read >= limit)
            })
        });
        if !claimable_left && read_to_limit {
            return None;
        }
        for cursor in changed.iter().filter(|cursor| cursor.head.is_some()) {
            summary.add(&cursor.dispatch, self.now);
        }
        Some(summary)
    }
}

/// Decides the pairs [`Probed::decide`] could not (`undecided`, each
/// session with the cursors its claim changed) from the batching writer's
/// probe, which leaves those cursors out ([`PROBE_PAIRS`], after
/// [`LOCK_PAIRS`] reads the rows the pick locked), in one round trip, and
/// adds their writes to `rows`.
pub(crate) async fn decide_again<'a>(
    tx: &Tx<'_>,
    undecided: &[(&'a str, &'a [CursorRow])],
    now: i64,
    rows: &mut Rows<'a>,
) -> TxResult<()> {
    if undecided.is_empty() {
        return Ok(());
    }
    let cursors = || {
        undecided.iter().flat_map(|(session_id, changed)| {
            changed.iter().map(move |cursor| (*session_id, cursor))
        })
    };
    let pairs = Pairs::new(
        cursors().map(|(session_id, cursor)| {
            (
                session_id,
                cursor.consumer.as_str(),
                cursor.lane.as_str(),
                cursor.slot,
            )
        }),
        now,
    );
    let lock_params = pairs.lock_params();
    let probe_params = pairs.probe_params();
    let statements = [
        Stmt::new(LOCK_PAIRS, &lock_params),
        Stmt::new(PROBE_PAIRS, &probe_params),
    ];
    let mut answers = tx.pipeline(&statements).await?;
    let probed = answers.pop().unwrap_or_default();
    let locked = answers.pop().unwrap_or_default();
    pairs.decide(
        &locked,
        &probed,
        cursors().map(|(session_id, cursor)| ((session_id, cursor.consumer.as_str()), cursor)),
        Rule::Served,
        rows,
    )
}

#[cfg(test)]
mod tests {
    use a2_store_api::work::WorkRow;
    use a2_store_api::CursorKind;

    use super::*;

    const NOW: i64 = 10_000;

    fn probed(heads: Vec<(i32, i64, Option<i64>, Option<i64>)>, limit: Option<i64>) -> Probed {
        let mut found = Found {
            row: Some(Some(NOW - 5)),
            ..Found::default()
        };
        for (kind, slot, claim_expires_at, failed_at) in heads {
            let mut dispatch = Dispatch::default();
            dispatch.claim_expires_at = claim_expires_at;
            dispatch.failed_at = failed_at;
            if let Some(read) = usize::try_from(kind - 1)
                .ok()
                .and_then(|at| found.read.get_mut(at))
            {
                *read += 1;
            }
            found.heads.push((kind, String::new(), slot, dispatch));
        }
        Probed {
            found: HashMap::from([("s".to_owned(), found)]),
            consumer: "agent".to_owned(),
            now: NOW,
            limit,
        }
    }

    /// An event cursor of `agent` at `slot`, claimed until `until` or
    /// dead-lettered (`until` `None`).
    fn changed(slot: i64, until: Option<i64>) -> CursorRow {
        let mut cursor = CursorRow::new(
            "agent",
            None,
            slot,
            CursorKind::Event,
            slot,
            Some(slot),
            None,
        );
        match until {
            Some(until) => cursor.dispatch.claim_expires_at = Some(until),
            None => cursor.dispatch.failed_at = Some(NOW),
        }
        cursor
    }

    fn row(probed: &Probed, changed: &[CursorRow]) -> Option<Option<WorkRow>> {
        let found = probed.found.get("s")?;
        probed
            .summary(found, changed)
            .map(|summary| summary.served_row(NOW))
    }

    #[test]
    fn a_claimable_head_read_beside_the_claimed_one_keeps_the_row_ready_now() {
        let probed = probed(vec![(1, 1, None, None), (1, 2, None, None)], Some(2));
        let claimed = [changed(1, Some(NOW + 1_000))];
        assert_eq!(row(&probed, &claimed), Some(Some(WorkRow::Ready(NOW))));
    }

    #[test]
    fn the_last_claimable_head_claimed_leaves_the_earliest_end() {
        let probed = probed(
            vec![(1, 1, None, None), (3, 7, Some(NOW + 50), None)],
            Some(2),
        );
        assert_eq!(
            row(&probed, &[changed(1, Some(NOW + 1_000))]),
            Some(Some(WorkRow::Ready(NOW + 50)))
        );
        let probed = self::probed(vec![(2, 1, Some(NOW - 1), None)], Some(2));
        assert_eq!(
            row(&probed, &[changed(1, Some(NOW + 1_000))]),
            Some(Some(WorkRow::Ready(NOW + 1_000)))
        );
    }

    #[test]
    fn dead_letters_only_and_nothing_left() {
        let probed = probed(vec![(1, 1, None, None)], Some(2));
        assert_eq!(
            row(&probed, &[changed(1, None)]),
            Some(Some(WorkRow::DeadLettersOnly))
        );
        let probed = self::probed(Vec::new(), Some(2));
        assert_eq!(row(&probed, &[]), Some(None));
    }

    #[test]
    fn every_claimable_head_read_changed_at_the_limit_is_undecided() {
        let probed = probed(vec![(1, 1, None, None), (1, 2, None, None)], Some(2));
        let claimed = [changed(1, Some(NOW + 1_000)), changed(2, None)];
        assert_eq!(row(&probed, &claimed), None);
        // Read below the limit: every claimable head was read.
        let probed = self::probed(vec![(1, 1, None, None), (1, 2, None, None)], Some(3));
        assert_eq!(
            row(&probed, &claimed),
            Some(Some(WorkRow::Ready(NOW + 1_000)))
        );
        // No limit: every head was read.
        let probed = self::probed(vec![(1, 1, None, None), (1, 2, None, None)], None);
        assert_eq!(
            row(&probed, &claimed),
            Some(Some(WorkRow::Ready(NOW + 1_000)))
        );
    }

    #[test]
    fn a_changed_head_read_among_the_busy_or_dead_is_undecided() {
        let probed = probed(vec![(5, 1, None, Some(NOW - 1))], Some(2));
        assert_eq!(row(&probed, &[changed(1, Some(NOW + 1_000))]), None);
    }

    #[test]
    fn served_sessions_undecided_are_answered_and_not_written() {
        let probed = probed(vec![(1, 1, None, None), (1, 2, None, None)], Some(2));
        let claimed = [changed(1, Some(NOW + 1_000)), changed(2, None)];
        let mut rows = Rows::default();
        let undecided = probed.decide([("s", &claimed[..])], &mut rows);
        assert_eq!(undecided.len(), 1);
        assert!(!rows.ready);
    }
}
