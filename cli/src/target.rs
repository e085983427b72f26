//! Turning a URL argument into an open store, with one-line errors.

use std::sync::Arc;

use a2_store::{OpenOptions, SqliteLocation, Store, StoreUrl};

use crate::failure::Failure;

/// Parses a URL argument.
pub fn parse(url: &str) -> Result<StoreUrl, Failure> {
    StoreUrl::parse(url).map_err(|error| Failure::new(error.to_string()))
}

/// Opens `url` for a command that reads or repairs existing data: a SQLite
/// file or PostgreSQL schema that does not exist is an error (it is never
/// created here).
pub async fn open_existing(url: &str) -> Result<Arc<dyn Store>, Failure> {
    let parsed = parse(url)?;
    if let StoreUrl::Sqlite {
        location: SqliteLocation::File(path),
        ..
    } = &parsed
    {
        if !path.is_file() {
            return Err(Failure::new(format!(
                "no SQLite database at '{}': check the path (this command never creates one)",
                path.display()
            )));
        }
    }
    if let StoreUrl::Postgres {
        url: connection,
        options,
    } = &parsed
    {
        let default = a2_store_postgres::PostgresOptions::default().schema;
        let schema = options.schema.as_deref().unwrap_or(&default);
        if postgres_schema_exists(connection, schema).await == Some(false) {
            return Err(Failure::new(format!(
                "no schema '{schema}' on the PostgreSQL server of {url}: check the URL's database and ?schema= (this command never creates one)"
            )));
        }
    }
    open(url, &parsed).await
}

/// Whether `schema` exists on the server; `None` when the server cannot be
/// asked (opening the store then reports why).
async fn postgres_schema_exists(connection: &str, schema: &str) -> Option<bool> {
    let (client, driver) = tokio_postgres::connect(connection, tokio_postgres::NoTls)
        .await
        .ok()?;
    let driver = tokio::spawn(driver);
    let found = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .ok()
        .map(|row| row.is_some());
    drop(client);
    let _ = driver.await;
    found
}

/// Opens a parsed URL with the system clock and random ids.
pub async fn open(url: &str, parsed: &StoreUrl) -> Result<Arc<dyn Store>, Failure> {
    a2_store::open_url(parsed, OpenOptions::default())
        .await
        .map_err(|error| Failure::store(url, "opening the store", &error))
}
