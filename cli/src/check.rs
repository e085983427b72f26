//! `a2-store check`: the conformance suite against a scratch store of the URL's backend.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use a2_conformance::{Capabilities, StoreFactory};
use a2_store::{
    Clock, IdGenerator, OpenOptions, SqliteLocation, SqliteUrlOptions, Store, StoreError, StoreUrl,
};
use async_trait::async_trait;
use tempfile::TempDir;

use crate::args::CheckArgs;
use crate::failure::{Failure, EXIT_CHECK_FAILED};
use crate::output::{print, print_json};
use crate::target;

/// Runs `check`; returns the exit status (0, or 1 when a case failed).
pub async fn run(args: &CheckArgs) -> Result<u8, Failure> {
    let parsed = target::parse(&args.url)?;
    if !parsed.is_enabled() {
        // Opening gives the message naming the feature to enable.
        target::open(&args.url, &parsed).await?;
    }
    let factory = ScratchFactory::new(&args.url, &parsed)?;
    // A case that panics is reported as failed; keep its panic off the terminal.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report = a2_conformance::run(&factory).await;
    std::panic::set_hook(hook);
    drop(factory);
    if args.json {
        print_json(&report)?;
    } else {
        print(&format!("{report}\n"))?;
    }
    Ok(if report.is_success() {
        0
    } else {
        EXIT_CHECK_FAILED
    })
}

/// Hands the suite fresh stores of the URL's backend, never the URL's data:
/// SQLite files live in a temporary directory removed when it drops.
struct ScratchFactory {
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
}

impl ScratchFactory {
    fn new(url: &str, parsed: &StoreUrl) -> Result<Self, Failure> {
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
            other => {
                return Err(Failure::new(format!(
                    "check cannot make a scratch database for {url} (backend {}): use memory: or a sqlite: URL",
                    other.backend()
                )))
            }
        };
        Ok(Self {
            name: parsed.backend().to_owned(),
            scratch,
        })
    }

    /// A fresh scratch URL: a new file for SQLite files.
    fn scratch_url(&self) -> StoreUrl {
        match &self.scratch {
            Scratch::Memory => StoreUrl::Memory,
            Scratch::SqliteMemory(options) => StoreUrl::Sqlite {
                location: SqliteLocation::Memory,
                options: *options,
            },
            Scratch::SqliteFiles { dir, options, next } => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                StoreUrl::Sqlite {
                    location: SqliteLocation::File(dir.path().join(format!("case-{n}.db"))),
                    options: *options,
                }
            }
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
            // stores on one SQLite file.
            Scratch::SqliteFiles { .. } | Scratch::Memory => Capabilities::ALL,
            Scratch::SqliteMemory(_) => Capabilities::NONE,
        }
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>, StoreError> {
        a2_store::open_url(&self.scratch_url(), options(clock, ids)).await
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
            Scratch::SqliteFiles { .. } => self.scratch_url(),
        };
        let first = a2_store::open_url(&url, options(Arc::clone(&clock), Arc::clone(&ids))).await?;
        let second = a2_store::open_url(&url, options(clock, ids)).await?;
        Ok(Some([first, second]))
    }
}
