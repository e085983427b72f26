//! The PostgreSQL backend as a benchmark factory (`postgres`): every
//! [`create`](StoreFactory::create) connects to a fresh schema of the server
//! named by `A2_POSTGRES_URL`, and every schema it made is dropped again —
//! as soon as no store on it is left (checked at each `create`) or, at the
//! latest, when the factory is dropped.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{Clock, IdGenerator, RandomIds, Result, Store, SystemClock};
use a2_store_postgres::{PostgresOptions, PostgresStore};
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
/// stores from it are still in use makes those stores fail.
pub struct PostgresFactory {
    url: String,
    created: Mutex<Vec<Created>>,
}

impl std::fmt::Debug for PostgresFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresFactory")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl PostgresFactory {
    /// A factory on the server at `url`; connects to nothing until the first
    /// `create`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            created: Mutex::new(Vec::new()),
        }
    }

    /// A factory on the server named by [`URL_VAR`], or `None` after one line
    /// on stderr saying that `target`'s PostgreSQL groups are skipped and how
    /// to run them.
    pub fn from_env(target: &str) -> Option<Self> {
        match std::env::var(URL_VAR) {
            Ok(url) if !url.trim().is_empty() => Some(Self::new(url.trim())),
            _ => {
                eprintln!(
                    "{target}: PostgreSQL groups skipped: {URL_VAR} is not set (e.g. \
                     {URL_VAR}=postgres://postgres@127.0.0.1:5432/test cargo bench -p a2-benches)"
                );
                None
            }
        }
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schemas this factory created and has not dropped yet, oldest first.
    pub fn schemas(&self) -> Vec<String> {
        self.created()
            .iter()
            .map(|created| created.schema.clone())
            .collect()
    }

    fn created(&self) -> std::sync::MutexGuard<'_, Vec<Created>> {
        self.created.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers a new schema before anything is created on it, so it is
    /// dropped even when connecting fails half-way.
    fn new_schema(&self) -> String {
        let schema = format!("{SCHEMA_PREFIX}{}", uuid::Uuid::new_v4().simple());
        self.created().push(Created {
            schema: schema.clone(),
            stores: Vec::new(),
        });
        schema
    }

    /// Opens a store on `schema` and records it as a user of the schema.
    async fn open(
        &self,
        schema: &str,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<PostgresStore>> {
        let options = PostgresOptions {
            clock,
            ids,
            pool_size: POOL_SIZE,
            schema: schema.to_owned(),
            ..PostgresOptions::default()
        };
        let store = Arc::new(PostgresStore::connect(&self.url, options).await?);
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
            if drop_schema(&self.url, &created.schema).await.is_err() {
                self.created().push(created);
            }
        }
    }
}

/// Drops `schema` (with its tables) on the server at `url`, through a store
/// of its own so no SQL is written here.
async fn drop_schema(url: &str, schema: &str) -> Result<()> {
    let options = PostgresOptions {
        clock: Arc::new(SystemClock),
        ids: Arc::new(RandomIds),
        pool_size: 1,
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    };
    PostgresStore::connect(url, options)
        .await?
        .drop_schema()
        .await
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
        let schema = self.new_schema();
        let store: Arc<dyn Store> = self.open(&schema, clock, ids).await?;
        Ok(store)
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        self.sweep().await;
        let schema = self.new_schema();
        let first = self.open(&schema, clock.clone(), ids.clone()).await?;
        let second = self.open(&schema, clock, ids).await?;
        Ok(Some([first, second]))
    }
}

impl Drop for PostgresFactory {
    /// Drops every schema still listed, from a thread with a runtime of its
    /// own (so it works inside or outside a tokio runtime); a schema that
    /// cannot be dropped is named on stderr.
    fn drop(&mut self) {
        let schemas = std::mem::take(&mut *self.created())
            .into_iter()
            .map(|created| created.schema)
            .collect::<Vec<_>>();
        if schemas.is_empty() {
            return;
        }
        let url = self.url.clone();
        let worker = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => return schemas_left(&schemas, &error.to_string()),
            };
            for schema in &schemas {
                if let Err(error) = runtime.block_on(drop_schema(&url, schema)) {
                    schemas_left(std::slice::from_ref(schema), &error.to_string());
                }
            }
        });
        if worker.join().is_err() {
            eprintln!("postgres: the thread dropping the bench schemas panicked");
        }
    }
}

/// Says on stderr which bench schemas were left on the server, and why.
fn schemas_left(schemas: &[String], why: &str) {
    eprintln!(
        "postgres: could not drop bench schema(s) {}: {why}",
        schemas.join(", ")
    );
}
