//! Turning a URL argument into an open store, with one-line errors.

use std::sync::Arc;

use a2_store::postgres;
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
        let schema = postgres::options(options, OpenOptions::default()).schema;
        // `None` when the server cannot be asked: opening then says why.
        let exists = postgres::schema_exists(connection, &schema).await.ok();
        if exists == Some(false) {
            return Err(Failure::new(format!(
                "no schema '{schema}' on the PostgreSQL server of {url}: check the URL's database and ?schema= (this command never creates one)"
            )));
        }
    }
    open(url, &parsed).await
}

/// Opens a parsed URL with the system clock and random ids.
pub async fn open(url: &str, parsed: &StoreUrl) -> Result<Arc<dyn Store>, Failure> {
    a2_store::open_url(parsed, OpenOptions::default())
        .await
        .map_err(|error| Failure::store(url, "opening the store", &error))
}
