//! Turning a URL argument into an open store, with one-line errors.

use std::sync::Arc;

use a2_store::postgres;
use a2_store::{OpenOptions, ReadOptions, SqliteLocation, Store, StoreUrl};

use crate::failure::Failure;

/// Parses a URL argument.
pub fn parse(url: &str) -> Result<StoreUrl, Failure> {
    StoreUrl::parse(url).map_err(|error| Failure::new(error.to_string()))
}

/// Opens `url` read-only for a command that only looks: nothing is created,
/// migrated or written (see [`OpenOptions::read_only`]).
pub async fn open_read_only(url: &str) -> Result<Arc<dyn Store>, Failure> {
    open_checked(url, OpenOptions::default().with_read_only(true)).await
}

/// Opens `url` for a command that repairs existing data: a SQLite file or
/// PostgreSQL schema that does not exist is an error (it is never created
/// here).
pub async fn open_existing(url: &str) -> Result<Arc<dyn Store>, Failure> {
    open_checked(url, OpenOptions::default()).await
}

async fn open_checked(url: &str, options: OpenOptions) -> Result<Arc<dyn Store>, Failure> {
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
    open_with(url, &parsed, options).await
}

/// Opens a parsed URL with the system clock and random ids.
pub async fn open(url: &str, parsed: &StoreUrl) -> Result<Arc<dyn Store>, Failure> {
    open_with(url, parsed, OpenOptions::default()).await
}

async fn open_with(
    url: &str,
    parsed: &StoreUrl,
    options: OpenOptions,
) -> Result<Arc<dyn Store>, Failure> {
    a2_store::open_url(parsed, options)
        .await
        .map_err(|error| Failure::store(url, "opening the store", &error))
}

/// `Ok` when `session` has at least one stored row (a clear marker is never
/// reclaimed, so a cleared session still has one); otherwise the failure a
/// repair of a session that does not exist gives, saying nothing changed.
pub async fn require_session(store: &dyn Store, url: &str, session: &str) -> Result<(), Failure> {
    let rows = store
        .read(
            session,
            ReadOptions {
                limit: Some(1),
                ..ReadOptions::default()
            },
        )
        .await
        .map_err(|e| Failure::store(url, &format!("looking up session '{session}'"), &e))?;
    if rows.is_empty() {
        return Err(Failure::new(format!(
            "no session '{}' in '{url}': nothing was changed — check the id with `a2-store inspect {url} sessions`",
            crate::output::escape(session)
        )));
    }
    Ok(())
}
