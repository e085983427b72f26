//! The encodings SQL backends store values in: JSON text for structured
//! columns, `BIGINT` for indexes and counts. A value that does not fit on
//! the way in is invalid input; one that does not decode on the way out is
//! a corrupt row (`Backend`).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Result, StoreError};

/// JSON text of a value a SQL backend stores (causes, targets, type lists, payloads).
pub fn encode_json<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|source| StoreError::backend("encoding a value as JSON", source))
}

/// Decodes JSON text a SQL backend stored; a failure means a corrupt row.
pub fn decode_json<T: DeserializeOwned>(what: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|source| StoreError::corrupt(what, source))
}

/// A log index or count as a SQL `BIGINT`; values beyond `i64::MAX` are invalid input.
pub fn to_sql_int(what: &str, value: u64) -> Result<i64> {
    i64::try_from(value)
        .map_err(|_| StoreError::invalid_input(format!("{what} {value} is out of range")))
}

/// A SQL `BIGINT` read back as an index or count; a negative value means a corrupt row.
pub fn from_sql_int(what: &str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|source| StoreError::corrupt(&format!("{what} {value}"), source))
}

/// A SQL integer read back as an attempt or failure count (`u32`).
pub fn from_sql_count(what: &str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|source| StoreError::corrupt(&format!("{what} {value}"), source))
}

/// An attempt or failure count as a SQL integer (always fits).
pub fn count_to_sql(value: u32) -> i64 {
    i64::from(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn integers_round_trip_and_refuse_what_does_not_fit() {
        assert_eq!(to_sql_int("index", 5).unwrap(), 5);
        assert_eq!(
            to_sql_int("index", u64::MAX).unwrap_err().code(),
            ErrorCode::InvalidInput
        );
        assert_eq!(from_sql_int("index", 7).unwrap(), 7);
        let corrupt = from_sql_int("index", -1).unwrap_err();
        assert_eq!(corrupt.code(), ErrorCode::Backend);
        assert_eq!(
            corrupt.to_string(),
            "backend failure: corrupt index -1 in the database"
        );
        assert_eq!(from_sql_count("attempt", 3).unwrap(), 3);
        assert!(from_sql_count("attempt", i64::MAX).is_err());
        assert_eq!(count_to_sql(u32::MAX), 4_294_967_295);
    }

    #[test]
    fn json_round_trips_and_corrupt_text_is_a_backend_error() {
        let text = encode_json(&vec![Some("a"), None]).unwrap();
        let back: Vec<Option<String>> = decode_json("ids", &text).unwrap();
        assert_eq!(back, vec![Some("a".to_owned()), None]);
        let error = decode_json::<Vec<String>>("ids", "{").unwrap_err();
        assert_eq!(error.code(), ErrorCode::Backend);
        assert!(error.to_string().contains("corrupt ids in the database"));
    }
}
