//! Scratch schemas: fresh, uniquely named schemas of one PostgreSQL server
//! for tests, benchmarks and `a2-store check`, dropped again afterwards.
//!
//! Every user that needs "a store nobody else touches" on a shared server
//! goes through [`ScratchSchemas`]: it names schemas `<prefix><uuid>`, opens
//! [`PostgresStore`]s on them with the caller's clock and ids, and drops
//! every schema it named — explicitly with [`ScratchSchemas::drop_all`], and
//! at the latest, best effort, when it is dropped itself. It only ever drops
//! schemas it named (or was handed with [`ScratchSchemas::adopt`]) and that
//! carry its prefix, so a prefix such as `a2t_` marks what a killed run may
//! have left behind ([`schemas_with_prefix`] finds those).
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use a2_store_api::{RandomIds, Store, SystemClock};
//! use a2_store_postgres::ScratchSchemas;
//!
//! # async fn demo() -> a2_store_api::Result<()> {
//! let scratch = ScratchSchemas::new("postgres://postgres@127.0.0.1:5432/test", "a2demo_");
//! let store = scratch.create(Arc::new(SystemClock), Arc::new(RandomIds)).await?;
//! assert!(store.schema().starts_with("a2demo_"));
//! drop(store);
//! scratch.drop_all().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # SQL and identifiers
//!
//! Values (schema names looked up, prefixes, timeouts) are always bound as
//! parameters. `DROP SCHEMA` is DDL, which takes no parameters, so the
//! schema name has to be part of the statement text: the only names that
//! reach it are ones this module generated from a prefix and a random UUID
//! (or adopted), each checked by [`validate_schema_name`] (plain
//! `[a-z_][a-z0-9_]*`) and then quoted as an identifier, `"` doubled.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use a2_store_api::{Clock, IdGenerator, Result, StoreError};
use tokio_postgres::Client;

use crate::error::db_error;

use crate::options::{validate_schema_name, PostgresOptions};
use crate::store::PostgresStore;

/// How long connecting to the server to look up or drop schemas may take
/// when the URL sets no `connect_timeout` of its own.
pub const SCRATCH_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Extra time the client waits for a `DROP SCHEMA` past the server-side
/// statement timeout, so the server's own timeout error arrives first.
const CLIENT_GRACE: Duration = Duration::from_secs(2);

/// A fresh schema name `<prefix><32 hex digits of a random UUID>`, checked
/// by [`validate_schema_name`].
///
/// Errors: `InvalidInput` when `prefix` makes no valid schema name (empty,
/// not `[a-z_][a-z0-9_]*`, starting with `pg_`, or longer than 31 bytes).
pub fn fresh_schema_name(prefix: &str) -> Result<String> {
    // The prefix alone must be a valid name too: an empty one would make
    // the name's first character depend on the UUID, and mark nothing.
    validate_schema_name(prefix)?;
    let name = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    validate_schema_name(&name)?;
    Ok(name)
}

/// Whether a schema named `schema` exists on the server at `url`; a name
/// that is no valid schema name simply does not exist.
///
/// Errors: `InvalidInput` for a bad URL; `Backend` when the server cannot
/// be reached (within [`SCRATCH_CONNECT_TIMEOUT`] unless the URL says
/// otherwise) or the query fails.
pub async fn schema_exists(url: &str, schema: &str) -> Result<bool> {
    let connection = Connection::open(url).await?;
    let row = connection
        .client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text)",
            &[&schema],
        )
        .await
        .map_err(|error| StoreError::backend("looking up a PostgreSQL schema", error));
    connection.close().await;
    row?.try_get(0)
        .map_err(|error| StoreError::backend("reading a PostgreSQL schema lookup", error))
}

/// The schemas on the server at `url` whose names start with `prefix`, in
/// name order: what runs using that prefix left behind (for example a run
/// killed before it could drop its scratch schemas).
///
/// Errors: as [`schema_exists`].
pub async fn schemas_with_prefix(url: &str, prefix: &str) -> Result<Vec<String>> {
    let connection = Connection::open(url).await?;
    let rows = connection
        .client
        .query(
            "SELECT nspname::text FROM pg_namespace \
             WHERE left(nspname::text, length($1::text)) = $1::text ORDER BY 1",
            &[&prefix],
        )
        .await
        .map_err(|error| StoreError::backend("listing PostgreSQL schemas", error));
    connection.close().await;
    rows?
        .iter()
        .map(|row| {
            row.try_get(0)
                .map_err(|error| StoreError::backend("reading a PostgreSQL schema name", error))
        })
        .collect()
}

/// Fresh schemas on one PostgreSQL server, each named `<prefix><uuid>`, and
/// stores on them; every schema it named is dropped by
/// [`drop_all`](Self::drop_all) or, failing that, when it is dropped.
///
/// It holds no handle on the stores it opens: a store outliving its schema
/// fails on its next call. Naming a schema does not create it; the first
/// [`open`](Self::open) on it does.
///
/// Dropping it drops the schemas still listed from a thread with a runtime
/// of its own (so it works inside or outside a tokio runtime, even while
/// panicking), waiting at most [`SCRATCH_CONNECT_TIMEOUT`] to connect and
/// the options' statement timeout (plus a little) per schema; a schema left
/// behind is named on stderr with the statement that drops it. It never
/// panics.
#[derive(Debug)]
pub struct ScratchSchemas {
    url: String,
    prefix: String,
    template: PostgresOptions,
    /// Every schema named (or adopted) and not dropped yet, oldest first.
    named: Mutex<Vec<String>>,
}

impl ScratchSchemas {
    /// Scratch schemas `<prefix><uuid>` on the server at `url` (a
    /// `postgres://` URL or key=value string); stores get
    /// [`PostgresOptions::default`] apart from schema, clock and ids unless
    /// [`with_options`](Self::with_options) says otherwise. Connects to
    /// nothing yet; a bad prefix shows at the first
    /// [`fresh_schema`](Self::fresh_schema).
    pub fn new(url: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: prefix.into(),
            template: PostgresOptions::default(),
            named: Mutex::new(Vec::new()),
        }
    }

    /// Opens stores with `options` (pool size, statement timeout, ...); its
    /// `schema`, `clock` and `ids` are replaced by each call's own. The
    /// statement timeout also bounds each `DROP SCHEMA`.
    pub fn with_options(mut self, options: PostgresOptions) -> Self {
        self.template = options;
        self
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The prefix of every schema name this hands out.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The options a store on `schema` is opened with: the template of
    /// [`with_options`](Self::with_options) with `schema`, `clock` and `ids`.
    pub fn options(
        &self,
        schema: &str,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> PostgresOptions {
        PostgresOptions {
            clock,
            ids,
            schema: schema.to_owned(),
            ..self.template.clone()
        }
    }

    /// A new schema name no other run uses, remembered for dropping.
    ///
    /// Errors: `InvalidInput` when the prefix makes no valid schema name
    /// (see [`fresh_schema_name`]).
    pub fn fresh_schema(&self) -> Result<String> {
        self.fresh_schema_with_suffix("")
    }

    /// A new schema name ending in `suffix` (`<prefix><uuid><suffix>`),
    /// remembered for dropping; for cases about long names.
    ///
    /// Errors: `InvalidInput` when the whole name is no valid schema name
    /// (see [`validate_schema_name`]).
    pub fn fresh_schema_with_suffix(&self, suffix: &str) -> Result<String> {
        let name = format!("{}{suffix}", fresh_schema_name(&self.prefix)?);
        validate_schema_name(&name)?;
        self.named().push(name.clone());
        Ok(name)
    }

    /// Takes charge of dropping `schema`, a name made elsewhere (for example
    /// by [`fresh_schema_name`] in a process that cannot hold this value).
    ///
    /// Errors: `InvalidInput` when `schema` is no valid schema name or does
    /// not start with this prefix: nothing else is ever dropped.
    pub fn adopt(&self, schema: &str) -> Result<()> {
        validate_schema_name(schema)?;
        if !schema.starts_with(&self.prefix) {
            return Err(StoreError::invalid_input(format!(
                "schema '{schema}' does not start with the scratch prefix '{}': only scratch schemas are dropped",
                self.prefix
            )));
        }
        let mut named = self.named();
        if !named.iter().any(|known| known == schema) {
            named.push(schema.to_owned());
        }
        Ok(())
    }

    /// The schemas named and not dropped yet, oldest first.
    pub fn schemas(&self) -> Vec<String> {
        self.named().clone()
    }

    /// Stops tracking every schema still listed, without dropping any, and
    /// returns their names: for a caller that reports what is left itself
    /// (after a failed [`drop_all`](Self::drop_all)) and wants no second
    /// try and no note on stderr when this is dropped.
    pub fn forget_all(&self) -> Vec<String> {
        std::mem::take(&mut *self.named())
    }

    /// A store on `schema` (created with its tables when missing) with
    /// [`options`](Self::options); see [`PostgresStore::connect`].
    pub async fn open(
        &self,
        schema: &str,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<PostgresStore> {
        PostgresStore::connect(&self.url, self.options(schema, clock, ids)).await
    }

    /// A store on a new schema of its own.
    ///
    /// Errors: as [`fresh_schema`](Self::fresh_schema) and
    /// [`PostgresStore::connect`]; the schema is remembered for dropping
    /// before connecting, so it goes even when connecting fails half-way.
    pub async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<PostgresStore> {
        let schema = self.fresh_schema()?;
        self.open(&schema, clock, ids).await
    }

    /// Two stores (two pools) on one new schema, as two processes sharing a
    /// deployment would be. Errors: as [`create`](Self::create).
    pub async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<[PostgresStore; 2]> {
        let schema = self.fresh_schema()?;
        let first = self
            .open(&schema, Arc::clone(&clock), Arc::clone(&ids))
            .await?;
        let second = self.open(&schema, clock, ids).await?;
        Ok([first, second])
    }

    /// Drops `schema`, one of the schemas this named, with everything in it,
    /// and forgets it. Stores still on it fail after.
    ///
    /// Errors: `InvalidInput` when this did not name `schema` (nothing is
    /// dropped); `Backend` or `Busy` when the server cannot drop it now (it
    /// stays listed for a later try).
    pub async fn drop_schema(&self, schema: &str) -> Result<()> {
        if !self.named().iter().any(|known| known == schema) {
            return Err(StoreError::invalid_input(format!(
                "schema '{schema}' is not a scratch schema of this run: only those are dropped"
            )));
        }
        let connection = Connection::open(&self.url).await?;
        let dropped = connection
            .drop_schema(schema, self.template.statement_timeout)
            .await;
        connection.close().await;
        dropped?;
        self.named().retain(|known| known != schema);
        Ok(())
    }

    /// Drops every schema still listed, over one connection. A schema that
    /// cannot be dropped stays listed ([`schemas`](Self::schemas) names
    /// them; dropping `self` tries again).
    ///
    /// Errors: the first failure (`Backend`, `Busy` or `InvalidInput` for a
    /// bad URL), after every schema was tried.
    pub async fn drop_all(&self) -> Result<()> {
        let names = std::mem::take(&mut *self.named());
        let (left, error) = drop_names(&self.url, names, self.template.statement_timeout).await;
        if left.is_empty() {
            return Ok(());
        }
        let mut named = self.named();
        let newer = std::mem::take(&mut *named);
        *named = left;
        named.extend(newer);
        match error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn named(&self) -> MutexGuard<'_, Vec<String>> {
        self.named.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ScratchSchemas {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.named());
        if names.is_empty() {
            return;
        }
        let url = self.url.clone();
        let timeout = self.template.statement_timeout;
        let listed = names.join(", ");
        let worker = std::thread::Builder::new()
            .name("a2-scratch-drop".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => return report_left(&names, &error.to_string()),
                };
                let (left, error) = runtime.block_on(drop_names(&url, names, timeout));
                if let Some(error) = error {
                    report_left(&left, &error.to_string());
                }
            });
        match worker {
            Ok(worker) => {
                if worker.join().is_err() {
                    eprintln!("a2-store-postgres: the thread dropping scratch schemas failed");
                }
            }
            Err(error) => eprintln!(
                "a2-store-postgres: no thread to drop scratch schemas ({error}); left: {listed}"
            ),
        }
    }
}

/// Says on stderr which scratch schemas were left on the server, why, and
/// how to drop them by hand.
fn report_left(schemas: &[String], why: &str) {
    for schema in schemas {
        eprintln!(
            "a2-store-postgres: scratch schema {schema} was not dropped ({why}): drop it with DROP SCHEMA {} CASCADE",
            quote_identifier(schema)
        );
    }
}

/// Drops `names` over one connection; returns the ones left and the first
/// error.
async fn drop_names(
    url: &str,
    names: Vec<String>,
    timeout: Duration,
) -> (Vec<String>, Option<StoreError>) {
    if names.is_empty() {
        return (names, None);
    }
    let connection = match Connection::open(url).await {
        Ok(connection) => connection,
        Err(error) => return (names, Some(error)),
    };
    let mut left = Vec::new();
    let mut first = None;
    for name in names {
        if let Err(error) = connection.drop_schema(&name, timeout).await {
            left.push(name);
            first.get_or_insert(error);
        }
    }
    connection.close().await;
    (left, first)
}

/// `"name"`, with every `"` in it doubled: `name` as a PostgreSQL identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A plain client with its connection driven by a task of its own.
struct Connection {
    client: Client,
    driver: tokio::task::JoinHandle<()>,
}

impl Connection {
    /// Connects to `url`, within [`SCRATCH_CONNECT_TIMEOUT`] unless the URL
    /// sets its own `connect_timeout`.
    async fn open(url: &str) -> Result<Self> {
        let (mut config, tls) = crate::tls::prepare(url)?;
        let limit = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(SCRATCH_CONNECT_TIMEOUT);
        config.connect_timeout(limit);
        if config.get_application_name().is_none() {
            config.application_name("a2-store-postgres scratch");
        }
        let (client, connection) = tokio::time::timeout(limit + CLIENT_GRACE, config.connect(tls))
            .await
            .map_err(|_| timed_out("connecting to PostgreSQL"))?
            .map_err(|error| db_error("connecting to PostgreSQL", error))?;
        let driver = tokio::spawn(async move {
            // The connection's error, if any, shows in the client's calls.
            let _ = connection.await;
        });
        Ok(Self { client, driver })
    }

    /// `DROP SCHEMA IF EXISTS "name" CASCADE`, bounded by `timeout` on the
    /// server (lock waits included) and a little more on the client.
    async fn drop_schema(&self, name: &str, timeout: Duration) -> Result<()> {
        // The only text formatted into SQL: a validated, quoted identifier
        // (DDL takes no parameters). See the module documentation.
        validate_schema_name(name)?;
        let statement = format!("DROP SCHEMA IF EXISTS {} CASCADE", quote_identifier(name));
        let millis = timeout.as_millis().max(1).to_string();
        let work = async {
            self.client
                .execute(
                    "SELECT set_config('statement_timeout', $1::text, false)",
                    &[&millis],
                )
                .await?;
            self.client.batch_execute(&statement).await
        };
        tokio::time::timeout(timeout + CLIENT_GRACE, work)
            .await
            .map_err(|_| timed_out("dropping a PostgreSQL scratch schema"))?
            .map_err(|error| {
                StoreError::backend(format!("dropping the PostgreSQL schema {name}"), error)
            })
    }

    /// Closes the client and waits for its connection task to end.
    async fn close(self) {
        drop(self.client);
        let _ = self.driver.await;
    }
}

/// The error of a client-side time limit that ran out while `what`.
fn timed_out(what: &str) -> StoreError {
    StoreError::backend(
        format!("{what}: no answer in time"),
        io::Error::new(io::ErrorKind::TimedOut, "timed out"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_carry_the_prefix_and_differ() {
        let a = fresh_schema_name("a2x_").unwrap();
        let b = fresh_schema_name("a2x_").unwrap();
        assert!(a.starts_with("a2x_") && a.len() == 4 + 32, "{a}");
        assert_ne!(a, b);
        for bad in ["", "A2_", "a-b_", "pg_x", "2a_", &"a".repeat(32)] {
            assert!(fresh_schema_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_identifier("a2t_x"), "\"a2t_x\"");
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn only_named_schemas_with_the_prefix_are_taken() {
        let scratch = ScratchSchemas::new("postgres://127.0.0.1:1/none", "a2x_");
        let named = scratch.fresh_schema().unwrap();
        let long = scratch.fresh_schema_with_suffix(&"x".repeat(27)).unwrap();
        assert_eq!(long.len(), 63);
        assert!(scratch.fresh_schema_with_suffix(&"x".repeat(28)).is_err());
        assert!(scratch.adopt("public").is_err());
        assert!(scratch.adopt("a2x_Bad").is_err());
        scratch.adopt("a2x_other").unwrap();
        scratch.adopt("a2x_other").unwrap();
        assert_eq!(scratch.schemas(), [named, long, "a2x_other".to_owned()]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let refused = runtime.block_on(scratch.drop_schema("public")).unwrap_err();
        assert_eq!(refused.code(), a2_store_api::ErrorCode::InvalidInput);
        // Nothing listens on port 1: dropping fails fast and keeps every
        // name; forgetting empties the list; the final drop of a name left
        // fails the same way (a note on stderr) without panicking.
        assert!(runtime.block_on(scratch.drop_all()).is_err());
        assert_eq!(scratch.schemas().len(), 3);
        assert_eq!(scratch.forget_all().len(), 3);
        assert!(scratch.schemas().is_empty());
        let _ = scratch.fresh_schema().unwrap();
        drop(scratch);
    }
}
