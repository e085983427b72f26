//! Backends opened through the facade, for the payload layers' tests and
//! conformance runs (included by `codec_support` and `offload_support`):
//! memory, SQLite files in a temporary directory, PostgreSQL on scratch
//! schemas.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{Clock, IdGenerator, OpenOptions, Result, Store};
use async_trait::async_trait;

/// The variable naming the PostgreSQL server.
pub const POSTGRES_URL_VAR: &str = "A2_POSTGRES_URL";

/// The PostgreSQL server's URL, when `A2_POSTGRES_URL` is set.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty())
}

pub fn options(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> OpenOptions {
    OpenOptions::default()
        .with_shared_clock(clock)
        .with_shared_ids(ids)
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
            scratch: a2_store::postgres::ScratchSchemas::new(url.to_owned(), "a2l_")
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
