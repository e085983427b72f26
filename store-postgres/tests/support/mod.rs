//! Shared by the PostgreSQL tests: the server URL from `A2_POSTGRES_URL`,
//! fresh schemas with random names, and dropping them afterwards.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use a2_conformance::{Capabilities, StoreFactory};
use a2_store_api::{Clock, IdGenerator, Result, Store};
use a2_store_postgres::{PostgresOptions, PostgresStore};

/// The variable naming the server the PostgreSQL tests run against.
pub const URL_VAR: &str = "A2_POSTGRES_URL";

/// The server URL, or `None` (after saying so on stderr) when the variable is
/// unset: then the caller returns early and the PostgreSQL cases do not run.
pub fn url_or_skip(test: &str) -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            // Once per test binary, straight to stderr so the test harness
            // does not capture it: the skip must be visible.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "\n{test}: the PostgreSQL cases were NOT run: {URL_VAR} is not set. To run \
                     them, start PostgreSQL and set it, e.g.\n  \
                     {URL_VAR}=postgres://postgres@127.0.0.1:5432/test cargo test -p a2-store-postgres\n"
                );
            });
            None
        }
    }
}

/// A fresh schema name no other run uses.
pub fn fresh_schema() -> String {
    format!("a2t_{}", uuid::Uuid::new_v4().simple())
}

/// A plain client on the server at `url` (its connection driven by a task of
/// its own), for tests that look at or lock rows behind a store's back.
pub async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("raw connect");
    tokio::spawn(connection);
    client
}

/// Drops `schemas` on the server at `url`, from a thread of its own so it
/// works inside or outside a tokio runtime (it is called from `Drop`).
pub fn drop_schemas(url: &str, schemas: Vec<String>) {
    if schemas.is_empty() {
        return;
    }
    let owned = url.to_owned();
    let dropped = std::thread::spawn(move || {
        let url = owned;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime to drop test schemas");
        runtime.block_on(async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect to drop test schemas");
            let driver = tokio::spawn(connection);
            for schema in schemas {
                // Test schema names come from fresh_schema(): plain identifiers.
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await
                    .expect("drop a test schema");
            }
            drop(client);
            let _ = driver.await;
        });
    })
    .join();
    if dropped.is_err() {
        eprintln!("could not drop the test schemas on {url}");
    }
}

/// Options for a test store on `schema`.
pub fn options(schema: &str, clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> PostgresOptions {
    PostgresOptions {
        clock,
        ids,
        pool_size: 4,
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    }
}

/// Stores on fresh schemas of one server; drops every schema it made when
/// dropped itself.
pub struct PgFactory {
    url: String,
    schemas: Mutex<Vec<String>>,
}

impl PgFactory {
    /// A factory on the server named by `A2_POSTGRES_URL`, or `None`.
    pub fn from_env(test: &str) -> Option<Self> {
        url_or_skip(test).map(|url| Self {
            url,
            schemas: Mutex::new(Vec::new()),
        })
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new schema, remembered for dropping.
    pub fn schema(&self) -> String {
        self.schema_with_suffix("")
    }

    /// A new schema whose name ends with `suffix`, remembered for dropping.
    pub fn schema_with_suffix(&self, suffix: &str) -> String {
        let schema = format!("{}{suffix}", fresh_schema());
        self.schemas
            .lock()
            .expect("schema list lock")
            .push(schema.clone());
        schema
    }

    /// A store on `schema`.
    pub async fn store_on(
        &self,
        schema: &str,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<PostgresStore> {
        PostgresStore::connect(&self.url, options(schema, clock, ids)).await
    }
}

impl Drop for PgFactory {
    fn drop(&mut self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().expect("schema list lock"));
        drop_schemas(&self.url, schemas);
    }
}

#[async_trait::async_trait]
impl StoreFactory for PgFactory {
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
        let schema = self.schema();
        Ok(Arc::new(self.store_on(&schema, clock, ids).await?))
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let schema = self.schema();
        let first = self.store_on(&schema, clock.clone(), ids.clone()).await?;
        let second = self.store_on(&schema, clock, ids).await?;
        Ok(Some([Arc::new(first), Arc::new(second)]))
    }
}
