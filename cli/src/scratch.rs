//! Scratch stores for `check`: fresh databases of the URL's backend, never its data.
//!
//! The factory keeps no handle on the stores it hands out (some cases check
//! what happens when the last handle drops); it remembers PostgreSQL schema
//! names and drops them in [`ScratchFactory::finish`].

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{
    Clock, IdGenerator, OpenOptions, PostgresUrlOptions, RandomIds, SqliteLocation,
    SqliteUrlOptions, Store, StoreError, StoreUrl,
};
use a2_store_postgres::{PostgresOptions, PostgresStore};
use async_trait::async_trait;
use tempfile::TempDir;
use tokio::sync::Mutex;

use crate::failure::{chain, Failure};

/// Hands the conformance suite fresh stores of a URL's backend:
/// - `memory:` and `sqlite::memory:`: a new private store per case;
/// - `sqlite:PATH`: a new file per case in a temporary directory beside PATH
///   (same filesystem and options), removed with the factory;
/// - `postgres://...`: a new schema `a2_check_*` per case on that server
///   (same options), all dropped by [`Self::finish`].
pub struct ScratchFactory {
    name: String,
    scratch: Scratch,
}

enum Scratch {
    Memory,
    SqliteMemory(SqliteUrlOptions),
    SqliteFiles {
        dir: TempDir,
        options: SqliteUrlOptions,
        next: AtomicU64,
    },
    Postgres {
        connection: String,
        options: PostgresUrlOptions,
        /// Every scratch schema created and not dropped yet.
        schemas: Mutex<Vec<String>>,
        next: AtomicU64,
        run_id: String,
    },
}

impl ScratchFactory {
    /// A factory for the backend `parsed` names; creates nothing yet except
    /// the temporary directory for SQLite files.
    pub fn new(url: &str, parsed: &StoreUrl) -> Result<Self, Failure> {
        let scratch = match parsed {
            StoreUrl::Sqlite {
                location: SqliteLocation::File(path),
                options,
            } => {
                let parent = match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => Path::new("."),
                };
                let dir = tempfile::Builder::new()
                    .prefix(".a2-check-")
                    .tempdir_in(parent)
                    .map_err(|e| {
                        Failure::new(format!(
                            "creating a scratch directory in '{}' for {url}: {e} — the directory must exist and be writable",
                            parent.display()
                        ))
                    })?;
                Scratch::SqliteFiles {
                    dir,
                    options: *options,
                    next: AtomicU64::new(0),
                }
            }
            StoreUrl::Sqlite {
                location: SqliteLocation::Memory,
                options,
            } => Scratch::SqliteMemory(*options),
            StoreUrl::Memory => Scratch::Memory,
            StoreUrl::Postgres {
                url: connection,
                options,
            } => Scratch::Postgres {
                connection: connection.clone(),
                options: options.clone(),
                schemas: Mutex::new(Vec::new()),
                next: AtomicU64::new(0),
                run_id: RandomIds.next_id().replace('-', ""),
            },
            other => {
                return Err(Failure::new(format!(
                    "check cannot make a scratch database for {url} (backend {}): use memory:, a sqlite: or a postgres:// URL",
                    other.backend()
                )))
            }
        };
        Ok(Self {
            name: parsed.backend().to_owned(),
            scratch,
        })
    }

    /// Removes what the factory still holds on a server (PostgreSQL scratch
    /// schemas); temporary files go when the factory drops. Returns the
    /// schemas it could not drop, with the reason.
    pub async fn finish(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Scratch::Postgres {
            connection,
            schemas,
            ..
        } = &self.scratch
        {
            let names = std::mem::take(&mut *schemas.lock().await);
            for schema in names {
                let options = PostgresOptions {
                    pool_size: 1,
                    schema: schema.clone(),
                    ..PostgresOptions::default()
                };
                let dropped = match PostgresStore::connect(connection, options).await {
                    Ok(store) => store.drop_schema().await,
                    Err(error) => Err(error),
                };
                if let Err(error) = dropped {
                    problems.push(format!(
                        "scratch schema {schema} was not dropped ({}): drop it with DROP SCHEMA {schema} CASCADE",
                        chain(&error)
                    ));
                }
            }
        }
        problems
    }

    /// A fresh SQLite or memory scratch URL: a new file for SQLite files.
    fn scratch_url(&self) -> Option<StoreUrl> {
        match &self.scratch {
            Scratch::Memory => Some(StoreUrl::Memory),
            Scratch::SqliteMemory(options) => Some(StoreUrl::Sqlite {
                location: SqliteLocation::Memory,
                options: *options,
            }),
            Scratch::SqliteFiles { dir, options, next } => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                Some(StoreUrl::Sqlite {
                    location: SqliteLocation::File(dir.path().join(format!("case-{n}.db"))),
                    options: *options,
                })
            }
            Scratch::Postgres { .. } => None,
        }
    }

    /// `count` stores on one new PostgreSQL scratch schema.
    async fn postgres_stores(
        &self,
        count: usize,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Vec<Arc<dyn Store>>, StoreError> {
        let Scratch::Postgres {
            connection,
            options,
            schemas,
            next,
            run_id,
        } = &self.scratch
        else {
            return Ok(Vec::new());
        };
        let n = next.fetch_add(1, Ordering::Relaxed);
        let schema = format!("a2_check_{run_id}_{n}");
        schemas.lock().await.push(schema.clone());
        let mut pg = PostgresOptions {
            clock,
            ids,
            pool_size: 4,
            schema,
            ..PostgresOptions::default()
        };
        if let Some(size) = options.pool_size {
            pg.pool_size = size;
        }
        if let Some(ms) = options.statement_timeout_ms {
            pg.statement_timeout = std::time::Duration::from_millis(ms);
        }
        let mut stores: Vec<Arc<dyn Store>> = Vec::new();
        for _ in 0..count {
            let store = PostgresStore::connect(connection, pg.clone()).await?;
            stores.push(Arc::new(store));
        }
        Ok(stores)
    }
}

fn options(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> OpenOptions {
    OpenOptions::default()
        .with_shared_clock(clock)
        .with_shared_ids(ids)
}

#[async_trait]
impl StoreFactory for ScratchFactory {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        match self.scratch {
            // Two handles on one memory store share its state, like two
            // stores on one SQLite file or one PostgreSQL schema.
            Scratch::SqliteFiles { .. } | Scratch::Memory | Scratch::Postgres { .. } => {
                Capabilities::ALL
            }
            Scratch::SqliteMemory(_) => Capabilities::NONE,
        }
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>, StoreError> {
        if let Scratch::Postgres { .. } = self.scratch {
            let mut stores = self.postgres_stores(1, clock, ids).await?;
            return stores.pop().ok_or_else(|| {
                StoreError::invalid_input("no PostgreSQL scratch store was created")
            });
        }
        match self.scratch_url() {
            Some(url) => a2_store::open_url(&url, options(clock, ids)).await,
            None => Err(StoreError::invalid_input(
                "this backend has no scratch database",
            )),
        }
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>, StoreError> {
        let url = match self.scratch {
            Scratch::SqliteMemory(_) => return Ok(None),
            Scratch::Memory => {
                let store = a2_store::open_url(&StoreUrl::Memory, options(clock, ids)).await?;
                return Ok(Some([Arc::clone(&store), store]));
            }
            Scratch::Postgres { .. } => {
                let mut stores = self.postgres_stores(2, clock, ids).await?;
                return match (stores.pop(), stores.pop()) {
                    (Some(second), Some(first)) => Ok(Some([first, second])),
                    _ => Ok(None),
                };
            }
            Scratch::SqliteFiles { .. } => self.scratch_url(),
        };
        let Some(url) = url else {
            return Ok(None);
        };
        let first = a2_store::open_url(&url, options(Arc::clone(&clock), Arc::clone(&ids))).await?;
        let second = a2_store::open_url(&url, options(clock, ids)).await?;
        Ok(Some([first, second]))
    }
}
