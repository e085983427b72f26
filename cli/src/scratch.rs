//! Scratch stores for `check`: fresh databases of the URL's backend, never its data.
//!
//! The factory keeps no handle on the stores it hands out (some cases check
//! what happens when the last handle drops); PostgreSQL scratch schemas are
//! named and dropped by the backend's [`ScratchSchemas`], in
//! [`ScratchFactory::finish`].

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::postgres::{self, ScratchSchemas};
use a2_store::{
    Clock, IdGenerator, OpenOptions, SqliteLocation, SqliteUrlOptions, Store, StoreError, StoreUrl,
};
use async_trait::async_trait;
use tempfile::TempDir;

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
    /// Schemas `a2_check_<uuid>`, every one dropped by `finish` (boxed: its
    /// options are several times the other variants' size).
    Postgres(Box<ScratchSchemas>),
}

/// The prefix of every PostgreSQL scratch schema `check` creates.
pub const SCHEMA_PREFIX: &str = "a2_check_";

/// Connections per scratch store when the URL sets no `pool_size`.
const POOL_SIZE: usize = 4;

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
            } => {
                // The URL's options, but a smaller pool unless it says; the
                // schema is the scratch one of each case.
                let mut pg = postgres::options(options, OpenOptions::default());
                if options.pool_size.is_none() {
                    pg.pool_size = POOL_SIZE;
                }
                Scratch::Postgres(Box::new(
                    ScratchSchemas::new(connection.clone(), SCHEMA_PREFIX).with_options(pg),
                ))
            }
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
    /// schemas); temporary files go when the factory drops. Returns one
    /// line per schema it could not drop, with the reason.
    pub async fn finish(&self) -> Vec<String> {
        let Scratch::Postgres(scratch) = &self.scratch else {
            return Vec::new();
        };
        let Err(error) = scratch.drop_all().await else {
            return Vec::new();
        };
        // Reported here, once: no second try (and stderr note) on drop.
        let why = chain(&error);
        scratch
            .forget_all()
            .iter()
            .map(|schema| {
                format!(
                    "scratch schema {schema} was not dropped ({why}): drop it with DROP SCHEMA {schema} CASCADE"
                )
            })
            .collect()
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
            Scratch::SqliteFiles { .. } | Scratch::Memory | Scratch::Postgres(_) => {
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
        if let Scratch::Postgres(scratch) = &self.scratch {
            return Ok(Arc::new(scratch.create(clock, ids).await?));
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
        let url = match &self.scratch {
            Scratch::SqliteMemory(_) => return Ok(None),
            Scratch::Memory => {
                let store = a2_store::open_url(&StoreUrl::Memory, options(clock, ids)).await?;
                return Ok(Some([Arc::clone(&store), store]));
            }
            Scratch::Postgres(scratch) => {
                let [first, second] = scratch.create_pair(clock, ids).await?;
                return Ok(Some([Arc::new(first), Arc::new(second)]));
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
