//! Warming a pooled connection opened ahead of need
//! ([`crate::PostgresOptions::min_idle`]).
//!
//! A new server backend knows nothing of the schema: its first statements
//! load the tables' and indexes' catalog entries, compile `rewrite_work`
//! and plan each statement, and every statement costs the client a
//! `Prepare` round trip on first use. Measured on the paced worker
//! workload, that made a new connection's first calls take 28 to 56 ms,
//! the tail of a run. A connection opened ahead of need therefore prepares
//! the hot statements (in one round trip: the prepares are pipelined) and,
//! in a transaction it rolls back, probes each table by an absent session
//! (the planner opens every index of the table) and runs `rewrite_work` on
//! it (compiled and planned, no row to lock or write). Nothing is changed
//! and no row is locked; a read-only store leaves out `rewrite_work` (it
//! writes). A connection opened on demand is not warmed: the call waiting
//! for it would wait for all of that at once.

use deadpool_postgres::ClientWrapper;

/// The tables a call reads or writes, each probed once.
const TABLES: [&str; 12] = [
    "sessions",
    "events",
    "cursors",
    "lane_queue",
    "completions",
    "snapshots",
    "checkpoints",
    "pins",
    "presence",
    "subscribers",
    "work",
    "pauses",
];

/// The statements a new connection prepares: those of claims, completions,
/// appends and the work index that most calls run.
fn hot_statements() -> Vec<&'static str> {
    let mut statements = vec![crate::db::READ_SESSION, crate::db::LOCK_SESSION];
    statements.extend(crate::ops::claims::hot_statements());
    statements.extend(crate::ops::work::HOT_STATEMENTS);
    statements.extend(crate::ops::complete::HOT_STATEMENTS);
    statements.extend(crate::ops::complete::batch::hot_statements());
    statements.extend(crate::ops::work::pairs::HOT_STATEMENTS);
    statements.extend(crate::batch::HOT_STATEMENTS);
    statements.extend(crate::cursor_table::HOT_STATEMENTS);
    statements.push(crate::notify::NOTIFY);
    statements
}

/// The catalog warm-up: the table probes and (`write`) the `rewrite_work`
/// call, between `BEGIN` and `ROLLBACK`, as one simple-protocol batch.
fn warm_up_batch(write: bool) -> String {
    let mut batch = String::from("BEGIN;");
    for table in TABLES {
        // Table names are constants of this module, never values.
        batch.push_str(&format!(" SELECT 1 FROM {table} WHERE session_id = '';"));
    }
    if write {
        batch.push_str(" SELECT * FROM rewrite_work('', NULL, 0, false);");
    }
    batch.push_str(" ROLLBACK;");
    batch
}

/// Warms `client` (see the module): prepares the hot statements into its
/// statement cache and loads the schema's catalog entries; `read_only`
/// leaves out what writes. Changes nothing on the server.
pub(crate) async fn warm(
    client: &ClientWrapper,
    read_only: bool,
) -> Result<(), tokio_postgres::Error> {
    let statements = hot_statements();
    let batch = warm_up_batch(!read_only);
    let prepares =
        futures::future::try_join_all(statements.iter().map(|sql| client.prepare_cached(sql)));
    futures::try_join!(prepares, client.batch_execute(&batch))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_up_ends_in_a_rollback_and_writes_only_when_asked() {
        let read = warm_up_batch(false);
        assert!(read.starts_with("BEGIN;") && read.ends_with(" ROLLBACK;"));
        assert!(!read.contains("rewrite_work"));
        assert!(warm_up_batch(true).contains("rewrite_work('', NULL, 0, false)"));
        assert_eq!(read.matches("SELECT 1 FROM").count(), TABLES.len());
    }

    #[test]
    fn hot_statements_are_distinct() {
        let statements = hot_statements();
        let distinct: std::collections::BTreeSet<&str> = statements.iter().copied().collect();
        assert_eq!(distinct.len(), statements.len());
    }
}
