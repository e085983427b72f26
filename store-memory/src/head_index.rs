//! The ordered indexes over cursor heads that make claims, renewals and
//! `has_pending` cost O(log n) instead of a scan of every cursor.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::cursor::{CursorId, Placement};

/// A head in claim order: `(index, consumer, lane, cursor)`, lane `None` first.
pub(crate) type HeadKey = (u64, Arc<str>, Option<Arc<str>>, CursorId);

/// A head in one consumer's claim order: `(index, lane, cursor)`.
pub(crate) type ConsumerHeadKey = (u64, Option<Arc<str>>, CursorId);

/// The identity of a head as the indexes need it.
#[derive(Debug, Clone)]
pub(crate) struct HeadEntry {
    /// The cursor.
    pub id: CursorId,
    /// Its consumer.
    pub consumer: Arc<str>,
    /// Its lane.
    pub lane: Option<Arc<str>>,
    /// The head index.
    pub index: u64,
}

/// Every head of a session, by placement.
///
/// Guarantees (checked by the cursor table's invariant test): a head with
/// placement `Ready` is in `ready` and its consumer's `ready_by_consumer`
/// set; `Busy(t)` is in `busy` and `busy_by_consumer` under `t`; `Dead` is
/// in `dead`; `pending` counts the `Ready` and `Busy` heads per consumer.
#[derive(Debug, Default)]
pub(crate) struct HeadIndex {
    /// Claimable heads in claim order.
    pub ready: BTreeSet<HeadKey>,
    /// Claimable heads per consumer, for claims restricted to some consumers.
    pub ready_by_consumer: HashMap<Arc<str>, BTreeSet<ConsumerHeadKey>>,
    /// Claimed (or retry-delayed) heads by expiry.
    pub busy: BTreeSet<(i64, CursorId)>,
    /// Busy heads per consumer by expiry.
    pub busy_by_consumer: HashMap<Arc<str>, BTreeSet<(i64, CursorId)>>,
    /// Dead-lettered heads in claim order.
    pub dead: BTreeSet<HeadKey>,
    /// Ready + busy heads per consumer.
    pub pending: HashMap<Arc<str>, usize>,
    /// Ready + busy heads in total.
    pub pending_total: usize,
}

impl HeadIndex {
    /// Records `entry` under `placement`.
    pub fn insert(&mut self, entry: &HeadEntry, placement: Placement) {
        match placement {
            Placement::Idle => return,
            Placement::Ready => {
                self.ready.insert(head_key(entry));
                self.ready_by_consumer
                    .entry(entry.consumer.clone())
                    .or_default()
                    .insert((entry.index, entry.lane.clone(), entry.id));
            }
            Placement::Busy(expiry) => {
                self.busy.insert((expiry, entry.id));
                self.busy_by_consumer
                    .entry(entry.consumer.clone())
                    .or_default()
                    .insert((expiry, entry.id));
            }
            Placement::Dead => {
                self.dead.insert(head_key(entry));
                return;
            }
        }
        *self.pending.entry(entry.consumer.clone()).or_default() += 1;
        self.pending_total += 1;
    }

    /// Forgets `entry` recorded under `placement`.
    pub fn remove(&mut self, entry: &HeadEntry, placement: Placement) {
        match placement {
            Placement::Idle => return,
            Placement::Ready => {
                self.ready.remove(&head_key(entry));
                remove_nested(
                    &mut self.ready_by_consumer,
                    &entry.consumer,
                    &(entry.index, entry.lane.clone(), entry.id),
                );
            }
            Placement::Busy(expiry) => {
                self.busy.remove(&(expiry, entry.id));
                remove_nested(
                    &mut self.busy_by_consumer,
                    &entry.consumer,
                    &(expiry, entry.id),
                );
            }
            Placement::Dead => {
                self.dead.remove(&head_key(entry));
                return;
            }
        }
        if let Some(count) = self.pending.get_mut(&entry.consumer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.pending.remove(&entry.consumer);
            }
        }
        self.pending_total = self.pending_total.saturating_sub(1);
    }

    /// Whether any head of `consumers` (`None`: any consumer) is pending.
    pub fn has_pending<'a>(&self, consumers: Option<impl Iterator<Item = &'a str>>) -> bool {
        match consumers {
            None => self.pending_total > 0,
            Some(mut names) => names.any(|name| self.pending.get(name).is_some_and(|n| *n > 0)),
        }
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
}

fn head_key(entry: &HeadEntry) -> HeadKey {
    (
        entry.index,
        entry.consumer.clone(),
        entry.lane.clone(),
        entry.id,
    )
}

fn remove_nested<T: Ord>(map: &mut HashMap<Arc<str>, BTreeSet<T>>, consumer: &Arc<str>, item: &T) {
    if let Some(set) = map.get_mut(consumer) {
        set.remove(item);
        if set.is_empty() {
            map.remove(consumer);
        }
    }
}
