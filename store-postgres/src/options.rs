//! Connection options of [`PostgresStore`](crate::PostgresStore) and the
//! schema-name rule.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{Clock, IdGenerator, RandomIds, Result, StoreError, SystemClock};

/// The longest schema name PostgreSQL keeps without truncating (`NAMEDATALEN - 1`).
pub const MAX_SCHEMA_NAME_LEN: usize = 63;

/// How a [`PostgresStore`](crate::PostgresStore) connects and what it runs on.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The only source of time the store reads (leases, retry delays, presence TTLs).
    pub clock: Arc<dyn Clock>,
    /// The source of ids for events appended without one (and clear markers).
    pub ids: Arc<dyn IdGenerator>,
    /// Most connections the pool opens at once (at least 1). A subscribing
    /// store opens one more, dedicated to `LISTEN`.
    pub pool_size: usize,
    /// Connections opened at connect and kept open, warmed (at most
    /// [`pool_size`](Self::pool_size); 0 by default: each opened when a call
    /// needs one). Warmed: before its first call it prepares the store's
    /// most used statements and loads the schema's catalog entries, work a
    /// new connection otherwise does in its first calls (28 to 56 ms of
    /// them, measured under load). A kept connection closed
    /// (past [`idle_timeout`](Self::idle_timeout) or
    /// [`max_lifetime`](Self::max_lifetime), or broken) is replaced by a
    /// fresh one, checked every second, once no call holds a connection.
    pub min_idle: usize,
    /// Server-side `statement_timeout` of every connection; a statement that
    /// runs (or waits for a lock) longer fails with `StoreError::Busy`. Also
    /// bounds opening a pooled connection, the wait for a free one unless
    /// [`pool_timeout`](Self::pool_timeout) is set and, as
    /// `idle_in_transaction_session_timeout`, a transaction left idle.
    pub statement_timeout: Duration,
    /// How long a call waits for a free pooled connection before it fails
    /// with `StoreError::Busy` saying the pool is exhausted; `None` waits as
    /// long as [`statement_timeout`](Self::statement_timeout).
    pub pool_timeout: Option<Duration>,
    /// Pooled connections unused for longer are closed; `None` keeps them.
    pub idle_timeout: Option<Duration>,
    /// Pooled connections older than this are closed and replaced; `None`
    /// keeps them as long as they work.
    pub max_lifetime: Option<Duration>,
    /// The `application_name` the server shows for the store's connections
    /// (in `pg_stat_activity`); `None` keeps the URL's, else
    /// `a2-store-postgres`.
    pub application_name: Option<String>,
    /// The PostgreSQL schema holding the tables; every connection sets its
    /// `search_path` to it, so deployments sharing one server stay apart.
    /// Must match `[a-z_][a-z0-9_]*` and be at most 63 bytes.
    pub schema: String,
    /// Connects without creating or migrating anything: the schema must
    /// exist at this build's version (a missing schema is `Backend`, another
    /// version `IncompatibleSchema`), and every connection runs with
    /// `default_transaction_read_only`, so the server refuses each write
    /// with a typed error. `false` by default.
    pub read_only: bool,
}

impl Default for PostgresOptions {
    /// [`SystemClock`], [`RandomIds`], 16 connections opened as needed,
    /// 30 s, schema `a2`, connections kept while they work.
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            pool_size: 16,
            min_idle: 0,
            statement_timeout: Duration::from_secs(30),
            pool_timeout: None,
            idle_timeout: None,
            max_lifetime: None,
            application_name: None,
            schema: "a2".to_owned(),
            read_only: false,
        }
    }
}

/// Accepts a schema name only when it is a plain lower-case identifier
/// (`[a-z_][a-z0-9_]*`, at most 63 bytes, not starting with `pg_`).
/// Identifiers cannot be bound as parameters, so this rule is what makes it
/// safe to name the schema in DDL, `search_path` and the `LISTEN` channel.
pub fn validate_schema_name(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > MAX_SCHEMA_NAME_LEN || schema.starts_with("pg_") {
        return Err(StoreError::invalid_input(format!(
            "schema name '{schema}' is not a plain identifier: use 1 to {MAX_SCHEMA_NAME_LEN} characters of [a-z0-9_], not starting with a digit or 'pg_'"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["a2", "_x", "test_run_42", &"a".repeat(63)] {
            assert!(validate_schema_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "A2",
            "2a",
            "a-b",
            "a b",
            "a\"; drop table x; --",
            "pg_temp",
            "é",
            &"a".repeat(64),
        ] {
            let err = validate_schema_name(bad).unwrap_err();
            assert_eq!(err.code(), a2_store_api::ErrorCode::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn defaults_match_the_documented_values() {
        let options = PostgresOptions::default();
        assert_eq!(options.pool_size, 16);
        assert_eq!(options.statement_timeout, Duration::from_secs(30));
        assert_eq!(options.schema, "a2");
        assert_eq!(options.pool_timeout, None);
        assert_eq!(options.idle_timeout, None);
        assert_eq!(options.max_lifetime, None);
        assert_eq!(options.application_name, None);
    }
}
