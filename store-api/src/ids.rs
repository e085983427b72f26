//! The injected id generator: backends make event ids only through [`IdGenerator`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of fresh event ids, unique within any session they are used in.
pub trait IdGenerator: Send + Sync + std::fmt::Debug {
    /// A new id, never returned before by this generator.
    fn next_id(&self) -> String;
}

/// Time-ordered random UUIDs (v7): unique like v4, and new ids sort after
/// old ones, which keeps a SQL backend's unique id index append-only.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomIds;

impl IdGenerator for RandomIds {
    fn next_id(&self) -> String {
        uuid::Uuid::now_v7().to_string()
    }
}

/// Ids `{prefix}{n}` from a counter starting at 1. Clones share the counter.
#[derive(Debug, Clone)]
pub struct CounterIds {
    prefix: Arc<str>,
    next: Arc<AtomicU64>,
}

impl CounterIds {
    /// A counter producing `{prefix}1`, `{prefix}2`, ...
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: Arc::from(prefix.into()),
            next: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl Default for CounterIds {
    fn default() -> Self {
        Self::new("id-")
    }
}

impl IdGenerator for CounterIds {
    fn next_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        format!("{}{n}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_ids_count_from_one_and_share() {
        let ids = CounterIds::new("e");
        let clone = ids.clone();
        assert_eq!(ids.next_id(), "e1");
        assert_eq!(clone.next_id(), "e2");
    }

    #[test]
    fn random_ids_are_time_ordered_and_unique() {
        let a = RandomIds.next_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = RandomIds.next_id();
        assert_ne!(a, b);
        assert!(a < b, "v7 ids sort by creation time");
    }
}
