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

/// SQLite's largest page count (`PRAGMA max_page_count` clamps to it).
pub(crate) const SQLITE_MAX_PAGE_COUNT: u64 = 0xFFFF_FFFE;

impl SqliteOptions {
    /// The validated `PRAGMA max_page_count` value, if a cap is set:
    /// `InvalidInput` for 0, values above SQLite's maximum clamped to it.
    pub(crate) fn page_cap(&self) -> Result<Option<i64>, a2_store_api::StoreError> {
        match self.max_page_count {
            None => Ok(None),
            Some(0) => Err(a2_store_api::StoreError::invalid_input(
                "SqliteOptions::max_page_count must be at least 1 page (use None for no cap)",
            )),
            Some(pages) => {
                let pages = pages.min(SQLITE_MAX_PAGE_COUNT);
                i64::try_from(pages).map(Some).map_err(|_| {
                    a2_store_api::StoreError::invalid_input(format!(
                        "SqliteOptions::max_page_count {pages} does not fit SQLite's page counter"
                    ))
                })
            }
        }
    }
}

/// Options of [`SqliteStore::open`](crate::SqliteStore::open) and
/// [`SqliteStore::open_in_memory`](crate::SqliteStore::open_in_memory).
///
/// The default runs on the system clock with time-ordered random ids,
/// [`Durability::Full`], a 5 s busy timeout, 4 connections and a 5 ms poll
/// interval for commits made by other processes, and no cap on the database size.
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
    /// How often the file's watcher checks `PRAGMA data_version` for
    /// commits of other processes while a subscriber or a `claim_work`
    /// waits: one cheap check per file, not per session, and none while
    /// nobody waits. Appends through stores of this process arrive at
    /// once. The first store of the process on a file sets it for the
    /// file; values below 1 ms are raised to 1 ms.
    pub poll_interval: Duration,
    /// Caps the database file at this many pages (`PRAGMA max_page_count`,
    /// set on every connection; pages are 4096 bytes unless the file was
    /// created with another page size). `None` (the default) leaves SQLite's
    /// own limit. A write that would grow the database past the cap fails
    /// with `StoreError::StorageFull` and changes nothing; reads keep
    /// working. To make room, reopen the store with a larger cap (or `None`):
    /// the cap is not stored in the file, each open applies its own. A cap
    /// below the file's current size holds the file at its current size
    /// (nothing is lost). `Some(0)` is refused with `InvalidInput`; values
    /// above SQLite's maximum (4294967294) are clamped to it. The WAL file
    /// is not counted: it grows between checkpoints and shrinks back.
    pub max_page_count: Option<u64>,
    /// Opens the database read-only (`SQLITE_OPEN_READ_ONLY`): nothing is
    /// created, migrated or written, not even the journal mode, so a
    /// read-only file can be inspected and stays byte-identical. The file
    /// must exist and hold this build's schema version: a missing file, an
    /// empty or non-store file and an older version (which only a
    /// read-write open migrates) are typed errors naming the path. Every
    /// write call on such a store fails with `StoreError::InvalidInput`
    /// before touching the database. Like any reader of a WAL database,
    /// SQLite may create the `-wal` and `-shm` side files beside it (and a
    /// read-only directory without them cannot be read); the database file
    /// itself is never written. `false` by default.
    pub read_only: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(5),
            pool_size: 4,
            poll_interval: Duration::from_millis(5),
            max_page_count: None,
            read_only: false,
        }
    }
}
