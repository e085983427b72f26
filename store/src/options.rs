//! What every backend opened through the facade is given: its clock and id
//! generator, and which layers [`open`](crate::open) wraps it in: payload
//! encryption and offload (features `encryption`, `offload`) and
//! observability (features `tracing`, `metrics`).

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
    /// Encrypt payloads, snapshot states and presence values with these
    /// keys (the layer `EncryptedStore`, see
    /// [`layer::codec`](crate::layer::codec)); `None` (the default)
    /// stores them as they are, unless the URL asks with `keys=`.
    #[cfg(feature = "encryption")]
    pub keys: Option<Arc<dyn crate::layer::codec::KeyProvider>>,
    /// With keys: leave a payload whose key is not held as it is stored
    /// (its envelope) instead of failing the read, for operator tools that
    /// show "encrypted (key k2)" (see
    /// `EncryptedStore::with_missing_keys_left_sealed`). `false` by
    /// default; an app leaves it off.
    #[cfg(feature = "encryption")]
    pub missing_keys_left_sealed: bool,
    /// Keep payloads above a threshold in an object store (the layer
    /// `OffloadStore`, see [`layer::offload`](crate::layer::offload));
    /// `None` (the default) keeps every payload in the database, unless
    /// the URL asks with `offload=`.
    #[cfg(feature = "offload")]
    pub offload: Option<OffloadOptions>,
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
            #[cfg(feature = "encryption")]
            keys: None,
            #[cfg(feature = "encryption")]
            missing_keys_left_sealed: false,
            #[cfg(feature = "offload")]
            offload: None,
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

    /// Turns the per-call `metrics` of the opened store on or off (and the
    /// payload layers' counters, when they are applied).
    #[cfg(feature = "metrics")]
    pub fn with_metrics(mut self, enabled: bool) -> Self {
        self.metrics = enabled;
        self
    }

    /// Encrypts payloads with `keys` (see [`OpenOptions::keys`]). A URL
    /// that also names keys (`keys=`) is refused: give them once.
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # async fn demo() -> Result<(), a2_store::StoreError> {
    /// use std::sync::Arc;
    /// use a2_store::{Keyring, OpenOptions, SecretKey};
    ///
    /// let keys = Keyring::new().with_key("k1", SecretKey::from_bytes([1; 32]))?;
    /// let store = a2_store::open("memory:", OpenOptions::default().with_keys(Arc::new(keys))).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// # #[cfg(feature = "memory")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    #[cfg(feature = "encryption")]
    pub fn with_keys(mut self, keys: Arc<dyn crate::layer::codec::KeyProvider>) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Leaves payloads whose key is not held sealed instead of failing the
    /// read (see [`OpenOptions::missing_keys_left_sealed`]).
    #[cfg(feature = "encryption")]
    pub fn with_missing_keys_left_sealed(mut self, sealed: bool) -> Self {
        self.missing_keys_left_sealed = sealed;
        self
    }

    /// Offloads large payloads as `offload` says (see
    /// [`OpenOptions::offload`]). A URL that also asks (`offload=`) is
    /// refused: give it once.
    #[cfg(feature = "offload")]
    pub fn with_offload(mut self, offload: OffloadOptions) -> Self {
        self.offload = Some(offload);
        self
    }
}

/// Where [`open`](crate::open) offloads large payloads, and above which size
/// (feature `offload`; see [`layer::offload`](crate::layer::offload)).
///
/// ```
/// # #[cfg(feature = "memory")]
/// # async fn demo() -> Result<(), a2_store::StoreError> {
/// use a2_store::{OffloadOptions, OpenOptions};
///
/// # let scratch = tempfile::tempdir().map_err(|e| a2_store::StoreError::backend("a temporary directory", e))?;
/// let dir = scratch.path().join("payloads"); // any directory
/// let offload = OffloadOptions::directory(&dir).with_threshold(256 * 1024);
/// let store = a2_store::open("memory:", OpenOptions::default().with_offload(offload)).await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// # #[cfg(feature = "memory")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[cfg(feature = "offload")]
#[derive(Clone)]
#[non_exhaustive]
pub struct OffloadOptions {
    /// The object store the payloads go to.
    pub location: OffloadLocation,
    /// Payloads whose JSON is longer than this many bytes are offloaded
    /// (default [`DEFAULT_THRESHOLD`](crate::layer::offload::DEFAULT_THRESHOLD), 64 KiB).
    pub threshold: usize,
    /// Every object key starts with this prefix (default none).
    pub prefix: String,
}

/// The object store of [`OffloadOptions`].
#[cfg(feature = "offload")]
#[derive(Clone)]
#[non_exhaustive]
pub enum OffloadLocation {
    /// Files under a local directory (created when missing), each synced
    /// before the row that references it is written.
    Directory(std::path::PathBuf),
    /// Any `object_store` store (S3, GCS, Azure with the `offload-*`
    /// features, or one of the app's own).
    ObjectStore(Arc<dyn crate::layer::offload::object_store::ObjectStore>),
}

#[cfg(feature = "offload")]
impl OffloadOptions {
    /// Offload to files under `dir`.
    pub fn directory(dir: impl Into<std::path::PathBuf>) -> Self {
        Self::at(OffloadLocation::Directory(dir.into()))
    }

    /// Offload to `store`.
    pub fn object_store(store: Arc<dyn crate::layer::offload::object_store::ObjectStore>) -> Self {
        Self::at(OffloadLocation::ObjectStore(store))
    }

    fn at(location: OffloadLocation) -> Self {
        Self {
            location,
            threshold: crate::layer::offload::DEFAULT_THRESHOLD,
            prefix: String::new(),
        }
    }

    /// Offloads payloads whose JSON is longer than `bytes` (0: every one).
    pub fn with_threshold(mut self, bytes: usize) -> Self {
        self.threshold = bytes;
        self
    }

    /// Puts every object key under `prefix` (e.g. `"a2/payloads"`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// `inner` wrapped in the offloading layer these options describe.
    pub(crate) fn apply(
        &self,
        inner: Arc<dyn a2_store_api::Store>,
    ) -> a2_store_api::Result<crate::layer::offload::OffloadStore> {
        use crate::layer::offload::OffloadStore;
        let store = match &self.location {
            OffloadLocation::Directory(dir) => OffloadStore::local(inner, dir)?,
            OffloadLocation::ObjectStore(objects) => OffloadStore::new(inner, Arc::clone(objects)),
        };
        let store = if self.prefix.is_empty() {
            store
        } else {
            store.with_prefix(&self.prefix)
        };
        Ok(store.with_threshold(self.threshold))
    }
}

#[cfg(feature = "offload")]
impl std::fmt::Debug for OffloadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadOptions")
            .field("location", &self.location)
            .field("threshold", &self.threshold)
            .field("prefix", &self.prefix)
            .finish()
    }
}

#[cfg(feature = "offload")]
impl std::fmt::Debug for OffloadLocation {
    /// A directory's path; an object store is not shown (its configuration
    /// may carry credentials).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Directory(dir) => f.debug_tuple("Directory").field(dir).finish(),
            Self::ObjectStore(_) => f.write_str("ObjectStore(..)"),
        }
    }
}
