//! Shared by the encryption layer's tests: a conformance factory that wraps
//! every store another factory makes in an `EncryptedStore`, and factories
//! for each backend opened through the facade.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{
    Clock, EncryptedStore, IdGenerator, Keyring, OpenOptions, RecyclingIds, Result, SecretKey,
    Store,
};
use async_trait::async_trait;

/// Two keys, `k2` current: the suite writes under `k2`.
pub fn keyring() -> Keyring {
    Keyring::new()
        .with_key("k1", SecretKey::from_bytes([1; 32]))
        .and_then(|ring| ring.with_key("k2", SecretKey::from_bytes([2; 32])))
        .and_then(|ring| ring.set_current("k2").map(|()| ring))
        .expect("a keyring of two keys")
}

/// `inner` wrapped in the layer under `keys`, the layer naming unnamed
/// events from `ids` (the generator `inner` was made with).
pub fn encrypted(inner: Arc<dyn Store>, keys: &Keyring, ids: RecyclingIds) -> Arc<dyn Store> {
    Arc::new(EncryptedStore::new(inner, Arc::new(keys.clone())).with_ids(ids))
}

/// Every store `inner` makes, behind the encryption layer; the backend and
/// the layer draw ids from one [`RecyclingIds`] over the suite's generator.
pub struct Encrypted<F> {
    inner: F,
    name: String,
    keys: Keyring,
}

impl<F: StoreFactory> Encrypted<F> {
    pub fn new(inner: F) -> Self {
        let name = format!("{}+encryption", inner.name());
        Self {
            inner,
            name,
            keys: keyring(),
        }
    }
}

#[async_trait]
impl<F: StoreFactory> StoreFactory for Encrypted<F> {
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
        let ids = RecyclingIds::new(ids);
        let store = self.inner.create(clock, Arc::new(ids.clone())).await?;
        Ok(encrypted(store, &self.keys, ids))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let ids = RecyclingIds::new(ids);
        let Some([first, second]) = self.inner.create_pair(clock, Arc::new(ids.clone())).await?
        else {
            return Ok(None);
        };
        Ok(Some([
            encrypted(first, &self.keys, ids.clone()),
            encrypted(second, &self.keys, ids),
        ]))
    }
}

fn options(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> OpenOptions {
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

    fn fresh_url(&self) -> String {
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

/// The variable naming the PostgreSQL server.
pub const POSTGRES_URL_VAR: &str = "A2_POSTGRES_URL";

/// The PostgreSQL server's URL, when `A2_POSTGRES_URL` is set.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty())
}

/// PostgreSQL on fresh scratch schemas, dropped with the factory.
pub struct Postgres {
    scratch: a2_store::postgres::ScratchSchemas,
}

impl Postgres {
    pub fn new(url: &str) -> Self {
        let options = a2_store::postgres::PostgresOptions {
            pool_size: 4,
            ..a2_store::postgres::PostgresOptions::default()
        };
        Self {
            scratch: a2_store::postgres::ScratchSchemas::new(url.to_owned(), "a2t_")
                .with_options(options),
        }
    }
}

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
