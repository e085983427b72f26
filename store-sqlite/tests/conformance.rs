//! The conformance suite against a file-backed and an in-memory SQLite store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{Clock, IdGenerator, Result, Store};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use async_trait::async_trait;

fn options(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> SqliteOptions {
    SqliteOptions {
        clock,
        ids,
        durability: Durability::Normal,
        ..SqliteOptions::default()
    }
}

/// Fresh database files in a temporary directory that lives as long as the factory.
struct FileFactory {
    dir: tempfile::TempDir,
    files: AtomicUsize,
}

impl FileFactory {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
            files: AtomicUsize::new(0),
        }
    }

    fn fresh_path(&self) -> std::path::PathBuf {
        let n = self.files.fetch_add(1, Ordering::SeqCst);
        self.dir.path().join(format!("store-{n}.db"))
    }
}

#[async_trait]
impl StoreFactory for FileFactory {
    fn name(&self) -> &str {
        "sqlite-file"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let store = SqliteStore::open(self.fresh_path(), options(clock, ids))?;
        Ok(Arc::new(store))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let path = self.fresh_path();
        let first = SqliteStore::open(&path, options(Arc::clone(&clock), Arc::clone(&ids)))?;
        let second = SqliteStore::open(&path, options(clock, ids))?;
        Ok(Some([Arc::new(first), Arc::new(second)]))
    }
}

/// A private in-memory database per store; a pair is two clones of one
/// store (clones share the database and its commit notifier).
struct MemoryFactory;

#[async_trait]
impl StoreFactory for MemoryFactory {
    fn name(&self) -> &str {
        "sqlite-memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(SqliteStore::open_in_memory(options(clock, ids))?))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let store = SqliteStore::open_in_memory(options(clock, ids))?;
        Ok(Some([Arc::new(store.clone()), Arc::new(store)]))
    }
}

a2_conformance::suite!(sqlite_file, FileFactory::new());
a2_conformance::suite!(sqlite_memory, MemoryFactory);
