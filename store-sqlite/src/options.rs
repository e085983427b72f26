//! How a [`SqliteStore`](crate::SqliteStore) is opened: clock, ids, durability, pool.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{Clock, IdGenerator, RandomIds, SystemClock};

/// How hard a commit waits for the disk (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// `synchronous = FULL`: every acknowledged call survives a power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: every acknowledged call survives a process
    /// crash; the last commits before a power loss may be rolled back (never
    /// half-applied). Faster commits.
    Normal,
}

impl Durability {
    /// The `PRAGMA synchronous` value this durability sets.
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// Options of [`SqliteStore::open`](crate::SqliteStore::open) and
/// [`SqliteStore::open_in_memory`](crate::SqliteStore::open_in_memory).
///
/// The default runs on the system clock with time-ordered random ids,
/// [`Durability::Full`], a 5 s busy timeout, 4 connections and a 50 ms poll
/// interval for appends made by other processes.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// The only source of time the store reads (claims, leases, presence, `created_at`).
    pub clock: Arc<dyn Clock>,
    /// The source of ids for events appended without one (and clear markers).
    pub ids: Arc<dyn IdGenerator>,
    /// How hard a commit waits for the disk.
    pub durability: Durability,
    /// How long a call waits for another writer (another store or process)
    /// before failing with `StoreError::Busy`.
    pub busy_timeout: Duration,
    /// Connections kept open (at least 1; an in-memory store always uses 1).
    /// Reads run in parallel on them; writes are serialized by SQLite.
    pub pool_size: usize,
    /// How often a subscriber checks for appends made by other processes on
    /// the same file. Appends through stores of this process arrive at once.
    pub poll_interval: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(5),
            pool_size: 4,
            poll_interval: Duration::from_millis(50),
        }
    }
}
