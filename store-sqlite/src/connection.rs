//! Opening one SQLite connection with the store's pragmas.

use std::path::{Path, PathBuf};
use std::time::Duration;

use a2_store_api::StoreError;
use rusqlite::{Connection, DatabaseName, OpenFlags};

use crate::options::SqliteOptions;
use crate::schema::{open_error, SCHEMA_VERSION};

/// Where a store's database lives.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    /// A database file (WAL journal).
    File(PathBuf),
    /// A private in-memory database (one connection).
    Memory,
}

impl Location {
    /// The path as shown in error messages.
    pub(crate) fn display(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Memory => ":memory:".to_owned(),
        }
    }
}

/// Page cache per connection, as `PRAGMA cache_size` takes it (negative: KiB).
const CACHE_KIB: i64 = -8192;

/// How many prepared statements each connection keeps compiled.
const STATEMENT_CACHE: usize = 128;

/// Opens a connection to `location` and applies the per-connection pragmas:
/// busy timeout, WAL journal (files), `synchronous` from the durability,
/// the page cache and the optional page cap. Every failure names the path.
pub(crate) fn open_connection(
    location: &Location,
    options: &SqliteOptions,
) -> Result<Connection, StoreError> {
    let shown = location.display();
    // Validated before the file is touched: a bad option creates nothing.
    let page_cap = options.page_cap()?;
    let conn = match location {
        Location::File(path) if options.read_only => {
            check_readable_file(path, &shown)?;
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            Connection::open_with_flags(path, flags)
                .map_err(|error| open_error(&shown, "opening the database read-only", error))?
        }
        Location::File(path) => {
            check_file(path, &shown)?;
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            Connection::open_with_flags(path, flags)
                .map_err(|error| open_error(&shown, "opening the database", error))?
        }
        Location::Memory if options.read_only => {
            return Err(StoreError::invalid_input(
                "an in-memory SQLite database cannot be opened read-only: it starts empty, with nothing to read",
            ))
        }
        Location::Memory => Connection::open_in_memory()
            .map_err(|error| open_error(&shown, "opening the database", error))?,
    };
    // SQLite takes the timeout in milliseconds as a C int.
    let busy_ms = u64::try_from(i32::MAX).unwrap_or(u64::MAX);
    conn.busy_timeout(options.busy_timeout.min(Duration::from_millis(busy_ms)))
        .map_err(|error| open_error(&shown, "setting the busy timeout", error))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Refuse a newer schema before anything (even the journal mode) is written.
    let version = refuse_newer_schema(&conn, &shown)?;
    if options.read_only {
        // Nothing may be migrated: only this build's own version is readable.
        require_current_schema(version, &shown)?;
    } else {
        if version == 0 {
            shrink_when_freed(&conn, &shown)?;
        }
        if let Location::File(_) = location {
            let mode: String = conn
                .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
                .map_err(|error| open_error(&shown, "switching to the WAL journal", error))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(StoreError::Backend {
                    message: format!(
                        "database '{shown}' refused the WAL journal (journal mode stays '{mode}')"
                    ),
                    source: None,
                });
            }
            let read_only = conn
                .is_readonly(DatabaseName::Main)
                .map_err(|error| open_error(&shown, "checking write access", error))?;
            if read_only {
                return Err(read_only_error(&shown, None));
            }
        }
    }
    conn.pragma_update(None, "synchronous", options.durability.pragma_value())
        .map_err(|error| open_error(&shown, "setting the durability", error))?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(|error| open_error(&shown, "setting temp_store", error))?;
    // 8 MiB of page cache per connection (SQLite's default is 2 MiB): the
    // upper levels of the event and cursor indexes of big sessions stay hot.
    conn.pragma_update(None, "cache_size", CACHE_KIB)
        .map_err(|error| open_error(&shown, "setting the page cache size", error))?;
    if let Some(pages) = page_cap {
        // An integer bound as the pragma's value, never text formatted in.
        conn.pragma_update(None, "max_page_count", pages)
            .map_err(|error| open_error(&shown, "setting the page cap", error))?;
    }
    Ok(conn)
}

/// Makes a new, empty database give freed pages back to the file system
/// on `PRAGMA incremental_vacuum` (which deletes and prunes run): the mode
/// can only be chosen before the first table is created, so a database
/// that already holds tables (an older store's file) keeps its mode.
fn shrink_when_freed(conn: &Connection, shown: &str) -> Result<(), StoreError> {
    let tables: i64 = conn
        .query_row("SELECT COUNT(*) FROM sqlite_master", [], |row| row.get(0))
        .map_err(|error| open_error(shown, "reading the schema", error))?;
    if tables == 0 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(|error| open_error(shown, "setting incremental auto-vacuum", error))?;
    }
    Ok(())
}

/// The schema version of a database opened read-only, unless it is not
/// this build's: an empty or foreign file (version 0) is `Backend`, an older
/// store `IncompatibleSchema`, each naming the path.
fn require_current_schema(version: i64, shown: &str) -> Result<(), StoreError> {
    if version == 0 {
        return Err(StoreError::Backend {
            message: format!(
                "database '{shown}' is not an a2-store database (it is empty or holds no a2-store schema); opened read-only, it was left as it is"
            ),
            source: None,
        });
    }
    if version < SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema {
            message: format!(
                "database '{shown}' has schema version {version}, older than version {SCHEMA_VERSION} this build reads; a read-only open never migrates: open it once read-write to migrate it"
            ),
        });
    }
    Ok(())
}

/// The schema version (`PRAGMA user_version`); `IncompatibleSchema` when a
/// newer build wrote the database.
fn refuse_newer_schema(conn: &Connection, shown: &str) -> Result<i64, StoreError> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|error| open_error(shown, "reading the schema version", error))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema {
            message: format!(
                "database '{shown}' has schema version {version}, newer than version {SCHEMA_VERSION} this build supports: open it with a newer build"
            ),
        });
    }
    Ok(version)
}

/// Refuses, before SQLite sees it, a path for a read-only open that is
/// missing or a directory (read-only opens never create a file).
fn check_readable_file(path: &Path, shown: &str) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(StoreError::Backend {
            message: format!("opening database '{shown}': the path is a directory, not a file"),
            source: None,
        }),
        Ok(_) => Ok(()),
        Err(error) => Err(StoreError::backend(
            format!(
                "opening database '{shown}' read-only: the file cannot be read (does it exist?)"
            ),
            error,
        )),
    }
}

/// Refuses, before SQLite sees it, a path whose directory is missing or a
/// database file that is not writable.
fn check_file(path: &Path, shown: &str) -> Result<(), StoreError> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if let Err(error) = std::fs::metadata(parent) {
        return Err(StoreError::backend(
            format!(
                "opening database '{shown}': its directory '{}' is not accessible (does it exist?)",
                parent.display()
            ),
            error,
        ));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(StoreError::Backend {
            message: format!("opening database '{shown}': the path is a directory, not a file"),
            source: None,
        }),
        Ok(meta) if meta.permissions().readonly() => Err(read_only_error(shown, None)),
        _ => Ok(()),
    }
}

/// The error for a database file the store cannot write.
fn read_only_error(shown: &str, source: Option<a2_store_api::BoxError>) -> StoreError {
    StoreError::Backend {
        message: format!(
            "opening database '{shown}': the file is read-only and a store must write to it (make it writable)"
        ),
        source,
    }
}
