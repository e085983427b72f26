//! What every backend opened through the facade is given: its clock and id
//! generator, and whether [`open`](crate::open) wraps it in the observability
//! layer.

use std::sync::Arc;

use a2_store_api::{Clock, IdGenerator, RandomIds, SystemClock};

/// Options of [`open`](crate::open) shared by every backend.
///
/// The default is what production wants: the system clock and time-ordered
/// random (v7 UUID) event ids. Tests inject a
/// [`ManualClock`](a2_store_api::ManualClock) and
/// [`CounterIds`](a2_store_api::CounterIds) to drive leases and get
/// predictable ids.
///
/// With the `tracing` or `metrics` feature, `with_tracing`
/// and `with_metrics` make `open` return the store
/// wrapped in `ObservedStore` (both off by default).
///
/// ```
/// use a2_store::{CounterIds, ManualClock, OpenOptions};
///
/// let clock = ManualClock::new(1_000);
/// let options = OpenOptions::default()
///     .with_clock(clock.clone())
///     .with_ids(CounterIds::new("e"));
/// assert_eq!(options.clock.now_ms(), 1_000);
/// assert_eq!(options.ids.next_id(), "e1");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OpenOptions {
    /// The only source of time the store reads (leases, retry delays,
    /// presence TTLs, `created_at`).
    pub clock: Arc<dyn Clock>,
    /// The source of ids for events appended without one.
    pub ids: Arc<dyn IdGenerator>,
    /// Opens the store read-only: a SQLite file with
    /// `SQLITE_OPEN_READ_ONLY`, a PostgreSQL schema without creating or
    /// migrating it (its transactions read-only). Nothing is created,
    /// migrated or written; a missing, empty or non-store database, or one
    /// of an older schema version, is a typed error naming it, and every
    /// write call fails with a typed error. `memory:` ignores it (it starts
    /// empty). `false` by default.
    pub read_only: bool,
    /// Wrap the store in a layer that opens a `tracing` span per call
    /// (see [`layer`](crate::layer)); off by default.
    #[cfg(feature = "tracing")]
    pub tracing: bool,
    /// Wrap the store in a layer that records `metrics` per call (see
    /// [`layer`](crate::layer)); off by default.
    #[cfg(feature = "metrics")]
    pub metrics: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            read_only: false,
            #[cfg(feature = "tracing")]
            tracing: false,
            #[cfg(feature = "metrics")]
            metrics: false,
        }
    }
}

impl OpenOptions {
    /// Uses `clock` as the store's clock.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Uses `ids` as the store's id generator.
    pub fn with_ids(mut self, ids: impl IdGenerator + 'static) -> Self {
        self.ids = Arc::new(ids);
        self
    }

    /// Opens the store read-only (see [`OpenOptions::read_only`]).
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Uses an already shared clock (for example one the test also holds).
    pub fn with_shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Uses an already shared id generator.
    pub fn with_shared_ids(mut self, ids: Arc<dyn IdGenerator>) -> Self {
        self.ids = ids;
        self
    }

    /// Turns the per-call `tracing` spans of the opened store on or off.
    #[cfg(feature = "tracing")]
    pub fn with_tracing(mut self, enabled: bool) -> Self {
        self.tracing = enabled;
        self
    }

    /// Turns the per-call `metrics` of the opened store on or off.
    #[cfg(feature = "metrics")]
    pub fn with_metrics(mut self, enabled: bool) -> Self {
        self.metrics = enabled;
        self
    }
}
