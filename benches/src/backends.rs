//! Store factories of this workspace's backends, named as the benchmark
//! reports show them: `memory`, `sqlite-memory`, `sqlite-file` (durability
//! NORMAL) and `sqlite-file-full` (durability FULL).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{Clock, IdGenerator, Result, Store, StoreError};
use a2_store_memory::{MemoryOptions, MemoryStore};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use async_trait::async_trait;
use tempfile::TempDir;

/// The in-memory reference backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryFactory;

#[async_trait]
impl StoreFactory for MemoryFactory {
    fn name(&self) -> &str {
        "memory"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(MemoryStore::with_options(MemoryOptions {
            clock,
            ids,
        })))
    }
}

/// The SQLite backend on a private in-memory database.
#[derive(Debug, Default, Clone, Copy)]
pub struct SqliteMemoryFactory;

#[async_trait]
impl StoreFactory for SqliteMemoryFactory {
    fn name(&self) -> &str {
        "sqlite-memory"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let options = SqliteOptions {
            clock,
            ids,
            ..SqliteOptions::default()
        };
        Ok(Arc::new(SqliteStore::open_in_memory(options)?))
    }
}

/// The SQLite backend on database files in a temporary directory, deleted
/// with the factory. Each [`create`](StoreFactory::create) opens a new file.
#[derive(Debug)]
pub struct SqliteFileFactory {
    name: &'static str,
    durability: Durability,
    dir: TempDir,
    files: AtomicU64,
}

impl SqliteFileFactory {
    /// Files with `synchronous = NORMAL`, named `sqlite-file`.
    pub fn normal() -> Result<Self> {
        Self::new("sqlite-file", Durability::Normal)
    }

    /// Files with `synchronous = FULL`, named `sqlite-file-full`.
    pub fn full() -> Result<Self> {
        Self::new("sqlite-file-full", Durability::Full)
    }

    fn new(name: &'static str, durability: Durability) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("a2-bench-")
            .tempdir()
            .map_err(|source| StoreError::backend("creating a temporary directory", source))?;
        Ok(Self {
            name,
            durability,
            dir,
            files: AtomicU64::new(0),
        })
    }

    fn next_path(&self) -> PathBuf {
        let n = self.files.fetch_add(1, Ordering::Relaxed);
        self.dir.path().join(format!("store-{n}.db"))
    }

    fn options(&self, clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> SqliteOptions {
        SqliteOptions {
            clock,
            ids,
            durability: self.durability,
            ..SqliteOptions::default()
        }
    }
}

#[async_trait]
impl StoreFactory for SqliteFileFactory {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let path = self.next_path();
        Ok(Arc::new(SqliteStore::open(path, self.options(clock, ids))?))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let path = self.next_path();
        let first = SqliteStore::open(&path, self.options(clock.clone(), ids.clone()))?;
        let second = SqliteStore::open(&path, self.options(clock, ids))?;
        Ok(Some([Arc::new(first), Arc::new(second)]))
    }
}

/// The backends every per-operation group compares: memory, SQLite in
/// memory and SQLite on a file with durability NORMAL.
pub fn standard() -> Result<Vec<Box<dyn StoreFactory>>> {
    Ok(vec![
        Box::new(MemoryFactory),
        Box::new(SqliteMemoryFactory),
        Box::new(SqliteFileFactory::normal()?),
    ])
}
