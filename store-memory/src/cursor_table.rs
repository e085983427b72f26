//! The cursors of one session: lookup by key, the finished event cursors'
//! completion records, and the head indexes kept in step with every change.

use std::collections::HashMap;
use std::sync::Arc;

use a2_store_api::{CursorKind, WorkSummary};

use crate::cursor::{Completion, CursorState, Placement};
use crate::head_index::{HeadEntry, HeadIndex};
use crate::ids::{ConsumerId, CursorId, IdMap};

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

/// One consumer's cursors by the key a ref names, and its finished event
/// cursors' completion records.
#[derive(Debug)]
struct ConsumerKeys {
    /// Its live event cursors by index.
    events: IdMap<u64, CursorId>,
    /// Its live lane and log cursors by lane.
    lanes: HashMap<Arc<str>, CursorId>,
    /// Its finished event cursors by index: their completion record.
    finished: IdMap<u64, Option<Completion>>,
}

impl ConsumerKeys {
    fn new() -> Self {
        Self {
            events: IdMap::default(),
            lanes: HashMap::new(),
            finished: IdMap::default(),
        }
    }
}

/// Every live cursor of a session plus the records of finished event cursors.
///
/// Guarantees: every change to a cursor goes through [`CursorTable::modify`]
/// (or insert/finish/clear), which keeps [`HeadIndex`] equal to the cursors'
/// placements; finished event cursors are not in the table or the indexes.
/// Each consumer with a cursor (or a finished record) has a slot number,
/// interned once, so the hot paths hash a consumer name at most once.
#[derive(Debug, Default)]
pub(crate) struct CursorTable {
    next_id: CursorId,
    cursors: IdMap<CursorId, CursorState>,
    /// Consumer name → slot in `consumers` (and in the head index).
    names: HashMap<Arc<str>, ConsumerId>,
    consumers: Vec<ConsumerKeys>,
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

    /// Every consumer with a slot (a cursor since the last clear).
    pub fn consumer_names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.names.keys()
    }

    /// The table's own copy of `consumer`'s name, when it has cursors here.
    pub fn consumer_name(&self, consumer: &str) -> Option<&Arc<str>> {
        self.names.get_key_value(consumer).map(|(name, _)| name)
    }

    /// What `consumer`'s unfinished heads add up to at `now` (see
    /// [`WorkSummary`]): its ready heads and expired claims are claimable,
    /// unexpired ones busy; read off the head indexes, without a walk over
    /// the claimable heads.
    pub fn work_summary(&self, consumer: &str, now: i64) -> WorkSummary {
        let mut summary = WorkSummary::default();
        let Some(slot) = self.consumer_id(consumer) else {
            return summary;
        };
        if let Some(view) = self.heads.consumer(slot) {
            let expired = view.busy.range(..=(now, CursorId::MAX)).count();
            summary.claimable = (view.ready.len() + expired) as u64;
            summary.busy = (view.busy.len() - expired) as u64;
            summary.next_expiry = view
                .busy
                .range((now.saturating_add(1), 0)..)
                .next()
                .map(|(expiry, _)| *expiry);
        }
        summary.dead_lettered = self
            .heads
            .dead
            .iter()
            .filter(|(_, name, ..)| &**name == consumer)
            .count() as u64;
        summary
    }

    /// The slot of `consumer`, if it ever had a cursor since the last clear.
    pub fn consumer_id(&self, consumer: &str) -> Option<ConsumerId> {
        self.names.get(consumer).copied()
    }

    /// The live cursor a ref names: an event cursor by `(consumer, index)`,
    /// a lane or log cursor by `(consumer, lane)`.
    pub fn find(
        &self,
        consumer: &str,
        lane: Option<&str>,
        index: u64,
    ) -> Option<(CursorId, &CursorState)> {
        let keys = self.consumers.get(self.consumer_id(consumer)?)?;
        let id = *match lane {
            None => keys.events.get(&index)?,
            Some(lane) => keys.lanes.get(lane)?,
        };
        self.cursors.get(&id).map(|cursor| (id, cursor))
    }

    /// Resolves a ref `(consumer, lane, index)` to a live or finished cursor.
    pub fn lookup(&self, consumer: &str, lane: Option<&str>, index: u64) -> Lookup<'_> {
        let Some(keys) = self
            .consumer_id(consumer)
            .and_then(|slot| self.consumers.get(slot))
        else {
            return Lookup::Missing;
        };
        let live = match lane {
            None => keys.events.get(&index),
            Some(lane) => keys.lanes.get(lane),
        };
        if let Some((id, cursor)) = live.and_then(|id| self.cursors.get_key_value(id)) {
            return Lookup::Live(*id, cursor);
        }
        if lane.is_none() {
            if let Some(record) = keys.finished.get(&index) {
                return Lookup::Finished(record.as_ref());
            }
        }
        Lookup::Missing
    }

    /// Every live cursor.
    pub fn iter(&self) -> impl Iterator<Item = &CursorState> {
        self.cursors.values()
    }

    /// The slot of `consumer`, interning it when new.
    fn intern(&mut self, consumer: &Arc<str>) -> ConsumerId {
        if let Some(slot) = self.names.get(&**consumer) {
            return *slot;
        }
        let slot = self.consumers.len();
        if slot > 0 {
            self.heads.split_by_consumer();
        }
        self.consumers.push(ConsumerKeys::new());
        self.names.insert(consumer.clone(), slot);
        slot
    }

    /// Adds a cursor (its key must be free) and indexes its head.
    pub fn insert(&mut self, mut cursor: CursorState) -> CursorId {
        let id = self.next_id;
        self.next_id += 1;
        cursor.consumer_id = self.intern(&cursor.consumer);
        cursor.placement = cursor.natural_placement();
        if let Some(entry) = entry_of(id, &cursor) {
            self.heads.insert(&entry, cursor.placement);
        }
        if let Some(keys) = self.consumers.get_mut(cursor.consumer_id) {
            match &cursor.lane {
                None => {
                    keys.events
                        .insert(cursor.head.unwrap_or(cursor.position), id);
                }
                Some(lane) => {
                    keys.lanes.insert(lane.clone(), id);
                }
            }
        }
        self.cursors.insert(id, cursor);
        id
    }

    /// Applies `change` to cursor `id` and re-indexes its head (only when
    /// its index or placement changed). The change must not alter the
    /// cursor's consumer, lane or kind.
    pub fn modify<R>(
        &mut self,
        id: CursorId,
        change: impl FnOnce(&mut CursorState) -> R,
    ) -> Option<R> {
        let cursor = self.cursors.get_mut(&id)?;
        let before = (cursor.head, cursor.placement);
        let result = change(cursor);
        cursor.placement = cursor.natural_placement();
        if before != (cursor.head, cursor.placement) {
            if let Some(index) = before.0 {
                let entry = HeadEntry {
                    index,
                    ..entry_at(id, cursor, index)
                };
                self.heads.remove(&entry, before.1);
            }
            if let Some(entry) = entry_of(id, cursor) {
                self.heads.insert(&entry, cursor.placement);
            }
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
        if let Some(keys) = self.consumers.get_mut(cursor.consumer_id) {
            keys.events.remove(&index);
            keys.finished.insert(index, completion);
        }
    }

    /// Moves every busy head whose expiry is at or before `now` to the
    /// claimable set. Amortised O(log n) per head: each claim makes one busy
    /// entry and it is promoted at most once.
    pub fn promote_expired(&mut self, now: i64) {
        for id in self.heads.expired(now) {
            let Some(cursor) = self.cursors.get_mut(&id) else {
                continue;
            };
            let placement = cursor.placement;
            if let Some(entry) = entry_of(id, cursor) {
                self.heads.remove(&entry, placement);
                self.heads.insert(&entry, Placement::Ready);
                cursor.placement = Placement::Ready;
            }
        }
    }

    /// The clear: drops event and lane cursors and every completion record,
    /// and parks log cursors at `marker` with no head. Consumer slots are
    /// re-interned for the surviving log cursors only.
    pub fn clear_at(&mut self, marker: u64) {
        self.cursors
            .retain(|_, cursor| cursor.kind == CursorKind::Log);
        self.names.clear();
        self.consumers.clear();
        self.heads.clear();
        let mut ids: Vec<CursorId> = self.cursors.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(consumer) = self.cursors.get(&id).map(|cursor| cursor.consumer.clone()) else {
                continue;
            };
            let slot = self.intern(&consumer);
            let Some(cursor) = self.cursors.get_mut(&id) else {
                continue;
            };
            cursor.consumer_id = slot;
            cursor.position = marker;
            cursor.head = None;
            cursor.queue.clear();
            cursor.dispatch = Default::default();
            cursor.completions.clear();
            cursor.placement = Placement::Idle;
            if let (Some(keys), Some(lane)) = (self.consumers.get_mut(slot), &cursor.lane) {
                keys.lanes.insert(lane.clone(), id);
            }
        }
    }

    /// Brute-force check that the head indexes equal a recomputation from
    /// the cursors, and that keys resolve to their cursors (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expected = HeadIndex::default();
        if self.consumers.len() > 1 {
            expected.split_by_consumer();
        }
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
            if self.consumer_id(&cursor.consumer) != Some(cursor.consumer_id) {
                return Err(format!("cursor {id} has a stale consumer slot"));
            }
            let key_index = cursor.head.unwrap_or(cursor.position);
            let found = self.find(&cursor.consumer, cursor.lane.as_deref(), key_index);
            if found.map(|(found, _)| found) != Some(*id) {
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
        let keys: usize = self
            .consumers
            .iter()
            .map(|keys| keys.events.len() + keys.lanes.len())
            .sum();
        if keys != self.cursors.len() {
            return Err("stale cursor keys".into());
        }
        let mut slots: Vec<ConsumerId> = self.names.values().copied().collect();
        slots.sort_unstable();
        if slots != (0..self.consumers.len()).collect::<Vec<_>>() {
            return Err("consumer slots and names disagree".into());
        }
        match expected.differences(&self.heads) {
            Some(difference) => Err(difference.into()),
            None => Ok(()),
        }
    }
}

/// The index entry of a cursor's head, if it has one.
fn entry_of(id: CursorId, cursor: &CursorState) -> Option<HeadEntry<'_>> {
    cursor.head.map(|index| entry_at(id, cursor, index))
}

/// The index entry of a cursor with its head at `index`.
fn entry_at(id: CursorId, cursor: &CursorState, index: u64) -> HeadEntry<'_> {
    HeadEntry {
        id,
        consumer_id: cursor.consumer_id,
        consumer: &cursor.consumer,
        lane: &cursor.lane,
        index,
    }
}
