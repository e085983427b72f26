//! Opening a store from a URL, with the backends this build was compiled with.

use std::sync::Arc;

use a2_store_api::{Store, StoreError};

use crate::options::OpenOptions;
use crate::url::StoreUrl;

/// Opens the store `url` names (see [`StoreUrl`] for the forms and options)
/// with the clock and ids of `options`, wrapped in
/// `ObservedStore` (labelled with the backend,
/// `memory`, `sqlite` or `postgres`) when `options` turn tracing or metrics on.
///
/// Errors: a malformed URL or unknown option, or a URL whose backend feature
/// is off, is [`InvalidInput`](a2_store_api::ErrorCode::InvalidInput) with a
/// message saying what to change; a database that cannot be opened keeps the
/// backend's error (for example
/// [`IncompatibleSchema`](a2_store_api::ErrorCode::IncompatibleSchema) for a
/// file written by a newer release). Nothing is created when the URL is
/// rejected.
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
    let parsed = StoreUrl::parse(url)?;
    open_url(&parsed, options).await
}

/// Opens an already parsed [`StoreUrl`]; see [`open`].
pub async fn open_url(url: &StoreUrl, options: OpenOptions) -> Result<Arc<dyn Store>, StoreError> {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    let layer = observe(url, &options);
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
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    let store = layer(store);
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
