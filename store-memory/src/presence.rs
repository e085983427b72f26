//! Presence fields: last writer wins per field by the writer's timestamp,
//! with TTLs and tombstones for deletions.

use std::collections::BTreeMap;

use a2_store_api::{presence, PresenceMeta, PresenceResult, PresenceRow};
use serde_json::Value;

#[derive(Debug, Clone)]
struct Entry {
    /// `Null` is a tombstone.
    value: Value,
    seen: Option<u64>,
    at: i64,
    expires_at: i64,
}

/// The presence fields of one session, by participant then field.
///
/// Guarantees: a write is skipped only when the stored entry is unexpired
/// and has a strictly greater `at`; tombstones and expired entries are
/// never read.
#[derive(Debug, Default)]
pub(crate) struct PresenceTable {
    participants: BTreeMap<String, BTreeMap<String, Entry>>,
}

impl PresenceTable {
    /// Writes `values` for `participant` at store time `now`.
    pub fn set(
        &mut self,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
        now: i64,
    ) -> PresenceResult {
        let expires_at = now.saturating_add(meta.ttl_ms);
        let fields = self.participants.entry(participant.to_owned()).or_default();
        let mut applied = BTreeMap::new();
        for (field, value) in values {
            let existing = fields.get(&field).map(|entry| (entry.at, entry.expires_at));
            if !presence::write_wins(existing, meta.at, now) {
                continue;
            }
            fields.insert(
                field.clone(),
                Entry {
                    value: value.clone(),
                    seen: meta.seen,
                    at: meta.at,
                    expires_at,
                },
            );
            applied.insert(field, value);
        }
        if fields.is_empty() {
            self.participants.remove(participant);
        }
        let applied_count = applied.len();
        PresenceResult::new(applied, applied_count)
    }

    /// The stored value of `participant`'s `field` (`null` for a
    /// tombstone) and when it expires, expired or not.
    pub fn stored(&self, participant: &str, field: &str) -> Option<(&Value, i64)> {
        self.participants
            .get(participant)?
            .get(field)
            .map(|entry| (&entry.value, entry.expires_at))
    }

    /// Replaces the value of `participant`'s `field` (a rewrite); its
    /// `at`, `seen` and expiry stay.
    pub fn rewrite(&mut self, participant: &str, field: &str, value: &Value) {
        if let Some(entry) = self
            .participants
            .get_mut(participant)
            .and_then(|fields| fields.get_mut(field))
        {
            entry.value = value.clone();
        }
    }

    /// Drops the entries expired at `now`; returns how many went.
    pub fn drop_expired(&mut self, now: i64) -> u64 {
        let mut dropped = 0;
        self.participants.retain(|_, fields| {
            let before = fields.len();
            fields.retain(|_, entry| entry.expires_at > now);
            dropped += (before - fields.len()) as u64;
            !fields.is_empty()
        });
        dropped
    }

    /// Live rows at `now` by participant, then field; expired entries are
    /// dropped on the way.
    pub fn read(&mut self, now: i64) -> Vec<PresenceRow> {
        let mut rows = Vec::new();
        self.participants.retain(|participant, fields| {
            fields.retain(|_, entry| entry.expires_at > now);
            for (field, entry) in fields.iter() {
                if entry.value.is_null() {
                    continue;
                }
                rows.push(PresenceRow::new(
                    participant.clone(),
                    field.clone(),
                    entry.value.clone(),
                    entry.seen,
                    entry.at,
                    entry.expires_at,
                ));
            }
            !fields.is_empty()
        });
        rows
    }
}
