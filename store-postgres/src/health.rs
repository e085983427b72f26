//! [`Health`]: what the server says about a store's schema: per table its
//! live and dead tuples, HOT updates and sizes (`pg_stat_user_tables`,
//! `pg_table_size`, `pg_indexes_size`), and the oldest open transaction
//! on the server (`pg_stat_activity`), which keeps vacuum from removing
//! any row version that became dead after it started.

use std::time::Duration;

use a2_store_api::{Result, StoreError};

use crate::error::db_error;
use crate::store::PostgresStore;

/// A snapshot of a store's schema and of the server's oldest transaction,
/// from [`PostgresStore::health`].
///
/// Tuple counts are the statistics system's (each backend reports its
/// counts when it goes idle, at most about once a second), so they trail
/// the last writes by that much; sizes are exact.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The schema the store works in.
    pub schema: String,
    /// Every table of the schema, by name.
    pub tables: Vec<TableHealth>,
    /// The transaction open longest on the server (any database), when one
    /// is visible to the store's role besides the health query's own.
    pub oldest_transaction: Option<OpenTransaction>,
}

impl Health {
    /// The table named `name`, if the schema has it.
    pub fn table(&self, name: &str) -> Option<&TableHealth> {
        self.tables.iter().find(|table| table.name == name)
    }

    /// Dead tuples summed over the schema's tables.
    pub fn dead_tuples(&self) -> u64 {
        self.tables.iter().map(|table| table.dead_tuples).sum()
    }

    /// Bytes on disk of the schema's tables and their indexes together.
    pub fn total_bytes(&self) -> u64 {
        self.tables.iter().map(TableHealth::total_bytes).sum()
    }
}

/// One table of the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableHealth {
    /// The table's name (without the schema).
    pub name: String,
    /// Estimated live rows (`n_live_tup`).
    pub live_tuples: u64,
    /// Estimated dead row versions not yet vacuumed (`n_dead_tup`).
    pub dead_tuples: u64,
    /// Rows updated since the statistics were reset (`n_tup_upd`).
    pub updates: u64,
    /// Of those, updates that wrote no index entry (`n_tup_hot_upd`).
    pub hot_updates: u64,
    /// Bytes of the table itself, TOAST and maps included (`pg_table_size`).
    pub table_bytes: u64,
    /// Bytes of all its indexes (`pg_indexes_size`).
    pub index_bytes: u64,
}

impl TableHealth {
    /// Table and index bytes together.
    pub fn total_bytes(&self) -> u64 {
        self.table_bytes + self.index_bytes
    }
}

/// The oldest open transaction on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenTransaction {
    /// The server process running it.
    pub pid: i32,
    /// How long it has been open.
    pub age: Duration,
    /// Its connection's state (`active`, `idle in transaction`, ...).
    pub state: Option<String>,
    /// Its connection's `application_name`.
    pub application_name: String,
    /// Whether it holds back vacuum's horizon: it has a transaction id or
    /// a snapshot (`backend_xid` or `backend_xmin` set). One that holds
    /// neither (a read-committed transaction between statements) does not.
    pub holds_horizon: bool,
}

/// The schema's tables with their statistics and sizes: `$1` the schema.
const TABLES: &str = "SELECT c.relname::text, COALESCE(s.n_live_tup, 0), \
    COALESCE(s.n_dead_tup, 0), COALESCE(s.n_tup_upd, 0), COALESCE(s.n_tup_hot_upd, 0), \
    pg_table_size(c.oid), pg_indexes_size(c.oid) \
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
    LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
    WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname";

/// The oldest transaction other than this connection's.
const OLDEST: &str = "SELECT pid, \
    GREATEST(0, (extract(epoch FROM clock_timestamp() - xact_start) * 1000)::bigint), \
    state, COALESCE(application_name, ''), \
    (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL) \
    FROM pg_stat_activity WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() \
    ORDER BY xact_start LIMIT 1";

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl PostgresStore {
    /// Reports the schema's tables (live and dead tuples, HOT updates, table
    /// and index bytes) and the server's oldest open transaction, in one
    /// round trip on a pooled connection; changes nothing.
    ///
    /// Other roles' transactions are visible only to a superuser or a role
    /// with `pg_read_all_stats`; without it `oldest_transaction` covers the
    /// store's own role. Errors: `Busy` when no pooled connection frees up
    /// in time, `Unavailable` when the server cannot be reached or does not
    /// answer within the call bound, `Backend` when it fails.
    pub async fn health(&self) -> Result<Health> {
        let doing = "reading the schema's health";
        let schema_name = self.inner.schema.clone();
        crate::deadline::on_connection(&self.inner, doing, |client| {
            Box::pin(async move {
                let schema: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&schema_name];
                let (tables, oldest) =
                    futures::try_join!(client.query(TABLES, &schema), client.query_opt(OLDEST, &[]),)
                        .map_err(|e| db_error(doing, e))?;
                let decode = |e: tokio_postgres::Error| db_error(doing, e);
                let mut found = Vec::with_capacity(tables.len());
                for row in &tables {
                    found.push(TableHealth {
                        name: row.try_get(0).map_err(decode)?,
                        live_tuples: count(row.try_get(1).map_err(decode)?),
                        dead_tuples: count(row.try_get(2).map_err(decode)?),
                        updates: count(row.try_get(3).map_err(decode)?),
                        hot_updates: count(row.try_get(4).map_err(decode)?),
                        table_bytes: count(row.try_get(5).map_err(decode)?),
                        index_bytes: count(row.try_get(6).map_err(decode)?),
                    });
                }
                if found.is_empty() {
                    return Err(StoreError::Backend {
                        message: format!(
                            "schema '{}' has no tables: it was dropped, or the store's role cannot see it",
                            schema_name
                        ),
                        source: None,
                    });
                }
                let oldest_transaction = match oldest {
                    Some(row) => Some(OpenTransaction {
                        pid: row.try_get(0).map_err(decode)?,
                        age: Duration::from_millis(count(row.try_get(1).map_err(decode)?)),
                        state: row.try_get(2).map_err(decode)?,
                        application_name: row.try_get(3).map_err(decode)?,
                        holds_horizon: row.try_get(4).map_err(decode)?,
                    }),
                    None => None,
                };
                Ok(Health {
                    schema: schema_name,
                    tables: found,
                    oldest_transaction,
                })
            })
        })
        .await
    }
}
