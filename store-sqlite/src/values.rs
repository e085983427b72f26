//! How values cross into and out of SQLite: one rusqlite conversion per
//! type (`ToSql` on the way in, `FromSql` on the way out), each with the
//! encodings of [`a2_store_api::sql`], so no call site converts by hand.
//!
//! - [`SqlIndex`]: a log index, position, offset or bound (`BIGINT`);
//! - [`SqlCount`]: an attempt or failure count;
//! - [`Json`]: a structured value (payload, cause, type list, returned ids,
//!   reducer state, presence value) as JSON text;
//! - [`SqlKind`]: a cursor's kind as its code (0 event, 1 lane, 2 log);
//! - [`SqlLimit`]: a `LIMIT` (`None`: no limit);
//! - [`Bits`]: an opaque `u64` kept bit for bit (a presence `seen`).
//!
//! A value that does not fit on the way in is refused before any statement
//! runs ([`SqlIndex::new`]: invalid input). One that does not convert on
//! the way out is a corrupt row: its `FromSql` fails with the store-api
//! error, and [`sql_error`](crate::errors::sql_error) reports it as a
//! corrupt value in the database.

use a2_store_api::sql::{count_to_sql, decode_json, encode_json, from_sql_count, from_sql_int};
use a2_store_api::{sql, Cause, CursorKind, Payload, StoreError};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde_json::Value;

/// A `FromSql` failure carrying the store-api error that explains it.
fn corrupt(error: StoreError) -> FromSqlError {
    FromSqlError::Other(Box::new(error))
}

/// A `ToSql` failure carrying the store-api error that explains it.
fn unencodable(error: StoreError) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(error))
}

/// A log index (or position, offset, bound) as SQLite stores it: a
/// non-negative `BIGINT`. Read back, a negative value is a corrupt row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SqlIndex(i64);

impl SqlIndex {
    /// The largest index SQLite stores.
    pub(crate) const MAX: Self = Self(i64::MAX);

    /// `value` as a stored index; beyond `i64::MAX` it is invalid input
    /// naming `what` ([`sql::to_sql_int`]).
    pub(crate) fn new(what: &str, value: u64) -> Result<Self, StoreError> {
        sql::to_sql_int(what, value).map(Self)
    }

    /// `value` as a stored index, `None` when no stored row can have it.
    pub(crate) fn fitting(value: u64) -> Option<Self> {
        i64::try_from(value).ok().map(Self)
    }

    /// `value` as a query bound: beyond `i64::MAX` it bounds like `i64::MAX`.
    pub(crate) fn clamped(value: u64) -> Self {
        Self::fitting(value).unwrap_or(Self::MAX)
    }

    /// The index.
    pub(crate) fn get(self) -> u64 {
        // Never negative: built from a `u64` or checked on the way out.
        self.0.unsigned_abs()
    }
}

impl ToSql for SqlIndex {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.0))
    }
}

impl FromSql for SqlIndex {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let stored = i64::column_result(value)?;
        from_sql_int("index", stored).map_err(corrupt)?;
        Ok(Self(stored))
    }
}

/// An attempt or failure count as SQLite stores it ([`sql::count_to_sql`],
/// [`sql::from_sql_count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SqlCount(pub u32);

impl ToSql for SqlCount {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(count_to_sql(self.0)))
    }
}

impl FromSql for SqlCount {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let stored = i64::column_result(value)?;
        from_sql_count("count", stored).map(Self).map_err(corrupt)
    }
}

/// A structured value as JSON text ([`sql::encode_json`],
/// [`sql::decode_json`]): bound as `Json(&value)`, read back as `Json<T>`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Json<T>(pub T);

/// The conversions of [`Json`] for each type stored as JSON (written out
/// per type so the crate needs no direct `serde` dependency).
macro_rules! json_columns {
    ($($stored:ty),* $(,)?) => {$(
        impl ToSql for Json<&$stored> {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                encode_json(self.0)
                    .map(ToSqlOutput::from)
                    .map_err(unencodable)
            }
        }

        impl FromSql for Json<$stored> {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                decode_json("JSON text", value.as_str()?)
                    .map(Self)
                    .map_err(corrupt)
            }
        }
    )*};
}

json_columns!(Payload, Cause, Value, Vec<String>, Vec<Option<String>>);

/// A cursor's kind as its stored code: 0 event, 1 lane, 2 log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SqlKind(pub CursorKind);

impl ToSql for SqlKind {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        let code: i64 = match self.0 {
            CursorKind::Event => 0,
            CursorKind::Lane => 1,
            CursorKind::Log => 2,
        };
        Ok(ToSqlOutput::from(code))
    }
}

impl FromSql for SqlKind {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match i64::column_result(value)? {
            0 => Ok(Self(CursorKind::Event)),
            1 => Ok(Self(CursorKind::Lane)),
            2 => Ok(Self(CursorKind::Log)),
            other => Err(corrupt(StoreError::corrupt_value(&format!(
                "cursor kind {other}"
            )))),
        }
    }
}

/// A `LIMIT`: `None` is no limit (`-1`), a limit beyond `i64::MAX` is `i64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SqlLimit(pub Option<usize>);

impl ToSql for SqlLimit {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        let limit = self
            .0
            .map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX));
        Ok(ToSqlOutput::from(limit))
    }
}

/// A `u64` the store does not interpret (a presence `seen`), kept bit for
/// bit in an `INTEGER` whatever its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bits(pub u64);

impl ToSql for Bits {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(i64::from_ne_bytes(self.0.to_ne_bytes())))
    }
}

impl FromSql for Bits {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let stored = i64::column_result(value)?;
        Ok(Self(u64::from_ne_bytes(stored.to_ne_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::ErrorCode;
    use rusqlite::Connection;

    fn read<T: FromSql>(sql: &str) -> Result<T, StoreError> {
        let db = Connection::open_in_memory().map_err(|e| StoreError::backend("open", e))?;
        db.query_row(sql, [], |row| row.get(0))
            .map_err(|error| crate::errors::sql_error("reading a test value", error))
    }

    #[test]
    fn indexes_refuse_what_does_not_fit_and_read_back_checked() {
        let error = SqlIndex::new("snapshot index", u64::MAX).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        assert_eq!(SqlIndex::clamped(u64::MAX), SqlIndex::MAX);
        assert_eq!(SqlIndex::fitting(u64::MAX), None);
        assert_eq!(read::<SqlIndex>("SELECT 7").unwrap().get(), 7);
        let corrupt = read::<SqlIndex>("SELECT -1").unwrap_err();
        assert_eq!(corrupt.code(), ErrorCode::Backend);
        assert!(corrupt.to_string().contains("in the database"), "{corrupt}");
        assert!(read::<SqlCount>("SELECT 4294967296").is_err());
        assert!(read::<SqlKind>("SELECT 3").is_err());
        assert_eq!(read::<Bits>("SELECT -1").unwrap(), Bits(u64::MAX));
    }

    #[test]
    fn json_round_trips_and_bad_text_is_corrupt() {
        let ids: Json<Vec<Option<String>>> = read("SELECT '[\"a\",null]'").unwrap();
        assert_eq!(ids.0, vec![Some("a".to_owned()), None]);
        let corrupt = read::<Json<Vec<String>>>("SELECT '{'").unwrap_err();
        assert_eq!(corrupt.code(), ErrorCode::Backend);
        assert!(corrupt.to_string().starts_with("backend failure: corrupt"));
    }
}
