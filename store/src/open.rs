//! Opening a store from a URL, with the backends this build was compiled with.

use std::sync::Arc;

use a2_store_api::{Store, StoreError};

use crate::options::OpenOptions;
use crate::url::{LayerUrlOptions, LayeredUrl, StoreUrl};

/// Opens the store `url` names (see [`StoreUrl`] for the forms and options)
/// with the clock and ids of `options`, wrapped in the layers the URL (see
/// [`LayeredUrl`]) and `options` ask for, from the backend out:
///
/// 1. `OffloadStore` (feature `offload`; `offload=DIR` in the URL or
///    `OpenOptions::with_offload`): payloads above the threshold go to the
///    object store;
/// 2. `EncryptedStore` (feature `encryption`; `keys=env:VAR|file:PATH` or
///    `OpenOptions::with_keys`): payloads are encrypted before they reach
///    the offloading layer, so the object store holds ciphertext too. It
///    shares one `RecyclingIds` with the backend, wrapping the ids of
///    `options`;
/// 3. `ObservedStore` (labelled with the backend, `memory`, `sqlite` or
///    `postgres`) when `options` turn tracing or metrics on; metrics also
///    turn on the payload layers' counters.
///
/// Errors: a malformed URL or unknown option, or a URL whose backend feature
/// is off, is [`InvalidInput`](a2_store_api::ErrorCode::InvalidInput) with a
/// message saying what to change; a database that cannot be opened keeps the
/// backend's error (for example
/// [`IncompatibleSchema`](a2_store_api::ErrorCode::IncompatibleSchema) for a
/// file written by a newer release). A URL asking for a layer this build
/// was compiled without, or a layer given both in the URL and in `options`,
/// is `InvalidInput` naming the feature or the key; keys that cannot be
/// loaded are `InvalidInput` naming the variable or file (never a key).
/// Nothing is created when the URL is rejected, and a read-only store
/// never creates the offload directory.
///
/// ```
/// # #[cfg(feature = "memory")]
/// # async fn demo() -> Result<(), a2_store::StoreError> {
/// use a2_store::{ErrorCode, ListSessions, OpenOptions};
///
/// let store = a2_store::open("memory:", OpenOptions::default()).await?;
/// assert!(store.sessions(ListSessions::default()).await?.is_empty());
///
/// let err = a2_store::open("sqlite:app.db?colour=blue", OpenOptions::default())
///     .await
///     .err()
///     .expect("unknown option");
/// assert_eq!(err.code(), ErrorCode::InvalidInput);
/// # Ok(())
/// # }
/// # #[cfg(feature = "memory")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub async fn open(url: &str, options: OpenOptions) -> Result<Arc<dyn Store>, StoreError> {
    let parsed = LayeredUrl::parse(url)?;
    open_layered(&parsed, options).await
}

/// Opens an already parsed [`StoreUrl`] (the backend's part: the payload
/// layers come from `options` only); see [`open`].
pub async fn open_url(url: &StoreUrl, options: OpenOptions) -> Result<Arc<dyn Store>, StoreError> {
    open_layered(&LayeredUrl::from(url.clone()), options).await
}

/// Opens an already parsed [`LayeredUrl`], with the payload layers it and
/// `options` ask for; see [`open`].
pub async fn open_layered(
    url: &LayeredUrl,
    options: OpenOptions,
) -> Result<Arc<dyn Store>, StoreError> {
    let (layers, options) = Layers::resolve(url, options)?;
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    let layer = observe(&url.store, &options);
    let store = open_backend(&url.store, options).await?;
    let store = layers.apply(store)?;
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    let store = layer(store);
    Ok(store)
}

/// The payload layers to put over the backend, resolved before anything
/// is opened.
struct Layers {
    #[cfg(feature = "offload")]
    offload: Option<crate::options::OffloadOptions>,
    #[cfg(feature = "encryption")]
    keys: Option<Arc<dyn crate::layer::codec::KeyProvider>>,
    #[cfg(feature = "encryption")]
    ids: Option<crate::layer::codec::RecyclingIds>,
    #[cfg(feature = "encryption")]
    left_sealed: bool,
    #[cfg(all(feature = "metrics", any(feature = "encryption", feature = "offload")))]
    metrics: bool,
}

impl Layers {
    /// What `url` and `options` ask for: checked (features, keys given
    /// twice), keys loaded, and `options` with the ids the encryption
    /// layer shares with the backend.
    #[cfg_attr(
        not(any(feature = "encryption", feature = "offload")),
        allow(unused_mut)
    )]
    fn resolve(
        url: &LayeredUrl,
        mut options: OpenOptions,
    ) -> Result<(Self, OpenOptions), StoreError> {
        let asked = &url.layers;
        #[cfg(not(feature = "encryption"))]
        if asked.keys.is_some() {
            return Err(disabled_layer(asked, "encryption", "keys="));
        }
        #[cfg(not(feature = "offload"))]
        if asked.offload.is_some() {
            return Err(disabled_layer(asked, "offload", "offload="));
        }
        #[cfg(feature = "offload")]
        let offload = match (&asked.offload, options.offload.take()) {
            (Some(_), Some(_)) => return Err(twice("offload=", "OpenOptions::with_offload")),
            (Some(dir), None) => {
                let mut offload = crate::options::OffloadOptions::directory(dir);
                if let Some(bytes) = asked.offload_threshold {
                    offload.threshold = usize::try_from(bytes).map_err(|_| {
                        StoreError::invalid_input(format!(
                            "offload_threshold={bytes} in the store URL is too large for this machine"
                        ))
                    })?;
                }
                Some(offload)
            }
            (None, given) => given,
        };
        #[cfg(feature = "offload")]
        if let Some(crate::options::OffloadOptions {
            location: crate::options::OffloadLocation::Directory(dir),
            ..
        }) = &offload
        {
            if options.read_only && !dir.is_dir() {
                return Err(StoreError::invalid_input(format!(
                    "no offload directory at {}: check the path (a store opened read-only creates nothing)",
                    dir.display()
                )));
            }
        }
        #[cfg(feature = "encryption")]
        let keys = match (&asked.keys, options.keys.take()) {
            (Some(_), Some(_)) => return Err(twice("keys=", "OpenOptions::with_keys")),
            (Some(source), None) => {
                let ring = source.load()?;
                Some(Arc::new(ring) as Arc<dyn crate::layer::codec::KeyProvider>)
            }
            (None, given) => given,
        };
        #[cfg(feature = "encryption")]
        let ids = keys.as_ref().map(|_| {
            let ids = crate::layer::codec::RecyclingIds::new(Arc::clone(&options.ids));
            options.ids = Arc::new(ids.clone());
            ids
        });
        let _ = asked;
        let layers = Self {
            #[cfg(feature = "offload")]
            offload,
            #[cfg(feature = "encryption")]
            keys,
            #[cfg(feature = "encryption")]
            ids,
            #[cfg(feature = "encryption")]
            left_sealed: options.missing_keys_left_sealed,
            #[cfg(all(feature = "metrics", any(feature = "encryption", feature = "offload")))]
            metrics: options.metrics,
        };
        Ok((layers, options))
    }

    /// `store` wrapped in the payload layers: offload, then encryption.
    fn apply(self, store: Arc<dyn Store>) -> Result<Arc<dyn Store>, StoreError> {
        #[cfg(feature = "offload")]
        let store: Arc<dyn Store> = match &self.offload {
            Some(offload) => {
                let layer = offload.apply(store)?;
                #[cfg(feature = "metrics")]
                let layer = layer.with_metrics(self.metrics);
                Arc::new(layer)
            }
            None => store,
        };
        #[cfg(feature = "encryption")]
        let store: Arc<dyn Store> = match (self.keys, self.ids) {
            (Some(keys), Some(ids)) => {
                let layer = crate::layer::codec::EncryptedStore::new(store, keys)
                    .with_ids(ids)
                    .with_missing_keys_left_sealed(self.left_sealed);
                #[cfg(feature = "metrics")]
                let layer = layer.with_metrics(self.metrics);
                Arc::new(layer)
            }
            _ => store,
        };
        Ok(store)
    }
}

/// The error for a URL asking for a payload layer this build lacks.
#[allow(dead_code)] // unused when every layer is compiled in
fn disabled_layer(_asked: &LayerUrlOptions, feature: &str, key: &str) -> StoreError {
    StoreError::invalid_input(format!(
        "the store URL's {key} asks for the {feature} layer, which this build of a2-store was compiled without: enable the `{feature}` feature of a2-store (features = [\"{feature}\"] in Cargo.toml)"
    ))
}

/// The error for a layer given both in the URL and in the options.
#[allow(dead_code)]
fn twice(key: &str, option: &str) -> StoreError {
    StoreError::invalid_input(format!(
        "the store URL's {key} and {option} both configure the same layer: give it once"
    ))
}

/// Opens the backend `url` names.
async fn open_backend(url: &StoreUrl, options: OpenOptions) -> Result<Arc<dyn Store>, StoreError> {
    let store = match url {
        StoreUrl::Memory => open_memory(url, options),
        StoreUrl::Sqlite {
            location,
            options: sqlite,
        } => open_sqlite(url, location, sqlite, options).await,
        StoreUrl::Postgres {
            url: connection,
            options: postgres,
        } => open_postgres(url, connection, postgres, options).await,
    }?;
    Ok(store)
}

/// What `options` ask of the observability layer, as a function that applies
/// it to the store opened at `url` (returning it as is when both are off).
#[cfg(any(feature = "tracing", feature = "metrics"))]
fn observe(url: &StoreUrl, options: &OpenOptions) -> impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store> {
    #[cfg(feature = "tracing")]
    let tracing = options.tracing;
    #[cfg(not(feature = "tracing"))]
    let tracing = false;
    #[cfg(feature = "metrics")]
    let metrics = options.metrics;
    #[cfg(not(feature = "metrics"))]
    let metrics = false;
    let backend = url.backend();
    move |store| {
        if !tracing && !metrics {
            return store;
        }
        let observed = crate::layer::ObservedStore::new(store, backend);
        #[cfg(feature = "tracing")]
        let observed = observed.with_tracing(tracing);
        #[cfg(feature = "metrics")]
        let observed = observed.with_metrics(metrics);
        Arc::new(observed)
    }
}

/// The error for a URL whose backend this build was compiled without.
#[allow(dead_code)] // unused when every backend is compiled in
fn disabled(url: &StoreUrl) -> StoreError {
    let feature = url.feature();
    StoreError::invalid_input(format!(
        "'{url}' needs the `{feature}` backend, which this build of a2-store was compiled without: enable the `{feature}` feature of a2-store (features = [\"{feature}\"] in Cargo.toml)"
    ))
}

#[cfg(feature = "memory")]
fn open_memory(_url: &StoreUrl, options: OpenOptions) -> Result<Arc<dyn Store>, StoreError> {
    use a2_store_memory::{MemoryOptions, MemoryStore};
    let store = MemoryStore::with_options(MemoryOptions {
        clock: options.clock,
        ids: options.ids,
    });
    Ok(Arc::new(store))
}

#[cfg(not(feature = "memory"))]
fn open_memory(url: &StoreUrl, _options: OpenOptions) -> Result<Arc<dyn Store>, StoreError> {
    Err(disabled(url))
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(
    _url: &StoreUrl,
    location: &crate::url::SqliteLocation,
    url_options: &crate::url::SqliteUrlOptions,
    options: OpenOptions,
) -> Result<Arc<dyn Store>, StoreError> {
    use std::time::Duration;

    use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};

    use crate::url::{SqliteDurability, SqliteLocation};

    let mut sqlite = SqliteOptions {
        clock: options.clock,
        ids: options.ids,
        read_only: options.read_only,
        ..SqliteOptions::default()
    };
    if let Some(durability) = url_options.durability {
        sqlite.durability = match durability {
            SqliteDurability::Full => Durability::Full,
            SqliteDurability::Normal => Durability::Normal,
        };
    }
    if let Some(ms) = url_options.busy_timeout_ms {
        sqlite.busy_timeout = Duration::from_millis(ms);
    }
    if let Some(size) = url_options.pool_size {
        sqlite.pool_size = size;
    }
    if let Some(ms) = url_options.poll_interval_ms {
        sqlite.poll_interval = Duration::from_millis(ms);
    }
    // Opening runs migrations and may wait out another writer's lock: keep
    // that off the async worker the way the backend keeps its calls off it.
    let store = off_the_worker(|| match location {
        SqliteLocation::File(path) => SqliteStore::open(path, sqlite),
        SqliteLocation::Memory => SqliteStore::open_in_memory(sqlite),
    })?;
    Ok(Arc::new(store))
}

/// Runs blocking `work` through `block_in_place` on a multi-thread tokio
/// runtime (other tasks move to other workers), directly anywhere else.
#[cfg(feature = "sqlite")]
fn off_the_worker<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    _url: &StoreUrl,
    connection: &str,
    url_options: &crate::url::PostgresUrlOptions,
    options: OpenOptions,
) -> Result<Arc<dyn Store>, StoreError> {
    use a2_store_postgres::PostgresStore;

    let read_only = options.read_only;
    let mut postgres = crate::postgres::options(url_options, options);
    postgres.read_only = read_only;
    let store = PostgresStore::connect(connection, postgres).await?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    url: &StoreUrl,
    _connection: &str,
    _url_options: &crate::url::PostgresUrlOptions,
    _options: OpenOptions,
) -> Result<Arc<dyn Store>, StoreError> {
    Err(disabled(url))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(
    url: &StoreUrl,
    _location: &crate::url::SqliteLocation,
    _url_options: &crate::url::SqliteUrlOptions,
    _options: OpenOptions,
) -> Result<Arc<dyn Store>, StoreError> {
    Err(disabled(url))
}

#[cfg(test)]
mod tests {
    use a2_store_api::ErrorCode;

    use super::*;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn disabled_backends_name_their_feature() {
        let url = StoreUrl::parse("sqlite:a.db").unwrap();
        let message = disabled(&url).to_string();
        assert!(message.contains("enable the `sqlite` feature"), "{message}");
        assert_eq!(disabled(&url).code(), ErrorCode::InvalidInput);
        let message = disabled(&StoreUrl::Memory).to_string();
        assert!(message.contains("`memory` feature"), "{message}");
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_off_is_a_clear_error() {
        let err = block_on(open("postgres://localhost/db", OpenOptions::default()))
            .err()
            .unwrap();
        assert_eq!(err.code(), ErrorCode::InvalidInput);
        assert!(err.to_string().contains("`postgres` feature"), "{err}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_options_reach_the_backend() {
        // The backend rejects an invalid schema name before connecting.
        let err = block_on(open(
            "postgres://localhost/db?schema=Not-Valid",
            OpenOptions::default(),
        ))
        .err()
        .unwrap();
        assert_eq!(err.code(), ErrorCode::InvalidInput);
        assert!(err.to_string().contains("Not-Valid"), "{err}");
    }

    #[test]
    fn malformed_urls_open_nothing() {
        for url in ["", "app.db", "sqlite:", "sqlite:x.db?nope=1", "memory:x"] {
            let err = block_on(open(url, OpenOptions::default())).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidInput, "{url}");
        }
        assert!(!std::path::Path::new("x.db").exists());
    }

    #[cfg(not(feature = "memory"))]
    #[test]
    fn memory_off_is_a_clear_error() {
        let err = block_on(open("memory:", OpenOptions::default()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("`memory` feature"), "{err}");
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_opens_on_any_runtime_flavor() {
        // `block_on` here is a current-thread runtime: opened directly.
        let store = block_on(open("sqlite::memory:", OpenOptions::default())).unwrap();
        drop(store);
        // A multi-thread runtime: opened through `block_in_place`.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store = runtime
            .block_on(async {
                tokio::spawn(open("sqlite::memory:", OpenOptions::default()))
                    .await
                    .unwrap()
            })
            .unwrap();
        drop(store);
    }

    #[cfg(not(feature = "sqlite"))]
    #[test]
    fn sqlite_off_is_a_clear_error() {
        for url in ["sqlite::memory:", "sqlite:never-created.db"] {
            let err = block_on(open(url, OpenOptions::default())).err().unwrap();
            assert!(err.to_string().contains("`sqlite` feature"), "{err}");
        }
        assert!(!std::path::Path::new("never-created.db").exists());
    }
}
