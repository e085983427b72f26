//! The PostgreSQL backend as a benchmark factory (`postgres`): every
//! [`create`](StoreFactory::create) connects to a fresh schema of the server
//! named by `A2_POSTGRES_URL`, and every schema it made is dropped again —
//! as soon as no store on it is left (checked at each `create`) or, at the
//! latest, when the factory is dropped (by
//! [`ScratchSchemas`], which reports on stderr any schema it could not drop).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{Clock, IdGenerator, Result, Store};
use a2_store_postgres::{PostgresOptions, PostgresStore, ScratchSchemas};
use async_trait::async_trait;

/// The variable naming the PostgreSQL server the `postgres` groups run
/// against, e.g. `postgres://postgres@127.0.0.1:5432/test`.
pub const URL_VAR: &str = "A2_POSTGRES_URL";

/// Connections each store's pool may open: at least the most tokio tasks any
/// body runs on one store at once (8, in `concurrent_claim_complete`), so no
/// task ever waits for a connection instead of for the server.
pub const POOL_SIZE: usize = 8;

/// The prefix of every schema the factory creates (`a2bench_<uuid>`), so a
/// schema left behind by a killed run is easy to find and drop by hand.
pub const SCHEMA_PREFIX: &str = "a2bench_";

/// A schema this factory created and the stores it handed out on it.
struct Created {
    schema: String,
    stores: Vec<Weak<PostgresStore>>,
}

impl Created {
    /// Whether every store on the schema is gone (or none was ever opened).
    fn unused(&self) -> bool {
        self.stores.iter().all(|store| store.strong_count() == 0)
    }
}

/// Stores on fresh schemas of one PostgreSQL server, named `postgres`.
///
/// Guarantees: no two stores from different `create` calls share a schema;
/// `create_pair` opens two stores (two pools) on one schema; a schema is
/// dropped once every store on it is dropped (at the next `create`) or when
/// the factory is dropped, whichever comes first. Dropping the factory while
/// stores from it are still in use makes those stores fail. Naming and
/// dropping the schemas is [`ScratchSchemas`]'s work.
pub struct PostgresFactory {
    scratch: ScratchSchemas,
    created: Mutex<Vec<Created>>,
}

impl std::fmt::Debug for PostgresFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresFactory")
            .field("url", &self.scratch.url())
            .finish_non_exhaustive()
    }
}

impl PostgresFactory {
    /// A factory on the server at `url` whose stores hold up to
    /// [`POOL_SIZE`] connections; connects to nothing until the first
    /// `create`.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_pool_size(url, POOL_SIZE)
    }

    /// A factory on the server at `url` whose stores hold up to `pool_size`
    /// connections (for bodies running more tasks at once than
    /// [`POOL_SIZE`]).
    pub fn with_pool_size(url: impl Into<String>, pool_size: usize) -> Self {
        let options = PostgresOptions {
            pool_size,
            ..PostgresOptions::default()
        };
        Self {
            scratch: ScratchSchemas::new(url, SCHEMA_PREFIX).with_options(options),
            created: Mutex::new(Vec::new()),
        }
    }

    /// A factory on the server named by [`URL_VAR`], or `None` after one line
    /// on stderr saying that `target`'s PostgreSQL groups are skipped and how
    /// to run them.
    pub fn from_env(target: &str) -> Option<Self> {
        url_from_env(target).map(Self::new)
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        self.scratch.url()
    }

    /// The schemas this factory created and has not dropped yet, oldest first.
    pub fn schemas(&self) -> Vec<String> {
        self.scratch.schemas()
    }

    fn created(&self) -> std::sync::MutexGuard<'_, Vec<Created>> {
        self.created.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Names a new schema (remembered for dropping before anything is
    /// created on it, so it is dropped even when connecting fails half-way).
    fn new_schema(&self) -> Result<String> {
        let schema = self.scratch.fresh_schema()?;
        self.created().push(Created {
            schema: schema.clone(),
            stores: Vec::new(),
        });
        Ok(schema)
    }

    /// Opens a store on `schema` and records it as a user of the schema.
    async fn open(
        &self,
        schema: &str,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<PostgresStore>> {
        let store = Arc::new(self.scratch.open(schema, clock, ids).await?);
        if let Some(created) = self.created().iter_mut().find(|c| c.schema == schema) {
            created.stores.push(Arc::downgrade(&store));
        }
        Ok(store)
    }

    /// Drops the schemas no store uses any more; one that cannot be dropped
    /// now stays listed for the next sweep or the final drop.
    async fn sweep(&self) {
        let unused = {
            let mut created = self.created();
            let (unused, live): (Vec<_>, Vec<_>) =
                std::mem::take(&mut *created).into_iter().partition(|c| {
                    // A schema with no store yet is being connected to now.
                    !c.stores.is_empty() && c.unused()
                });
            *created = live;
            unused
        };
        for created in unused {
            if self.scratch.drop_schema(&created.schema).await.is_err() {
                self.created().push(created);
            }
        }
    }
}

/// The server named by [`URL_VAR`], or `None` after one line on stderr
/// saying that `target`'s PostgreSQL groups are skipped and how to run them.
pub fn url_from_env(target: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        _ => {
            eprintln!(
                "{target}: PostgreSQL groups skipped: {URL_VAR} is not set (e.g. \
                 {URL_VAR}=postgres://postgres@127.0.0.1:5432/test cargo bench -p a2-benches)"
            );
            None
        }
    }
}

#[async_trait]
impl StoreFactory for PostgresFactory {
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
        self.sweep().await;
        let schema = self.new_schema()?;
        let store: Arc<dyn Store> = self.open(&schema, clock, ids).await?;
        Ok(store)
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        self.sweep().await;
        let schema = self.new_schema()?;
        let first = self.open(&schema, clock.clone(), ids.clone()).await?;
        let second = self.open(&schema, clock, ids).await?;
        Ok(Some([first, second]))
    }
}
