//! How PostgreSQL and pool failures become typed [`StoreError`]s, and which
//! of them a transaction retries.

use a2_store_api::StoreError;
use tokio_postgres::error::SqlState;

/// A failure inside one transaction attempt: a contract outcome decided by
/// the store, or a database error that may be worth retrying.
#[derive(Debug)]
pub(crate) enum TxError {
    /// A typed store error; never retried.
    Store(StoreError),
    /// A PostgreSQL error; retried when it is a serialization failure or deadlock.
    Db(tokio_postgres::Error),
}

impl From<StoreError> for TxError {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

impl From<tokio_postgres::Error> for TxError {
    fn from(error: tokio_postgres::Error) -> Self {
        Self::Db(error)
    }
}

/// The SQLSTATE the guard of a completion decided on a remembered row
/// (`ops::claims::claimed`) raises when that row is out of date (set by
/// migration 10's `expect_unchanged`).
pub(crate) const MISSED: &str = "A2S01";

/// The result of one step inside a transaction.
pub(crate) type TxResult<T> = std::result::Result<T, TxError>;

impl TxError {
    /// Whether running the whole transaction again may succeed: serialization
    /// failures (40001) and deadlocks (40P01).
    pub(crate) fn retryable(&self) -> bool {
        match self {
            Self::Store(_) => false,
            Self::Db(error) => matches!(
                error.code(),
                Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED
            ),
        }
    }

    /// Whether a call decided on a row this store remembered found the row
    /// changed (`ops::claims::claimed`): nothing was written, and running
    /// the call again reads the row.
    pub(crate) fn missed_guess(&self) -> bool {
        match self {
            Self::Store(_) => false,
            Self::Db(error) => error.code().is_some_and(|code| code.code() == MISSED),
        }
    }

    /// The typed error a caller sees for this failure while doing `what`.
    pub(crate) fn into_store(self, what: &str) -> StoreError {
        match self {
            Self::Store(error) => error,
            Self::Db(error) => db_error(what, error),
        }
    }
}

/// Maps a PostgreSQL error to the [`StoreError`] with the matching code,
/// keeping the driver error as the source.
pub(crate) fn db_error(what: &str, error: tokio_postgres::Error) -> StoreError {
    let Some(code) = error.code().cloned() else {
        if let Some(failure) = crate::tls::tls_failure(&error) {
            return StoreError::backend(failure.message(what), error);
        }
        if connection_lost(&error) {
            return StoreError::unavailable(
                format!("{what}: the PostgreSQL connection could not be opened or was lost (the server is down, failing over or unreachable) — retry once it is back; a call cut off at its commit may have been applied, and repeating it is safe"),
                error,
            );
        }
        return StoreError::backend(format!("{what}: the PostgreSQL connection failed"), error);
    };
    let mut detail = error
        .as_db_error()
        .map(|db| db.message().to_owned())
        .unwrap_or_default();
    if code.code().starts_with("08")
        || code == SqlState::ADMIN_SHUTDOWN
        || code == SqlState::CRASH_SHUTDOWN
        || code == SqlState::CANNOT_CONNECT_NOW
    {
        // Connection exceptions, and a server shutting down or starting
        // (a failover, a restart): the call may succeed on the next server.
        return StoreError::unavailable(
            format!(
                "{what}: the PostgreSQL server is not available: {detail} (SQLSTATE {}) — retry once it is back",
                code.code()
            ),
            error,
        );
    }
    if code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION && detail.contains("no encryption") {
        // pg_hba.conf accepts this client only over TLS (`hostssl`).
        detail.push_str(
            " — the server accepts this connection only over TLS: use sslmode=require or stronger",
        );
    }
    if code == SqlState::READ_ONLY_SQL_TRANSACTION {
        // Only a store opened read-only runs read-only transactions.
        return StoreError::read_only("this PostgreSQL store");
    }
    if code == SqlState::T_R_SERIALIZATION_FAILURE
        || code == SqlState::T_R_DEADLOCK_DETECTED
        || code == SqlState::QUERY_CANCELED
        || code == SqlState::LOCK_NOT_AVAILABLE
        || code == SqlState::TOO_MANY_CONNECTIONS
    {
        StoreError::Busy {
            message: format!("{what}: {detail} (SQLSTATE {})", code.code()),
            source: Some(Box::new(error)),
        }
    } else if code == SqlState::DISK_FULL
        || code == SqlState::OUT_OF_MEMORY
        || code == SqlState::INSUFFICIENT_RESOURCES
    {
        StoreError::StorageFull {
            message: format!("{what}: {detail} (SQLSTATE {})", code.code()),
            source: Some(Box::new(error)),
        }
    } else if code == SqlState::UNTRANSLATABLE_CHARACTER
        || code == SqlState::CHARACTER_NOT_IN_REPERTOIRE
        || code == SqlState::PROGRAM_LIMIT_EXCEEDED
        || code == SqlState::NUMERIC_VALUE_OUT_OF_RANGE
        || code == SqlState::STRING_DATA_RIGHT_TRUNCATION
    {
        // Values PostgreSQL cannot hold: NUL characters in text or JSON
        // strings, keys too long for a btree index, numbers out of range.
        StoreError::invalid_input(format!(
            "{what}: PostgreSQL cannot store this value: {detail} (SQLSTATE {})",
            code.code()
        ))
    } else {
        StoreError::backend(
            format!("{what}: {detail} (SQLSTATE {})", code.code()),
            error,
        )
    }
}

/// Whether a driver error without a SQLSTATE is the connection failing
/// (closed, reset, refused, timed out) rather than a configuration or
/// protocol problem: the error says so, or its source is an I/O error.
fn connection_lost(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Maps a failure to get a pooled connection.
pub(crate) fn pool_error(what: &str, error: deadpool_postgres::PoolError) -> StoreError {
    match error {
        deadpool_postgres::PoolError::Backend(error) => db_error(what, error),
        deadpool_postgres::PoolError::Timeout(kind) => {
            let (busy, message) = match kind {
                deadpool_postgres::TimeoutType::Wait => (true, format!(
                    "{what}: the connection pool is exhausted: no pooled PostgreSQL connection became free within the acquire timeout — raise pool_timeout_ms or pool_size in the URL"
                )),
                deadpool_postgres::TimeoutType::Create => (false, format!(
                    "{what}: opening a PostgreSQL connection for the pool took longer than the statement timeout — check that the server answers"
                )),
                deadpool_postgres::TimeoutType::Recycle => (false, format!(
                    "{what}: checking a pooled PostgreSQL connection took longer than the statement timeout — check that the server answers"
                )),
            };
            let source: Option<a2_store_api::BoxError> = Some(Box::new(error));
            if busy {
                StoreError::Busy { message, source }
            } else {
                // The server does not answer: down, failing over, unreachable.
                StoreError::Unavailable { message, source }
            }
        }
        other => StoreError::backend(
            format!("{what}: could not get a PostgreSQL connection"),
            other,
        ),
    }
}
