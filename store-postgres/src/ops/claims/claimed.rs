//! What this store's claims and renewals last wrote to each cursor they
//! hold, so that completing one of those heads can be decided before its
//! row is read and sent in one round trip.
//!
//! A remembered row is a guess, never an answer: the completion sends with
//! its writes a guard ([`UNCHANGED`]) that reads the row it locked and the
//! session's clear index in a fresh snapshot and aborts the transaction
//! (SQLSTATE [`MISSED`](crate::error::MISSED)) unless both are what was remembered. The two-step
//! path reads exactly those columns and decides with the same
//! `a2_store_api::dispatch` rules, so when the guard passes, the writes are
//! the ones it would have made; when it fails, nothing was written and the
//! call runs the two-step path (`transact!`, once, without a pause).

use std::collections::HashMap;
use std::sync::Mutex;

use a2_store_api::retention::incarnation_current;
use tokio_postgres::types::ToSql;

use crate::cursor_table::CursorWrites;
use crate::db::SessionState;
use crate::rows::{CursorKey, CursorRow};

/// The guard of a completion decided on a remembered row: `$1` session,
/// `$2`..`$18` the row's columns in [`crate::cursor_table::PUT_ALL`]'s
/// order (one row, as scalars: `CursorWrites::first_row`), `$19` the clear
/// index and `$20` the incarnation remembered. Sent after the row's lock ([`LOCK`]), so its snapshot
/// sees the row this transaction holds.
pub(crate) const UNCHANGED: &str = "SELECT expect_unchanged(\
    EXISTS (SELECT 1 FROM cursors c WHERE c.session_id = $1 AND c.consumer = $2 \
       AND c.lane = $3 AND c.slot = $4 \
       AND (c.kind, c.position, c.head, c.types, c.attempt_count, c.first_claimed_at, \
            c.last_claimed_at, c.claim_holder, c.claim_expires_at, c.failure_count, \
            c.last_failed_at, c.last_failed_attempt, c.last_error, c.failed_at) \
       IS NOT DISTINCT FROM ($5::smallint, $6::bigint, $7::bigint, $8::jsonb, $9::bigint, \
            $10::bigint, $11::bigint, $12::text, $13::bigint, $14::bigint, $15::bigint, \
            $16::bigint, $17::text, $18::bigint)) \
    AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = $1 AND s.clear_index = $19 \
       AND s.incarnation = $20))";

/// The lock of the cursor a remembered row names, taken before
/// [`UNCHANGED`] reads it: `$1` session, `$2` consumer, `$3` lane, `$4` slot.
pub(crate) const LOCK: &str = "SELECT 1 FROM cursors WHERE session_id = $1 AND consumer = $2 \
    AND lane = $3 AND slot = $4 FOR UPDATE";

/// The bound values of [`LOCK`] and [`UNCHANGED`] for a remembered row.
pub(crate) struct Guard<'k> {
    session_id: &'k str,
    writes: CursorWrites<'k>,
    key: CursorKey,
    clear: i64,
    incarnation: i64,
}

impl<'k> Guard<'k> {
    /// The guard of `known`, a row of `session_id`.
    pub(crate) fn new(session_id: &'k str, known: &'k Known) -> Option<Self> {
        Some(Self {
            session_id,
            writes: CursorWrites::new(session_id, [&known.cursor])?,
            key: known.cursor.key(),
            clear: known.clear,
            incarnation: known.incarnation,
        })
    }

    /// The parameters of [`LOCK`].
    pub(crate) fn lock_params(&self) -> [&(dyn ToSql + Sync); 4] {
        [&self.session_id, &self.key.0, &self.key.1, &self.key.2]
    }

    /// The parameters of [`UNCHANGED`].
    pub(crate) fn unchanged_params(&self) -> Option<Vec<&(dyn ToSql + Sync)>> {
        let mut params = self.writes.first_row()?.to_vec();
        params.push(&self.clear);
        params.push(&self.incarnation);
        Some(params)
    }
}

/// A cursor row as this store last wrote it, with the session's clear index
/// and incarnation read in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    pub cursor: CursorRow,
    pub clear: i64,
    pub incarnation: i64,
}

impl Known {
    /// Whether a request naming incarnation `requested` may be decided on
    /// this row (`retention::incarnation_current`); when not, the caller
    /// reads the rows as usual and answers from them.
    pub(crate) fn current(&self, requested: Option<u64>) -> bool {
        u64::try_from(self.incarnation)
            .is_ok_and(|incarnation| incarnation_current(requested, Some(incarnation)))
    }
}

/// A cursor's full key: session, consumer, stored lane, slot.
type Key = (String, String, String, i64);

/// The rows remembered, at most [`Claimed::MOST`] (all forgotten when full,
/// as the claim hints are): only event cursors, whose completion needs no
/// other read.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    rows: Mutex<HashMap<Key, Known>>,
}

impl Claimed {
    /// The most rows remembered.
    const MOST: usize = 4096;

    /// Remembers `cursor` as just written (committed) with the session's
    /// clear index and incarnation (`state`); a row not worth remembering (not an event cursor held
    /// by a claim) forgets its key instead.
    pub(crate) fn remember(&self, session_id: &str, cursor: &CursorRow, state: &SessionState) {
        let key = (
            session_id.to_owned(),
            cursor.consumer.clone(),
            cursor.lane.clone(),
            cursor.slot,
        );
        let held = cursor.kind == a2_store_api::CursorKind::Event
            && cursor.head.is_some()
            && cursor.dispatch.claim_holder.is_some()
            && !cursor.dispatch.is_dead_lettered();
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if !held {
            rows.remove(&key);
            return;
        }
        if rows.len() >= Self::MOST && !rows.contains_key(&key) {
            rows.clear();
        }
        rows.insert(
            key,
            Known {
                cursor: cursor.clone(),
                clear: state.clear,
                incarnation: state.incarnation,
            },
        );
    }

    /// Takes the row remembered for a cursor (it is forgotten: a guess is
    /// tried once).
    pub(crate) fn take(
        &self,
        session_id: &str,
        consumer: &str,
        lane: &str,
        slot: i64,
    ) -> Option<Known> {
        let key = (
            session_id.to_owned(),
            consumer.to_owned(),
            lane.to_owned(),
            slot,
        );
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.remove(&key)
    }

    /// Takes the row remembered for the event cursor of `consumer` at
    /// `index` (`None` for a lane, whose rows are never remembered).
    pub(crate) fn take_event(
        &self,
        session_id: &str,
        consumer: &str,
        lane: Option<&str>,
        index: u64,
    ) -> Option<Known> {
        match (lane, i64::try_from(index)) {
            (None, Ok(slot)) => self.take(session_id, consumer, "", slot),
            _ => None,
        }
    }

    /// How many rows are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::CursorKind;

    fn held(consumer: &str, slot: i64) -> CursorRow {
        let mut cursor = CursorRow::new(
            consumer,
            None,
            slot,
            CursorKind::Event,
            slot - 1,
            Some(slot),
            None,
        );
        cursor.dispatch.take("w".into(), 10, 20, None);
        cursor
    }

    #[test]
    fn a_held_event_cursor_is_remembered_once() {
        let claimed = Claimed::default();
        let cursor = held("c", 3);
        claimed.remember("s", &cursor, &SessionState::default());
        let known = claimed.take("s", "c", "", 3);
        assert_eq!(
            known,
            Some(Known {
                cursor: cursor.clone(),
                clear: 0,
                incarnation: 0,
            })
        );
        assert_eq!(claimed.take("s", "c", "", 3), None, "a guess is tried once");
    }

    #[test]
    fn a_row_not_held_forgets_its_key() {
        let claimed = Claimed::default();
        let mut cursor = held("c", 3);
        claimed.remember("s", &cursor, &SessionState::default());
        cursor.head = None;
        claimed.remember("s", &cursor, &SessionState::default());
        assert_eq!(claimed.take("s", "c", "", 3), None);
        let lane = CursorRow::new("c", Some("l"), 0, CursorKind::Lane, 0, Some(1), None);
        claimed.remember("s", &lane, &SessionState::default());
        assert_eq!(claimed.len(), 0);
    }

    #[test]
    fn a_full_memory_starts_over() {
        let claimed = Claimed::default();
        for slot in 1..=i64::try_from(Claimed::MOST).unwrap() {
            claimed.remember("s", &held("c", slot), &SessionState::default());
        }
        assert_eq!(claimed.len(), Claimed::MOST);
        claimed.remember("s", &held("d", 1), &SessionState::default());
        assert_eq!(claimed.len(), 1);
    }
}
