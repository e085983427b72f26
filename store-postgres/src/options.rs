//! Connection options of [`PostgresStore`](crate::PostgresStore) and the
//! schema-name rule.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{Clock, IdGenerator, RandomIds, Result, StoreError, SystemClock};

/// The longest schema name PostgreSQL keeps without truncating (`NAMEDATALEN - 1`).
pub const MAX_SCHEMA_NAME_LEN: usize = 63;

/// [`PostgresOptions::network_timeout`]'s default.
pub const DEFAULT_NETWORK_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// How long the store waits on the network before it takes a connection
    /// for dead (10 s by default): the TCP user timeout and keepalive of
    /// every connection (unless the URL sets `tcp_user_timeout` or
    /// `keepalives_idle`), the time to open a connection to each host
    /// (unless the URL sets `connect_timeout`), how long the `LISTEN`
    /// connection may leave a liveness probe unanswered, and the grace on
    /// top of [`statement_timeout`](Self::statement_timeout) in every call's
    /// bound: a call answers within the pool wait
    /// ([`pool_timeout`](Self::pool_timeout), else the statement timeout) +
    /// the statement timeout + this, else fails with
    /// `StoreError::Unavailable` and closes its connection.
    pub network_timeout: Duration,
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
    /// When the store reclaims its state tables by rotation (see
    /// [`Rotation`]); on by default. A read-only store never rotates.
    pub rotation: Rotation,
}

/// When and how a [`PostgresStore`](crate::PostgresStore) reclaims its state
/// tables (cursors, lane queues, the work index, sessions, presence,
/// snapshots, pins, subscriptions, pauses) without vacuum.
///
/// Every update or delete leaves a dead row version (and, when an indexed
/// column changed, index entries) that only vacuum removes, and nothing
/// removes while a transaction older than it is open anywhere on the
/// server. A rotation takes a table's exclusive lock (waiting at most
/// [`lock_timeout`](Self::lock_timeout)), keeps its live rows, truncates it
/// and inserts them back: the table and its indexes shrink to what the
/// live rows need, whatever holds vacuum back. Calls on that table wait for
/// it (a rotation of a few thousand rows takes a few milliseconds).
///
/// The store checks every [`interval`](Self::interval) and reclaims each
/// table (by `VACUUM` when it can, see [`vacuum_first`](Self::vacuum_first))
/// that has grown by at least [`min_growth`](Self::min_growth) bytes
/// and to at least twice its size after its last rotation by this store
/// (so the rows copied are paid for by at least as many bytes reclaimed);
/// before a first rotation, growth from nothing counts, so a table already
/// past [`min_growth`](Self::min_growth) when the store opens is rotated at
/// the first check. Tables with more than
/// [`max_live`](Self::max_live) rows are left to vacuum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    /// How often the store checks its tables' sizes (one query); `None`:
    /// never, only [`PostgresStore::rotate`](crate::PostgresStore::rotate).
    /// 1 s by default.
    pub interval: Option<Duration>,
    /// The growth in bytes (table and indexes) since the last rotation below
    /// which a table is not rotated. 256 KiB by default.
    pub min_growth: u64,
    /// The most rows a rotation copies; a table holding more is left to
    /// vacuum, so no call waits for a long copy. 20,000 by default.
    pub max_live: u64,
    /// How long a rotation waits for a table's lock before it gives up
    /// until the next check; calls arriving meanwhile wait behind it.
    /// 50 ms by default. The periodic check first waits 1 ms, and twice as
    /// long after each check that found the table busy, up to this.
    pub lock_timeout: Duration,
    /// Whether the periodic check reclaims with `VACUUM` what vacuum can
    /// reclaim. It then acts only on a table with at least half its rows
    /// dead (the statistics' estimate), and runs `VACUUM (TRUNCATE false)`
    /// on it, which blocks no call and frees the dead rows' space for
    /// reuse; it rotates the table only while a transaction older than
    /// [`interval`](Self::interval) holds back vacuum's horizon, so
    /// `VACUUM` would reclaim nothing (a role that cannot see other roles'
    /// transactions takes any other role's connection for one). A rotation
    /// holds the table's lock while it copies the rows, and calls on the
    /// table wait for it: this keeps those waits to when nothing else
    /// works. `false`: every table that grew by
    /// [`min_growth`](Self::min_growth) and doubled is rotated. `true` by
    /// default.
    pub vacuum_first: bool,
}

impl Default for Rotation {
    /// Checked every second; a table is rotated once it grew by 256 KiB and
    /// doubled with at least half its rows dead: vacuumed, or rotated (if
    /// it holds at most 20,000 rows) while vacuum is held back; locks
    /// waited for at most 50 ms.
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_secs(1)),
            min_growth: 256 << 10,
            max_live: 20_000,
            lock_timeout: Duration::from_millis(50),
            vacuum_first: true,
        }
    }
}

impl Default for PostgresOptions {
    /// [`SystemClock`], [`RandomIds`], 16 connections opened as needed,
    /// 30 s, schema `a2`, connections kept while they work, state tables
    /// rotated as [`Rotation::default`] says.
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            pool_size: 16,
            min_idle: 0,
            statement_timeout: Duration::from_secs(30),
            pool_timeout: None,
            network_timeout: DEFAULT_NETWORK_TIMEOUT,
            idle_timeout: None,
            max_lifetime: None,
            application_name: None,
            schema: "a2".to_owned(),
            read_only: false,
            rotation: Rotation::default(),
        }
    }
}

impl PostgresOptions {
    /// The longest a store call waits before it answers: the pool wait
    /// ([`pool_timeout`](Self::pool_timeout), else the statement timeout),
    /// plus the [`statement_timeout`](Self::statement_timeout), plus the
    /// [`network_timeout`](Self::network_timeout). Past it the call fails
    /// with `StoreError::Unavailable` and its connection is closed. Waiting
    /// calls (`claim_work` with a wait, a stream between events) wait as
    /// long as asked on top of it, never longer.
    pub fn call_bound(&self) -> Duration {
        self.pool_timeout
            .unwrap_or(self.statement_timeout)
            .saturating_add(self.statement_timeout)
            .saturating_add(self.network_timeout)
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
        assert_eq!(options.network_timeout, Duration::from_secs(10));
        assert_eq!(options.call_bound(), Duration::from_secs(70));
        assert_eq!(options.idle_timeout, None);
        assert_eq!(options.max_lifetime, None);
        assert_eq!(options.application_name, None);
        assert_eq!(options.rotation.interval, Some(Duration::from_secs(1)));
        assert_eq!(options.rotation.min_growth, 256 << 10);
        assert_eq!(options.rotation.max_live, 20_000);
        assert_eq!(options.rotation.lock_timeout, Duration::from_millis(50));
    }
}
