//! The cursors of one session: lookup by key, the finished event cursors'
//! completion records, and the head indexes kept in step with every change.

use std::collections::HashMap;
use std::sync::Arc;

use a2_store_api::CursorKind;

use crate::cursor::{Completion, CursorId, CursorKey, CursorState, Placement};
use crate::head_index::{HeadEntry, HeadIndex};

/// How a `(consumer, lane, index)` ref resolves.
#[derive(Debug)]
pub(crate) enum Lookup<'a> {
    /// A live cursor.
    Live(CursorId, &'a CursorState),
    /// A finished event cursor (moved past its one head) and its completion
    /// record, `None` when it was skipped.
    Finished(Option<&'a Completion>),
    /// No cursor.
    Missing,
}

/// Every live cursor of a session plus the records of finished event cursors.
///
/// Guarantees: every change to a cursor goes through [`CursorTable::modify`]
/// (or insert/finish/clear), which keeps [`HeadIndex`] equal to the cursors'
/// placements; finished event cursors are not in the table or the indexes.
#[derive(Debug, Default)]
pub(crate) struct CursorTable {
    next_id: CursorId,
    cursors: HashMap<CursorId, CursorState>,
    keys: HashMap<CursorKey, CursorId>,
    /// Finished event cursors by consumer, then index: their completion record.
    finished: HashMap<Arc<str>, HashMap<u64, Option<Completion>>>,
    heads: HeadIndex,
}

impl CursorTable {
    /// The head indexes.
    pub fn heads(&self) -> &HeadIndex {
        &self.heads
    }

    /// The live cursor `id`.
    pub fn get(&self, id: CursorId) -> Option<&CursorState> {
        self.cursors.get(&id)
    }

    /// The live cursor named by `key`.
    pub fn by_key(&self, key: &CursorKey) -> Option<(CursorId, &CursorState)> {
        let id = *self.keys.get(key)?;
        self.cursors.get(&id).map(|cursor| (id, cursor))
    }

    /// Resolves a ref `(consumer, lane, index)` to a live or finished cursor.
    pub fn lookup(&self, consumer: &str, lane: Option<&str>, index: u64) -> Lookup<'_> {
        if let Some((id, cursor)) = self.by_key(&CursorKey::of(consumer, lane, index)) {
            return Lookup::Live(id, cursor);
        }
        if lane.is_none() {
            let record = self
                .finished
                .get(consumer)
                .and_then(|records| records.get(&index));
            if let Some(record) = record {
                return Lookup::Finished(record.as_ref());
            }
        }
        Lookup::Missing
    }

    /// Every live cursor.
    pub fn iter(&self) -> impl Iterator<Item = &CursorState> {
        self.cursors.values()
    }

    /// Adds a cursor (its key must be free) and indexes its head.
    pub fn insert(&mut self, mut cursor: CursorState) -> CursorId {
        let id = self.next_id;
        self.next_id += 1;
        cursor.placement = cursor.natural_placement();
        if let Some(entry) = entry_of(id, &cursor) {
            self.heads.insert(&entry, cursor.placement);
        }
        self.keys.insert(cursor.key(), id);
        self.cursors.insert(id, cursor);
        id
    }

    /// Applies `change` to cursor `id` and re-indexes its head. The change
    /// must not alter the cursor's consumer, lane or kind.
    pub fn modify<R>(
        &mut self,
        id: CursorId,
        change: impl FnOnce(&mut CursorState) -> R,
    ) -> Option<R> {
        let cursor = self.cursors.get_mut(&id)?;
        if let Some(entry) = entry_of(id, cursor) {
            self.heads.remove(&entry, cursor.placement);
        }
        let result = change(cursor);
        cursor.placement = cursor.natural_placement();
        if let Some(entry) = entry_of(id, cursor) {
            self.heads.insert(&entry, cursor.placement);
        }
        Some(result)
    }

    /// Removes a finished event cursor, keeping only its completion record.
    pub fn finish_event(&mut self, id: CursorId, completion: Option<Completion>) {
        let Some(cursor) = self.cursors.remove(&id) else {
            return;
        };
        if let Some(entry) = entry_of(id, &cursor) {
            self.heads.remove(&entry, cursor.placement);
        }
        let index = cursor.head.unwrap_or(cursor.position);
        self.keys
            .remove(&CursorKey::of(&cursor.consumer, None, index));
        self.finished
            .entry(cursor.consumer)
            .or_default()
            .insert(index, completion);
    }

    /// Moves every busy head whose expiry is at or before `now` to the
    /// claimable set. Amortised O(log n) per head: each claim makes one busy
    /// entry and it is promoted at most once.
    pub fn promote_expired(&mut self, now: i64) {
        for id in self.heads.expired(now) {
            let Some(cursor) = self.cursors.get_mut(&id) else {
                continue;
            };
            if let Some(entry) = entry_of(id, cursor) {
                self.heads.remove(&entry, cursor.placement);
                cursor.placement = Placement::Ready;
                self.heads.insert(&entry, Placement::Ready);
            }
        }
    }

    /// The clear: drops event and lane cursors and every completion record,
    /// and parks log cursors at `marker` with no head.
    pub fn clear_at(&mut self, marker: u64) {
        self.cursors
            .retain(|_, cursor| cursor.kind == CursorKind::Log);
        for cursor in self.cursors.values_mut() {
            cursor.position = marker;
            cursor.head = None;
            cursor.queue.clear();
            cursor.dispatch = Default::default();
            cursor.completions.clear();
            cursor.placement = Placement::Idle;
        }
        let live = &self.cursors;
        self.keys.retain(|_, id| live.contains_key(id));
        self.finished.clear();
        self.heads.clear();
    }

    /// Brute-force check that the head indexes equal a recomputation from
    /// the cursors, and that keys resolve to their cursors (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expected = HeadIndex::default();
        for (id, cursor) in &self.cursors {
            let natural = cursor.natural_placement();
            let promoted = matches!(
                (cursor.placement, natural),
                (Placement::Ready, Placement::Busy(_))
            );
            if cursor.placement != natural && !promoted {
                return Err(format!(
                    "cursor {id} placed {:?}, state says {natural:?}",
                    cursor.placement
                ));
            }
            if let Some(entry) = entry_of(*id, cursor) {
                expected.insert(&entry, cursor.placement);
            }
            if self.keys.get(&cursor.key()) != Some(id) {
                return Err(format!("cursor {id} not found by its key"));
            }
            if cursor.kind == CursorKind::Event && cursor.head.is_none() {
                return Err(format!("finished event cursor {id} is still live"));
            }
            if cursor.kind == CursorKind::Lane && cursor.head.is_none() && !cursor.queue.is_empty()
            {
                return Err(format!("lane cursor {id} has a queue but no head"));
            }
        }
        if self.keys.len() != self.cursors.len() {
            return Err("stale cursor keys".into());
        }
        if expected.ready != self.heads.ready
            || expected.ready_by_consumer != self.heads.ready_by_consumer
        {
            return Err("ready index differs from the cursors".into());
        }
        if expected.busy != self.heads.busy
            || expected.busy_by_consumer != self.heads.busy_by_consumer
        {
            return Err("busy index differs from the cursors".into());
        }
        if expected.dead != self.heads.dead {
            return Err("dead index differs from the cursors".into());
        }
        if expected.pending != self.heads.pending
            || expected.pending_total != self.heads.pending_total
        {
            return Err("pending counts differ from the cursors".into());
        }
        Ok(())
    }
}

/// The index entry of a cursor's head, if it has one.
fn entry_of(id: CursorId, cursor: &CursorState) -> Option<HeadEntry> {
    cursor.head.map(|index| HeadEntry {
        id,
        consumer: cursor.consumer.clone(),
        lane: cursor.lane.clone(),
        index,
    })
}
