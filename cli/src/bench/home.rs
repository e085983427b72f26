//! Scratch stores for the worker workloads: a fresh database of a URL's
//! backend per run, which worker processes can open too; never the URL's
//! own data.

use std::path::PathBuf;
use std::sync::Arc;

use a2_store::postgres::{self, ScratchSchemas};
use a2_store::{OpenOptions, SqliteDurability, SqliteLocation, SqliteUrlOptions, Store, StoreUrl};
use tempfile::TempDir;

use crate::failure::{chain, Failure};
use crate::target;

/// The prefix of every PostgreSQL scratch schema the bench creates.
pub const SCHEMA_PREFIX: &str = "a2_bench_";

/// Connections of a worker process's pool when the URL sets no `pool_size`:
/// one claim and one completion at a time, plus the listener. Unless the
/// URL sets `min_idle`, all of them are opened when the worker starts.
pub const WORKER_POOL_SIZE: usize = 4;

/// A store URL the worker workloads run against.
#[derive(Debug, Clone)]
pub struct BenchTarget {
    /// How reports name it (passwords hidden).
    pub label: String,
    /// The URL worker processes parse for the backend and its options (the
    /// place is overridden by the scratch file or schema); may hold a password.
    pub base_url: String,
    parsed: StoreUrl,
    /// Where the SQLite scratch directory goes (`None`: the system's temporary directory).
    sqlite_dir: Option<PathBuf>,
}

impl BenchTarget {
    /// Whether workers run as processes of their own (`false`: `memory:`, tasks in this process).
    pub fn has_worker_processes(&self) -> bool {
        !matches!(self.parsed, StoreUrl::Memory)
    }
}

/// The targets of `urls`, or when none is given: `memory:` and SQLite files
/// in a temporary directory with normal and full durability.
pub async fn targets(urls: &[String]) -> Result<Vec<BenchTarget>, Failure> {
    if urls.is_empty() {
        let sqlite = |durability: SqliteDurability| -> Result<BenchTarget, Failure> {
            // Only the options count: the place is a scratch file.
            let base = format!("sqlite:bench.db?durability={}", durability.as_str());
            Ok(BenchTarget {
                label: format!("sqlite:<temporary file>?durability={}", durability.as_str()),
                parsed: target::parse(&base)?,
                base_url: base,
                sqlite_dir: None,
            })
        };
        return Ok(vec![
            BenchTarget {
                label: "memory:".to_owned(),
                base_url: "memory:".to_owned(),
                parsed: StoreUrl::Memory,
                sqlite_dir: None,
            },
            sqlite(SqliteDurability::Normal)?,
            sqlite(SqliteDurability::Full)?,
        ]);
    }
    let mut targets = Vec::new();
    for url in urls {
        let parsed = target::parse(url)?;
        if !parsed.is_enabled() {
            // Opening gives the message naming the feature.
            target::open(url, &parsed).await?;
        }
        let sqlite_dir = match &parsed {
            StoreUrl::Memory | StoreUrl::Postgres { .. } => None,
            StoreUrl::Sqlite {
                location: SqliteLocation::File(path),
                ..
            } => Some(match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => PathBuf::from("."),
            }),
            other => {
                return Err(Failure::new(format!(
                    "the worker workloads cannot run on {url} (backend {}): worker processes must share the store — use memory:, a sqlite:PATH or a postgres:// URL",
                    other.backend()
                )))
            }
        };
        targets.push(BenchTarget {
            label: StoreUrl::redact(url),
            base_url: url.clone(),
            parsed,
            sqlite_dir,
        });
    }
    Ok(targets)
}

/// Where a fresh scratch store lives, as a worker process is told.
#[derive(Debug, Clone)]
pub enum Place {
    /// In this process only (`memory:`).
    InProcess,
    /// This SQLite file, with the URL's options.
    SqliteFile(PathBuf),
    /// This PostgreSQL schema of the URL's server, with the URL's options.
    Schema(String),
}

/// Makes fresh scratch stores of one target and removes them at the end.
pub struct Home {
    scratch: Scratch,
}

enum Scratch {
    Memory,
    Sqlite {
        dir: TempDir,
        options: SqliteUrlOptions,
        next: u64,
    },
    /// Boxed: its options are several times the other variants' size.
    Postgres(Box<ScratchSchemas>),
}

impl Home {
    /// A home for `target`; creates only the SQLite scratch directory.
    pub fn new(target: &BenchTarget) -> Result<Self, Failure> {
        let scratch = match &target.parsed {
            StoreUrl::Memory => Scratch::Memory,
            StoreUrl::Sqlite { options, .. } => {
                let builder = {
                    let mut builder = tempfile::Builder::new();
                    builder.prefix(".a2-bench-");
                    builder
                };
                let dir = match &target.sqlite_dir {
                    Some(dir) => builder.tempdir_in(dir),
                    None => builder.tempdir(),
                }
                .map_err(|e| {
                    Failure::new(format!(
                        "creating a scratch directory for {}: {e} — the directory must exist and be writable (set TMPDIR for the default)",
                        target.label
                    ))
                })?;
                Scratch::Sqlite {
                    dir,
                    options: *options,
                    next: 0,
                }
            }
            StoreUrl::Postgres {
                url: connection,
                options,
            } => Scratch::Postgres(Box::new(
                ScratchSchemas::new(connection.clone(), SCHEMA_PREFIX)
                    .with_options(postgres::options(options, OpenOptions::default())),
            )),
            other => {
                return Err(Failure::new(format!(
                    "no scratch store for backend {}",
                    other.backend()
                )))
            }
        };
        Ok(Self { scratch })
    }

    /// A new empty store and where worker processes find it.
    pub async fn fresh(&mut self, label: &str) -> Result<(Arc<dyn Store>, Place), Failure> {
        let opened = |e: a2_store::StoreError| Failure::store(label, "opening a scratch store", &e);
        match &mut self.scratch {
            Scratch::Memory => {
                let store = a2_store::open_url(&StoreUrl::Memory, OpenOptions::default())
                    .await
                    .map_err(opened)?;
                Ok((store, Place::InProcess))
            }
            Scratch::Sqlite { dir, options, next } => {
                *next += 1;
                let path = dir.path().join(format!("run-{next}.db"));
                let url = StoreUrl::Sqlite {
                    location: SqliteLocation::File(path.clone()),
                    options: *options,
                };
                let store = a2_store::open_url(&url, OpenOptions::default())
                    .await
                    .map_err(opened)?;
                Ok((store, Place::SqliteFile(path)))
            }
            Scratch::Postgres(scratch) => {
                let schema = scratch.fresh_schema().map_err(opened)?;
                let defaults = OpenOptions::default();
                let store = scratch
                    .open(&schema, defaults.clock, defaults.ids)
                    .await
                    .map_err(opened)?;
                Ok((Arc::new(store), Place::Schema(schema)))
            }
        }
    }

    /// Removes what is left on a server (PostgreSQL schemas; files go when
    /// this drops). Returns one line per schema it could not drop.
    pub async fn finish(&self) -> Vec<String> {
        let Scratch::Postgres(scratch) = &self.scratch else {
            return Vec::new();
        };
        let Err(error) = scratch.drop_all().await else {
            return Vec::new();
        };
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
}

/// The store a worker process opens: `base_url`'s backend and options at `place`.
pub fn worker_url(base_url: &str, place: &Place) -> Result<StoreUrl, Failure> {
    let parsed = target::parse(base_url)?;
    match (parsed, place) {
        (StoreUrl::Sqlite { options, .. }, Place::SqliteFile(path)) => Ok(StoreUrl::Sqlite {
            location: SqliteLocation::File(path.clone()),
            options,
        }),
        (StoreUrl::Postgres { url, mut options }, Place::Schema(schema)) => {
            options.schema = Some(schema.clone());
            let size = options.pool_size.unwrap_or(WORKER_POOL_SIZE);
            options.pool_size = Some(size);
            // Every connection open and warmed before the run, as the
            // worker guide advises: none is opened mid-run.
            options.min_idle = options.min_idle.or(Some(size));
            Ok(StoreUrl::Postgres { url, options })
        }
        (other, _) => Err(Failure::new(format!(
            "a bench worker cannot open {} there: it is started by `a2-store bench`, not by hand",
            other.backend()
        ))),
    }
}
