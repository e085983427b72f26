//! Reducer snapshots: each reducer's head snapshot plus the checkpoints kept
//! while one of their pins (a cursor head) holds. Only a cache.

use std::collections::{BTreeMap, HashMap, HashSet};

use a2_store_api::Snapshot;
use serde_json::Value;

use crate::ids::{CursorId, IdMap};

/// A pin: a cursor and the head it must still have.
pub(crate) type PinKey = (CursorId, u64);

#[derive(Debug)]
struct Checkpoint {
    state: Value,
    pins: HashSet<PinKey>,
}

#[derive(Debug, Default)]
struct ReducerCache {
    /// The most recent write.
    head: Option<(u64, Value)>,
    /// Pinned checkpoints by index.
    checkpoints: BTreeMap<u64, Checkpoint>,
}

/// The snapshots of one session.
///
/// Guarantees: a checkpoint exists only while at least one of its pins is
/// held, and `pins` maps each held pin to exactly the checkpoints it keeps.
#[derive(Debug, Default)]
pub(crate) struct SnapshotCache {
    reducers: HashMap<String, ReducerCache>,
    /// Keyed by store-assigned integers, hence the integer hasher.
    pins: IdMap<PinKey, HashSet<(String, u64)>>,
}

impl SnapshotCache {
    /// Records a write: it becomes the reducer's head snapshot, and a
    /// checkpoint kept by `pins` (already checked to be held) when any.
    pub fn write(&mut self, reducer: &str, index: u64, state: Value, pins: &[PinKey]) {
        let cache = self.reducers.entry(reducer.to_owned()).or_default();
        if !pins.is_empty() {
            let checkpoint = cache
                .checkpoints
                .entry(index)
                .or_insert_with(|| Checkpoint {
                    state: Value::Null,
                    pins: HashSet::new(),
                });
            checkpoint.state = state.clone();
            for pin in pins {
                checkpoint.pins.insert(*pin);
                self.pins
                    .entry(*pin)
                    .or_default()
                    .insert((reducer.to_owned(), index));
            }
        }
        cache.head = Some((index, state));
    }

    /// The highest of the head snapshot and the pinned checkpoints with
    /// `clear <= index <= at` (the head snapshot wins a tie: it is newer).
    pub fn read(&self, reducer: &str, clear: u64, at: Option<u64>) -> Option<Snapshot> {
        let cache = self.reducers.get(reducer)?;
        let at = at.unwrap_or(u64::MAX);
        if at < clear {
            return None;
        }
        let head = cache
            .head
            .as_ref()
            .filter(|(index, _)| *index >= clear && *index <= at);
        let pinned = cache.checkpoints.range(clear..=at).next_back();
        let best = match (head, pinned) {
            (Some((h, state)), Some((c, checkpoint))) => {
                if c > h {
                    (*c, &checkpoint.state)
                } else {
                    (*h, state)
                }
            }
            (Some((h, state)), None) => (*h, state),
            (None, Some((c, checkpoint))) => (*c, &checkpoint.state),
            (None, None) => return None,
        };
        Some(Snapshot::new(best.0, best.1.clone()))
    }

    /// The states stored for `reducer` at `index`: the head snapshot's when
    /// it is at `index`, and the checkpoint's at `index`.
    pub fn at(&self, reducer: &str, index: u64) -> (Option<&Value>, Option<&Value>) {
        let Some(cache) = self.reducers.get(reducer) else {
            return (None, None);
        };
        let head = cache
            .head
            .as_ref()
            .filter(|(at, _)| *at == index)
            .map(|(_, state)| state);
        let checkpoint = cache
            .checkpoints
            .get(&index)
            .map(|checkpoint| &checkpoint.state);
        (head, checkpoint)
    }

    /// Replaces the state of `reducer` at `index` in the head snapshot
    /// (when `head` and it is at `index`) and in the checkpoint (when
    /// `checkpoint`); pins and indexes stay.
    pub fn rewrite(
        &mut self,
        reducer: &str,
        index: u64,
        head: bool,
        checkpoint: bool,
        state: &Value,
    ) {
        let Some(cache) = self.reducers.get_mut(reducer) else {
            return;
        };
        if head {
            if let Some((at, stored)) = cache.head.as_mut() {
                if *at == index {
                    *stored = state.clone();
                }
            }
        }
        if checkpoint {
            if let Some(stored) = cache.checkpoints.get_mut(&index) {
                stored.state = state.clone();
            }
        }
    }

    /// Releases a pin: checkpoints it alone kept are dropped.
    pub fn release(&mut self, pin: PinKey) {
        let Some(kept) = self.pins.remove(&pin) else {
            return;
        };
        for (reducer, index) in kept {
            let Some(cache) = self.reducers.get_mut(&reducer) else {
                continue;
            };
            if let Some(checkpoint) = cache.checkpoints.get_mut(&index) {
                checkpoint.pins.remove(&pin);
                if checkpoint.pins.is_empty() {
                    cache.checkpoints.remove(&index);
                }
            }
        }
    }

    /// Releases every pin (a clear): every checkpoint is dropped.
    pub fn release_all(&mut self) {
        self.pins.clear();
        for cache in self.reducers.values_mut() {
            cache.checkpoints.clear();
        }
    }

    /// Drops head snapshots below `clear` (they can never be read again).
    pub fn drop_below(&mut self, clear: u64) {
        self.reducers.retain(|_, cache| {
            cache.checkpoints.retain(|index, _| *index >= clear);
            if cache.head.as_ref().is_some_and(|(index, _)| *index < clear) {
                cache.head = None;
            }
            cache.head.is_some() || !cache.checkpoints.is_empty()
        });
        let reducers = &self.reducers;
        self.pins.retain(|_, kept| {
            kept.retain(|(reducer, index)| {
                reducers
                    .get(reducer)
                    .is_some_and(|cache| cache.checkpoints.contains_key(index))
            });
            !kept.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checkpoints_live_while_a_pin_holds() {
        let mut cache = SnapshotCache::default();
        cache.write("r", 3, json!(3), &[(1, 3), (2, 3)]);
        cache.write("r", 5, json!(5), &[]);
        let at = |cache: &SnapshotCache, at| cache.read("r", 0, Some(at)).map(|s| s.index);
        assert_eq!(at(&cache, 4), Some(3));
        assert_eq!(at(&cache, 9), Some(5));
        cache.release((1, 3));
        assert_eq!(at(&cache, 4), Some(3), "the second pin still holds");
        cache.release((2, 3));
        assert_eq!(at(&cache, 4), None);
        assert!(cache.pins.is_empty());
        // The head snapshot wins a tie with a checkpoint at the same index.
        cache.write("r", 7, json!("pinned"), &[(3, 7)]);
        cache.write("r", 7, json!("newest"), &[]);
        let read = cache.read("r", 0, None).map(|s| s.state);
        assert_eq!(read, Some(json!("newest")));
        // Nothing below the clear is read; drop_below frees it.
        assert_eq!(cache.read("r", 8, None), None);
        cache.drop_below(8);
        assert!(cache.reducers.is_empty() && cache.pins.is_empty());
    }

    #[test]
    fn release_all_drops_every_checkpoint_but_keeps_head_snapshots() {
        let mut cache = SnapshotCache::default();
        cache.write("r", 2, json!(2), &[(1, 2)]);
        cache.write("r", 4, json!(4), &[]);
        cache.release_all();
        assert_eq!(cache.read("r", 0, Some(3)), None);
        assert_eq!(cache.read("r", 0, None).map(|s| s.index), Some(4));
    }
}
