//! Shared by the offloading layer's tests and conformance runs: backend
//! factories opened through the facade, and a factory that wraps every
//! store another one makes in an `OffloadStore` over a temporary local
//! object store with a tiny threshold.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{Clock, IdGenerator, OffloadStore, OpenOptions, Result, Store};
use async_trait::async_trait;

/// The conformance runs' threshold: most payloads of the suite are longer.
pub const TINY_THRESHOLD: usize = 64;

/// The variable naming the PostgreSQL server.
pub const POSTGRES_URL_VAR: &str = "A2_POSTGRES_URL";

/// The PostgreSQL server's URL, when `A2_POSTGRES_URL` is set.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty())
}

fn options(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> OpenOptions {
    OpenOptions::default()
        .with_shared_clock(clock)
        .with_shared_ids(ids)
}

/// Every store `inner` makes, behind the offloading layer: each store (or
/// pair, which shares one database) gets its own object directory.
pub struct Offloaded<F> {
    inner: F,
    name: String,
    dir: tempfile::TempDir,
    stores: AtomicUsize,
}

impl<F: StoreFactory> Offloaded<F> {
    pub fn new(inner: F) -> Self {
        Self {
            name: format!("{}+offload", inner.name()),
            inner,
            dir: tempfile::tempdir().expect("a temporary directory"),
            stores: AtomicUsize::new(0),
        }
    }

    fn fresh_dir(&self) -> std::path::PathBuf {
        let n = self.stores.fetch_add(1, Ordering::SeqCst);
        self.dir.path().join(format!("objects-{n}"))
    }
}

/// `inner` behind the layer, objects under `dir`, with the tiny threshold.
pub fn offloaded(inner: Arc<dyn Store>, dir: &std::path::Path) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(
        OffloadStore::local(inner, dir)?.with_threshold(TINY_THRESHOLD),
    ))
}

#[async_trait]
impl<F: StoreFactory> StoreFactory for Offloaded<F> {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let store = self.inner.create(clock, ids).await?;
        offloaded(store, &self.fresh_dir())
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let Some([first, second]) = self.inner.create_pair(clock, ids).await? else {
            return Ok(None);
        };
        let dir = self.fresh_dir();
        Ok(Some([offloaded(first, &dir)?, offloaded(second, &dir)?]))
    }
}

/// The memory backend, through `open("memory:")`.
pub struct Memory;

#[async_trait]
impl StoreFactory for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        a2_store::open("memory:", options(clock, ids)).await
    }
}

/// SQLite files in a temporary directory, through `open("sqlite:...")`.
pub struct Sqlite {
    dir: tempfile::TempDir,
    files: AtomicUsize,
}

impl Sqlite {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
            files: AtomicUsize::new(0),
        }
    }

    pub fn fresh_url(&self) -> String {
        let n = self.files.fetch_add(1, Ordering::SeqCst);
        let path = self.dir.path().join(format!("store-{n}.db"));
        format!("sqlite:{}?durability=normal", path.display())
    }
}

#[async_trait]
impl StoreFactory for Sqlite {
    fn name(&self) -> &str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        a2_store::open(&self.fresh_url(), options(clock, ids)).await
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let url = self.fresh_url();
        let first = a2_store::open(&url, options(Arc::clone(&clock), Arc::clone(&ids))).await?;
        let second = a2_store::open(&url, options(clock, ids)).await?;
        Ok(Some([first, second]))
    }
}

/// PostgreSQL on fresh scratch schemas, dropped with the factory.
#[cfg(feature = "postgres")]
pub struct Postgres {
    scratch: a2_store::postgres::ScratchSchemas,
}

#[cfg(feature = "postgres")]
impl Postgres {
    pub fn new(url: &str) -> Self {
        let options = a2_store::postgres::PostgresOptions {
            pool_size: 4,
            ..a2_store::postgres::PostgresOptions::default()
        };
        Self {
            scratch: a2_store::postgres::ScratchSchemas::new(url.to_owned(), "a2o_")
                .with_options(options),
        }
    }
}

#[cfg(feature = "postgres")]
#[async_trait]
impl StoreFactory for Postgres {
    fn name(&self) -> &str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(self.scratch.create(clock, ids).await?))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let [first, second] = self.scratch.create_pair(clock, ids).await?;
        Ok(Some([Arc::new(first), Arc::new(second)]))
    }
}
