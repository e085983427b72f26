//! The append-only event log of one session, with the indexes that find
//! rows by id (de-duplication) and by type (log cursors).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use a2_store_api::{Cause, Payload, StoredEvent, CLEAR_EVENT_TYPE};

/// One stored row; its index is implied by its place in the log.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// Unique among the rows at or above the clear (shared with the id index).
    pub id: Arc<str>,
    /// The event type (shared with the type index: one allocation per type).
    pub event_type: Arc<str>,
    /// The payload as appended.
    pub payload: Payload,
    /// Store clock at append, ms.
    pub created_at: i64,
    /// The attempt that produced it.
    pub cause: Option<Cause>,
}

/// The rows of one session, `offset + 1 ..= head`, plus their indexes.
///
/// Guarantees: indexes are contiguous and 1-based; `ids` maps every id of a
/// remaining row to the newest row holding it; `by_type` and `markers` hold
/// exactly the indexes of the remaining rows of each type.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    rows: VecDeque<Row>,
    /// Rows at or below this index were reclaimed.
    offset: u64,
    /// Index of the latest clear marker, 0 when never cleared.
    clear_index: u64,
    /// Id → index of the newest row holding it.
    ids: HashMap<Arc<str>, u64>,
    /// Event type → indexes of the rows of that type (markers excluded).
    by_type: HashMap<Arc<str>, BTreeSet<u64>>,
    /// Indexes of the clear markers still stored.
    markers: BTreeSet<u64>,
}

impl EventLog {
    /// The last index, 0 when nothing was ever appended.
    pub fn head(&self) -> u64 {
        self.offset + self.rows.len() as u64
    }

    /// The index of the latest clear marker, 0 when never cleared.
    pub fn clear_index(&self) -> u64 {
        self.clear_index
    }

    /// Rows at or below this index were reclaimed.
    pub fn reclaimed_through(&self) -> u64 {
        self.offset
    }

    /// Whether nothing was ever appended.
    pub fn is_empty(&self) -> bool {
        self.head() == 0
    }

    /// The row at `index`, if it exists and was not reclaimed.
    pub fn row(&self, index: u64) -> Option<&Row> {
        if index <= self.offset {
            return None;
        }
        let position = usize::try_from(index - self.offset - 1).ok()?;
        self.rows.get(position)
    }

    /// Replaces the payload of the row at `index` (a rewrite); `false` when
    /// there is no such row. Nothing else of the row changes.
    pub fn set_payload(&mut self, index: u64, payload: Payload) -> bool {
        if index <= self.offset {
            return false;
        }
        let Ok(position) = usize::try_from(index - self.offset - 1) else {
            return false;
        };
        match self.rows.get_mut(position) {
            Some(row) => {
                row.payload = payload;
                true
            }
            None => false,
        }
    }

    /// The stored form of the row at `index`.
    pub fn stored(&self, session_id: &str, index: u64) -> Option<StoredEvent> {
        self.row(index).map(|row| to_stored(session_id, index, row))
    }

    /// The index of the row owning `id`, ignoring rows below the clear
    /// (their ids may be reused).
    pub fn owner_of(&self, id: &str) -> Option<u64> {
        self.ids
            .get(id)
            .copied()
            .filter(|index| *index >= self.clear_index && self.row(*index).is_some())
    }

    /// The shared name of `event_type`: the type index's key when the type
    /// is already stored, so rows of one type share one allocation.
    pub fn intern_type(&self, event_type: &str) -> Arc<str> {
        match self.by_type.get_key_value(event_type) {
            Some((name, _)) => name.clone(),
            None => Arc::from(event_type),
        }
    }

    /// Appends `row` and returns its index.
    pub fn push(&mut self, row: Row) -> u64 {
        let index = self.head() + 1;
        self.ids.insert(row.id.clone(), index);
        if &*row.event_type == CLEAR_EVENT_TYPE {
            self.markers.insert(index);
        } else {
            self.by_type
                .entry(row.event_type.clone())
                .or_default()
                .insert(index);
        }
        self.rows.push_back(row);
        index
    }

    /// Makes an empty log start after `offset`, as if the rows up to it had
    /// been reclaimed (a fork's log starts at its source's clear). A log
    /// with rows is left as it is.
    pub fn start_after(&mut self, offset: u64) {
        if self.rows.is_empty() && self.offset == 0 {
            self.offset = offset;
        }
    }

    /// Makes `index` (a marker just pushed) the clear index.
    pub fn set_clear_index(&mut self, index: u64) {
        self.clear_index = index;
    }

    /// Deletes up to `max` rows below the clear marker, oldest first, and
    /// returns how many were deleted.
    pub fn reclaim(&mut self, max: usize) -> u64 {
        let mut removed = 0;
        while removed < max as u64 && self.offset + 1 < self.clear_index {
            let Some(row) = self.rows.pop_front() else {
                break;
            };
            self.offset += 1;
            removed += 1;
            let index = self.offset;
            if self.ids.get(&row.id) == Some(&index) {
                self.ids.remove(&row.id);
            }
            if &*row.event_type == CLEAR_EVENT_TYPE {
                self.markers.remove(&index);
            } else if let Some(set) = self.by_type.get_mut(&row.event_type) {
                set.remove(&index);
                if set.is_empty() {
                    self.by_type.remove(&row.event_type);
                }
            }
        }
        removed
    }

    /// Whether rows below the clear marker remain.
    pub fn has_reclaimable(&self) -> bool {
        self.offset + 1 < self.clear_index
    }

    /// The first index after `after` whose type a log cursor taking `types`
    /// (`None`: all) takes; never a clear marker. O(k log n) for k types.
    pub fn next_taken(&self, after: u64, types: Option<&[String]>) -> Option<u64> {
        let from = after.max(self.offset).saturating_add(1);
        match types {
            None => {
                let mut index = from;
                while index <= self.head() {
                    if !self.markers.contains(&index) {
                        return Some(index);
                    }
                    index += 1;
                }
                None
            }
            Some(types) => types
                .iter()
                .filter_map(|event_type| {
                    self.by_type
                        .get(event_type.as_str())
                        .and_then(|set| set.range(from..).next().copied())
                })
                .min(),
        }
    }

    /// The remaining rows with `after < index <= through`, at most `limit`.
    pub fn read(
        &self,
        session_id: &str,
        after: u64,
        through: u64,
        limit: Option<usize>,
    ) -> Vec<StoredEvent> {
        let through = through.min(self.head());
        let first = after.max(self.offset).saturating_add(1);
        if first > through {
            return Vec::new();
        }
        // Both fit: first..=through lies within the stored rows.
        let start = usize::try_from(first - self.offset - 1).unwrap_or(usize::MAX);
        let count = usize::try_from(through - first + 1).unwrap_or(usize::MAX);
        let count = limit.map_or(count, |limit| count.min(limit));
        let end = start.saturating_add(count).min(self.rows.len());
        if start >= end {
            return Vec::new();
        }
        self.rows
            .range(start..end)
            .zip(first..)
            .map(|(row, index)| to_stored(session_id, index, row))
            .collect()
    }

    /// Brute-force check of the id and type indexes (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut by_type: HashMap<Arc<str>, BTreeSet<u64>> = HashMap::new();
        let mut markers = BTreeSet::new();
        let mut ids: HashMap<Arc<str>, u64> = HashMap::new();
        for (row, index) in self.rows.iter().zip(self.offset + 1..) {
            ids.insert(row.id.clone(), index);
            if &*row.event_type == CLEAR_EVENT_TYPE {
                markers.insert(index);
            } else {
                by_type
                    .entry(row.event_type.clone())
                    .or_default()
                    .insert(index);
            }
        }
        if by_type != self.by_type {
            return Err("type index differs from the rows".into());
        }
        if markers != self.markers {
            return Err("marker index differs from the rows".into());
        }
        for (id, index) in &ids {
            if self.ids.get(id) != Some(index) {
                return Err(format!("id index misses '{id}' at {index}"));
            }
        }
        if self.ids.len() != ids.len() {
            return Err("id index holds ids of reclaimed rows".into());
        }
        Ok(())
    }
}

/// The stored form of `row` at `index`.
pub(crate) fn to_stored(session_id: &str, index: u64, row: &Row) -> StoredEvent {
    StoredEvent::new(
        session_id.to_owned(),
        index,
        String::from(&*row.id),
        String::from(&*row.event_type),
        row.payload.clone(),
        row.created_at,
    )
    .with_cause(row.cause.clone())
}
