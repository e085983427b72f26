//! The ordered indexes over cursor heads that make claims, renewals and
//! `has_pending` cost O(log n) instead of a scan of every cursor.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::cursor::Placement;
use crate::ids::{ConsumerId, CursorId};

/// A head in claim order with its names: `(index, consumer, lane, cursor)`,
/// lane `None` first. Keys the dead letters, which are listed in that order.
pub(crate) type HeadKey = (u64, Arc<str>, Option<Arc<str>>, CursorId);

/// A claimable head by index: `(index, cursor)`. Two integers, so the sets
/// claims and completions update on every call compare and move no names;
/// heads sharing an index are put in `(consumer, lane)` order by the walk
/// that reads them (`claims::candidates`).
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
    /// Its claimable heads by index (kept once the session is split).
    ready: BTreeSet<ReadyKey>,
    /// Its busy heads by expiry (kept once the session is split).
    busy: BTreeSet<(i64, CursorId)>,
    /// Its ready + busy heads (always kept).
    pending: usize,
}

/// One consumer's ready and busy heads, as claims serving it read them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConsumerView<'a> {
    /// Its claimable heads by index.
    pub ready: &'a BTreeSet<ReadyKey>,
    /// Its busy heads by expiry.
    pub busy: &'a BTreeSet<(i64, CursorId)>,
}

/// Every head of a session, by placement.
///
/// Guarantees (checked by the cursor table's invariant test): a head with
/// placement `Ready` is in `ready`, `Busy(t)` is in `busy` under `t`, `Dead`
/// is in `dead`; [`HeadIndex::consumer`] gives exactly one consumer's ready
/// and busy heads; each consumer's pending count is its `Ready` and `Busy`
/// heads. While a session has one consumer (slot 0) its heads are the
/// session's, so the per-consumer sets are not kept: each claim and
/// completion then updates two sets, not four. They are built (a copy) when
/// a second consumer appears, see [`HeadIndex::split_by_consumer`].
#[derive(Debug, Default)]
pub(crate) struct HeadIndex {
    /// Claimable heads by index.
    pub ready: BTreeSet<ReadyKey>,
    /// Claimed (or retry-delayed) heads by expiry.
    pub busy: BTreeSet<(i64, CursorId)>,
    /// Dead-lettered heads in claim order.
    pub dead: BTreeSet<HeadKey>,
    /// Per consumer slot: its pending count, and its ready and busy heads
    /// when `split`.
    by_consumer: Vec<ConsumerHeads>,
    /// Whether the per-consumer sets are kept (the session has had more
    /// than one consumer since its last clear).
    split: bool,
    /// Ready + busy heads in total.
    pub pending_total: usize,
}

impl HeadIndex {
    /// The ready and busy heads of consumer slot `consumer` (`None`: the
    /// slot has none and never had).
    pub fn consumer(&self, consumer: ConsumerId) -> Option<ConsumerView<'_>> {
        if self.split {
            self.by_consumer.get(consumer).map(|slot| ConsumerView {
                ready: &slot.ready,
                busy: &slot.busy,
            })
        } else {
            (consumer == 0).then_some(ConsumerView {
                ready: &self.ready,
                busy: &self.busy,
            })
        }
    }

    /// Starts keeping per-consumer sets; called before a session's second
    /// consumer gets its slot, when every head so far is slot 0's.
    /// O(heads) once per clear.
    pub fn split_by_consumer(&mut self) {
        if self.split {
            return;
        }
        let (ready, busy) = (self.ready.clone(), self.busy.clone());
        let first = self.slot(0);
        first.ready = ready;
        first.busy = busy;
        self.split = true;
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
        let split = self.split;
        match placement {
            Placement::Idle => return,
            Placement::Ready => {
                self.ready.insert((entry.index, entry.id));
                if split {
                    self.slot(entry.consumer_id)
                        .ready
                        .insert((entry.index, entry.id));
                }
            }
            Placement::Busy(expiry) => {
                self.busy.insert((expiry, entry.id));
                if split {
                    self.slot(entry.consumer_id).busy.insert((expiry, entry.id));
                }
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
        let split = self.split;
        let slot = self.by_consumer.get_mut(entry.consumer_id);
        match placement {
            Placement::Idle => return,
            Placement::Ready => {
                self.ready.remove(&(entry.index, entry.id));
                if let Some(slot) = slot.filter(|_| split) {
                    slot.ready.remove(&(entry.index, entry.id));
                }
            }
            Placement::Busy(expiry) => {
                self.busy.remove(&(expiry, entry.id));
                if let Some(slot) = slot.filter(|_| split) {
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
        self.by_consumer
            .get(consumer)
            .is_some_and(|slot| slot.pending > 0)
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
        if self.split != other.split {
            return Some("per-consumer sets kept for the wrong number of consumers");
        }
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
