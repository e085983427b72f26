//! Mapping of rusqlite failures onto the typed [`StoreError`].

use a2_store_api::StoreError;
use rusqlite::ErrorCode as SqliteCode;

/// Converts a rusqlite error met while `doing` something into a typed error:
/// `SQLITE_BUSY`/`SQLITE_LOCKED` → `Busy`, `SQLITE_FULL` → `StorageFull`, a
/// stored value that does not convert back → `StoreError::corrupt`, a value
/// that does not convert on the way in → the error its
/// [`ToSql`](rusqlite::ToSql) gave, anything else → `Backend`, always
/// keeping the source. A failing disk (`SQLITE_IOERR`, and
/// `SQLITE_CORRUPT`, which is how SQLite reports a read that failed with
/// `EIO`) is `Backend` with a message that says so and what to do.
pub(crate) fn sql_error(doing: &str, error: rusqlite::Error) -> StoreError {
    match error {
        rusqlite::Error::FromSqlConversionFailure(column, ..)
        | rusqlite::Error::IntegralValueOutOfRange(column, _) => {
            return StoreError::corrupt(&format!("value in column {column} ({doing})"), error);
        }
        rusqlite::Error::ToSqlConversionFailure(source) => {
            return match source.downcast::<StoreError>() {
                Ok(error) => *error,
                Err(source) => StoreError::backend(doing.to_owned(), source),
            };
        }
        _ => {}
    }
    match error.sqlite_error_code() {
        Some(SqliteCode::DatabaseBusy | SqliteCode::DatabaseLocked) => StoreError::Busy {
            message: format!(
                "{doing}: the database stayed locked by another writer past the busy timeout"
            ),
            source: Some(Box::new(error)),
        },
        Some(SqliteCode::DiskFull) => StoreError::StorageFull {
            message: format!(
                "{doing}: the database is full (it reached its page cap, SqliteOptions::max_page_count, or the disk is out of space); nothing was written and reads still work: free disk space or reopen the store with a larger max_page_count, then retry"
            ),
            source: Some(Box::new(error)),
        },
        Some(SqliteCode::SystemIoFailure) => StoreError::Backend {
            message: format!(
                "{doing}: the disk or file system failed ({}); nothing was changed: check the disk and the kernel log (dmesg) and retry once it works (an open store needs no reopen)",
                failure_text(&error)
            ),
            source: Some(Box::new(error)),
        },
        Some(SqliteCode::DatabaseCorrupt) => StoreError::Backend {
            message: format!(
                "{doing}: SQLite reports the database file malformed, as it also reports a read the disk failed (EIO); nothing was changed: check the disk and the kernel log (dmesg) and retry once it works (an open store needs no reopen); if it persists, stop every store on the file and run PRAGMA integrity_check"
            ),
            source: Some(Box::new(error)),
        },
        _ => StoreError::backend(doing.to_owned(), error),
    }
}

/// What SQLite says failed, by its extended code (for `SQLITE_IOERR`: a
/// read, a write, an fsync, ...), which the error's own text leaves out.
pub(crate) fn failure_text(error: &rusqlite::Error) -> String {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => format!(
            "{}, SQLite extended code {}",
            rusqlite::ffi::code_to_str(failure.extended_code),
            failure.extended_code
        ),
        other => other.to_string(),
    }
}

/// Whether a `COMMIT` that failed with `error` may have left its whole
/// transaction in the WAL file: an I/O error other than a failed write
/// (SQLite writes the commit frame last, so a failed write means it was
/// not written; a failed fsync, or a failure after it, comes after it).
pub(crate) fn commit_unconfirmed(error: &rusqlite::Error) -> bool {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => {
            failure.code == SqliteCode::SystemIoFailure
                && failure.extended_code != rusqlite::ffi::SQLITE_IOERR_WRITE
        }
        _ => false,
    }
}

/// Shorthand: maps a rusqlite result with [`sql_error`].
pub(crate) trait SqlContext<T> {
    /// Maps the error, naming what was being done.
    fn ctx(self, doing: &str) -> Result<T, StoreError>;
}

impl<T> SqlContext<T> for Result<T, rusqlite::Error> {
    fn ctx(self, doing: &str) -> Result<T, StoreError> {
        self.map_err(|error| sql_error(doing, error))
    }
}

/// Whether a call failed only because the database was locked (worth retrying).
pub(crate) fn is_busy(error: &StoreError) -> bool {
    matches!(error, StoreError::Busy { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::ErrorCode;

    fn sqlite_failure(code: std::os::raw::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn codes_map_to_typed_errors() {
        let busy = sql_error("claiming", sqlite_failure(rusqlite::ffi::SQLITE_BUSY));
        assert_eq!(busy.code(), ErrorCode::Busy);
        assert!(is_busy(&busy));
        let full = sql_error("appending", sqlite_failure(rusqlite::ffi::SQLITE_FULL));
        assert_eq!(full.code(), ErrorCode::StorageFull);
        let corrupt = sql_error("reading", sqlite_failure(rusqlite::ffi::SQLITE_CORRUPT));
        assert_eq!(corrupt.code(), ErrorCode::Backend);
        assert!(std::error::Error::source(&corrupt).is_some());
        assert!(corrupt.to_string().contains("reading"));
        assert!(corrupt.to_string().contains("EIO"), "{corrupt}");
        let fsync = sql_error(
            "committing",
            sqlite_failure(rusqlite::ffi::SQLITE_IOERR_FSYNC),
        );
        assert_eq!(fsync.code(), ErrorCode::Backend);
        assert!(fsync.to_string().contains("(fsync)"), "{fsync}");
        assert!(fsync.to_string().contains("check the disk"), "{fsync}");
    }
}
