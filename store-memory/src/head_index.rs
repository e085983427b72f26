//! The ordered indexes over cursor heads that make claims, renewals and
//! `has_pending` cost O(log n) instead of a scan of every cursor.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::cursor::{CursorId, Placement};

/// A consumer's slot number in one session (interned by the cursor table).
pub(crate) type ConsumerId = usize;

/// A head in claim order with its names: `(index, consumer, lane, cursor)`,
/// lane `None` first. Keys the dead letters, which are listed in that order.
pub(crate) type HeadKey = (u64, Arc<str>, Option<Arc<str>>, CursorId);

/// A claimable head by index: `(index, cursor)`. Two integers, so the sets
/// claims and completions update on every call compare and move no names;
/// heads sharing an index are put in `(consumer, lane)` order by the walk
/// that reads them (`claim::candidates`).
pub(crate) type ReadyKey = (u64, CursorId);

/// The identity of a head as the indexes need it, borrowed from its cursor
/// (the shared names are cloned only into the ordered sets that keep them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadEntry<'a> {
    /// The cursor.
    pub id: CursorId,
    /// Its consumer's slot.
    pub consumer_id: ConsumerId,
    /// Its consumer.
    pub consumer: &'a Arc<str>,
    /// Its lane.
    pub lane: &'a Option<Arc<str>>,
    /// The head index.
    pub index: u64,
}

/// One consumer's heads: reached by slot number, so no name is hashed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ConsumerHeads {
    /// Its claimable heads by index.
    pub ready: BTreeSet<ReadyKey>,
    /// Its busy heads by expiry.
    pub busy: BTreeSet<(i64, CursorId)>,
    /// Its ready + busy heads.
    pub pending: usize,
}

/// Every head of a session, by placement.
///
/// Guarantees (checked by the cursor table's invariant test): a head with
/// placement `Ready` is in `ready` and its consumer's `ready` set; `Busy(t)`
/// is in `busy` and its consumer's `busy` set under `t`; `Dead` is in
/// `dead`; each consumer's `pending` counts its `Ready` and `Busy` heads.
#[derive(Debug, Default)]
pub(crate) struct HeadIndex {
    /// Claimable heads by index.
    pub ready: BTreeSet<ReadyKey>,
    /// Claimed (or retry-delayed) heads by expiry.
    pub busy: BTreeSet<(i64, CursorId)>,
    /// Dead-lettered heads in claim order.
    pub dead: BTreeSet<HeadKey>,
    /// Per consumer slot: its ready and busy heads and pending count.
    pub by_consumer: Vec<ConsumerHeads>,
    /// Ready + busy heads in total.
    pub pending_total: usize,
}

impl HeadIndex {
    /// The heads of consumer slot `consumer` (`None`: it has none).
    pub fn consumer(&self, consumer: ConsumerId) -> Option<&ConsumerHeads> {
        self.by_consumer.get(consumer)
    }

    fn slot(&mut self, consumer: ConsumerId) -> &mut ConsumerHeads {
        if self.by_consumer.len() <= consumer {
            self.by_consumer
                .resize_with(consumer + 1, ConsumerHeads::default);
        }
        &mut self.by_consumer[consumer]
    }

    /// Records `entry` under `placement`.
    pub fn insert(&mut self, entry: &HeadEntry<'_>, placement: Placement) {
        match placement {
            Placement::Idle => return,
            Placement::Ready => {
                self.ready.insert((entry.index, entry.id));
                self.slot(entry.consumer_id)
                    .ready
                    .insert((entry.index, entry.id));
            }
            Placement::Busy(expiry) => {
                self.busy.insert((expiry, entry.id));
                self.slot(entry.consumer_id).busy.insert((expiry, entry.id));
            }
            Placement::Dead => {
                self.dead.insert(head_key(entry));
                return;
            }
        }
        self.slot(entry.consumer_id).pending += 1;
        self.pending_total += 1;
    }

    /// Forgets `entry` recorded under `placement`.
    pub fn remove(&mut self, entry: &HeadEntry<'_>, placement: Placement) {
        match placement {
            Placement::Idle => return,
            Placement::Ready => {
                self.ready.remove(&(entry.index, entry.id));
                if let Some(slot) = self.by_consumer.get_mut(entry.consumer_id) {
                    slot.ready.remove(&(entry.index, entry.id));
                }
            }
            Placement::Busy(expiry) => {
                self.busy.remove(&(expiry, entry.id));
                if let Some(slot) = self.by_consumer.get_mut(entry.consumer_id) {
                    slot.busy.remove(&(expiry, entry.id));
                }
            }
            Placement::Dead => {
                self.dead.remove(&head_key(entry));
                return;
            }
        }
        if let Some(slot) = self.by_consumer.get_mut(entry.consumer_id) {
            slot.pending = slot.pending.saturating_sub(1);
        }
        self.pending_total = self.pending_total.saturating_sub(1);
    }

    /// Whether any head is pending.
    pub fn any_pending(&self) -> bool {
        self.pending_total > 0
    }

    /// Whether consumer slot `consumer` has a pending head.
    pub fn consumer_pending(&self, consumer: ConsumerId) -> bool {
        self.consumer(consumer).is_some_and(|slot| slot.pending > 0)
    }

    /// The busy heads whose expiry is at or before `now`, earliest first.
    pub fn expired(&self, now: i64) -> Vec<CursorId> {
        self.busy
            .range(..=(now, CursorId::MAX))
            .map(|(_, id)| *id)
            .collect()
    }

    /// Drops every head.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Whether both indexes hold the same heads (a missing consumer slot
    /// equals an empty one; tests only).
    #[cfg(test)]
    pub fn differences(&self, other: &Self) -> Option<&'static str> {
        let slots = self.by_consumer.len().max(other.by_consumer.len());
        let empty = ConsumerHeads::default();
        let per_consumer_differs = (0..slots).any(|slot| {
            self.by_consumer.get(slot).unwrap_or(&empty)
                != other.by_consumer.get(slot).unwrap_or(&empty)
        });
        if self.ready != other.ready {
            return Some("ready index differs from the cursors");
        }
        if self.busy != other.busy {
            return Some("busy index differs from the cursors");
        }
        if self.dead != other.dead {
            return Some("dead index differs from the cursors");
        }
        if self.pending_total != other.pending_total || per_consumer_differs {
            return Some("per-consumer heads or pending counts differ from the cursors");
        }
        None
    }
}

fn head_key(entry: &HeadEntry<'_>) -> HeadKey {
    (
        entry.index,
        entry.consumer.clone(),
        entry.lane.clone(),
        entry.id,
    )
}
