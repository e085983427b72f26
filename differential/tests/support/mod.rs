//! Factories of the backends under test, shared by the differential, fencing
//! and load tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_store_api::{Clock, IdGenerator, Result, Store};
use a2_store_memory::{MemoryOptions, MemoryStore};
use a2_store_postgres::scratch::fresh_schema_name;
use a2_store_postgres::{PostgresOptions, ScratchSchemas};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};

/// Fresh memory stores (the reference itself).
pub struct Memory;

#[async_trait::async_trait]
impl StoreFactory for Memory {
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

/// SQLite options on `clock` and `ids`.
pub fn sqlite_options(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> SqliteOptions {
    SqliteOptions {
        clock,
        ids,
        durability: Durability::Normal,
        ..SqliteOptions::default()
    }
}

/// A fresh SQLite file per store, in a temporary directory that lives as long as the factory.
pub struct SqliteFile {
    dir: tempfile::TempDir,
    files: AtomicUsize,
}

impl SqliteFile {
    /// A factory over a new temporary directory.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
            files: AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl StoreFactory for SqliteFile {
    fn name(&self) -> &str {
        "sqlite-file"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let n = self.files.fetch_add(1, Ordering::SeqCst);
        let path = self.dir.path().join(format!("diff-{n}.db"));
        Ok(Arc::new(SqliteStore::open(
            path,
            sqlite_options(clock, ids),
        )?))
    }
}

/// A private in-memory SQLite database per store.
pub struct SqliteMemory;

#[async_trait::async_trait]
impl StoreFactory for SqliteMemory {
    fn name(&self) -> &str {
        "sqlite-memory"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(SqliteStore::open_in_memory(sqlite_options(
            clock, ids,
        ))?))
    }
}

/// The variable naming the PostgreSQL server.
pub const POSTGRES_URL: &str = "A2_POSTGRES_URL";

/// The PostgreSQL URL, or `None` after saying on stderr that the test did not run.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var(POSTGRES_URL) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "{test}: NOT RUN against PostgreSQL: {POSTGRES_URL} is not set \
                 (e.g. {POSTGRES_URL}=postgres://postgres@127.0.0.1:5432/test)"
            );
            None
        }
    }
}

/// The prefix of every schema these tests create (`a2d_<uuid>`).
pub const SCHEMA_PREFIX: &str = "a2d_";

/// A fresh schema name no other run uses.
pub fn fresh_schema() -> String {
    fresh_schema_name(SCHEMA_PREFIX).expect("a fresh schema name")
}

/// What every PostgreSQL store here is opened with, apart from schema,
/// clock and ids.
fn base_options() -> PostgresOptions {
    PostgresOptions {
        pool_size: 4,
        ..PostgresOptions::default()
    }
}

/// PostgreSQL options on `schema`.
pub fn postgres_options(
    schema: &str,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
) -> PostgresOptions {
    PostgresOptions {
        clock,
        ids,
        schema: schema.to_owned(),
        ..base_options()
    }
}

/// Drops `schemas` (names from [`fresh_schema`]) at `url`; works inside a
/// runtime and in `Drop` ([`ScratchSchemas`] drops them from a thread of
/// its own).
pub fn drop_schemas(url: &str, schemas: Vec<String>) {
    let scratch = ScratchSchemas::new(url, SCHEMA_PREFIX);
    for schema in schemas {
        scratch
            .adopt(&schema)
            .expect("a schema from fresh_schema()");
    }
}

/// One fresh schema per store; every schema is dropped when the factory is.
pub struct Postgres {
    scratch: ScratchSchemas,
}

impl Postgres {
    /// A factory on `A2_POSTGRES_URL`, or `None` when it is unset.
    pub fn from_env(test: &str) -> Option<Self> {
        postgres_url(test).map(|url| Self {
            scratch: ScratchSchemas::new(url, SCHEMA_PREFIX).with_options(base_options()),
        })
    }
}

#[async_trait::async_trait]
impl StoreFactory for Postgres {
    fn name(&self) -> &str {
        "postgres"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(self.scratch.create(clock, ids).await?))
    }
}
