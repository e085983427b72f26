//! Rotation: reclaiming the state tables without vacuum (see
//! [`Rotation`]). The migrations install `rotate_table` (version 14), which
//! locks one table, keeps its live rows, truncates it and inserts them
//! back, all in one transaction; this module decides which tables to
//! rotate, runs it for each in a transaction of its own (so a rotation
//! holds one table's lock, never waits for a second while holding it, and
//! cannot deadlock with a call), and runs the store's periodic check.

use std::collections::HashMap;
use std::sync::Arc;

use a2_store_api::Result;
use deadpool_postgres::Client;
use tokio_postgres::error::SqlState;

use crate::error::db_error;
use crate::inner::Inner;
use crate::options::Rotation;

/// The state tables rotations reclaim: those whose rows are updated or
/// deleted in place. Rotations also reclaim the [`LOG_TABLES`].
pub const STATE_TABLES: [&str; 10] = [
    "sessions",
    "cursors",
    "lane_queue",
    "work",
    "presence",
    "snapshots",
    "checkpoints",
    "pins",
    "subscribers",
    "pauses",
];

/// The append-only tables, which rotations reclaim too (after the
/// [`STATE_TABLES`]): the log (`events`) and the replay records
/// (`completions`) only grow until a session is cleared and reclaimed,
/// deleted or pruned; those deletes leave dead rows that a transaction
/// holding vacuum back keeps. A store whose sessions are pruned as fast as
/// they come holds few live rows in them, and a rotation then takes them
/// back to those (a log of more than [`Rotation::max_live`] rows is left
/// to vacuum).
pub const LOG_TABLES: [&str; 2] = ["events", "completions"];

/// Every table rotations reclaim, in the order a pass rotates them.
fn rotated_tables() -> impl Iterator<Item = &'static str> {
    STATE_TABLES.into_iter().chain(LOG_TABLES)
}

/// Bytes on disk of each named table with its indexes and TOAST: `$1` the
/// names (the connection's `search_path` is the store's schema).
const SIZES: &str = "SELECT t, COALESCE(pg_total_relation_size(to_regclass(t)), 0) \
    FROM unnest($1::text[]) t";

/// Rotates `$1` if it holds at most `$2` rows, waiting at most `$3` ms for
/// its lock; the rows kept, or -1 when it holds more.
const ROTATE: &str = "SELECT rotate_table($1, $2, $3)";

/// What one rotation pass did, from
/// [`PostgresStore::rotate`](crate::PostgresStore::rotate).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotationReport {
    /// The tables rotated, in the order they were.
    pub rotated: Vec<RotatedTable>,
    /// Tables whose lock was not granted within
    /// [`Rotation::lock_timeout`]: a transaction held it (a call, or a
    /// client reading the table); they are unchanged.
    pub busy: Vec<String>,
    /// Tables holding more than [`Rotation::max_live`] rows, left to
    /// vacuum; unchanged.
    pub too_large: Vec<String>,
}

/// One table a rotation reclaimed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotatedTable {
    /// The table's name (without the schema).
    pub table: String,
    /// The live rows it kept.
    pub rows: u64,
    /// Bytes of the table with its indexes before the rotation.
    pub bytes_before: u64,
    /// Bytes after it.
    pub bytes_after: u64,
}

/// Rotates every state table now (see `PostgresStore::rotate`), on one
/// pooled connection of `inner`.
pub(crate) async fn rotate_now(inner: &Inner) -> Result<RotationReport> {
    let rotation = inner.rotation.clone();
    crate::deadline::on_connection(inner, "rotating the state tables", |client| {
        Box::pin(async move {
            let sizes = sizes(client).await?;
            rotate_tables(client, &rotation, &sizes).await
        })
    })
    .await
}

/// The current bytes of every table rotations reclaim, in
/// [`STATE_TABLES`] then [`LOG_TABLES`] order.
async fn sizes(client: &Client) -> Result<Vec<(String, u64)>> {
    let doing = "measuring the state tables";
    let names: Vec<&str> = rotated_tables().collect();
    let rows = client
        .query(SIZES, &[&names])
        .await
        .map_err(|e| db_error(doing, e))?;
    let mut sizes = Vec::with_capacity(rows.len());
    for row in rows {
        let name: String = row.try_get(0).map_err(|e| db_error(doing, e))?;
        let bytes: i64 = row.try_get(1).map_err(|e| db_error(doing, e))?;
        sizes.push((name, u64::try_from(bytes).unwrap_or(0)));
    }
    Ok(sizes)
}

/// Rotates each of `tables` (name, bytes before) in turn, each in its own
/// transaction, and reports what became of each.
async fn rotate_tables(
    client: &Client,
    rotation: &Rotation,
    tables: &[(String, u64)],
) -> Result<RotationReport> {
    let mut report = RotationReport::default();
    if tables.is_empty() {
        return Ok(report);
    }
    let doing = "rotating the state tables";
    let max_live = i64::try_from(rotation.max_live).unwrap_or(i64::MAX);
    let lock_ms = i64::try_from(rotation.lock_timeout.as_millis().max(1)).unwrap_or(i64::MAX);
    let mut kept = Vec::new();
    for (table, before) in tables {
        match client
            .query_one(ROTATE, &[table, &max_live, &lock_ms])
            .await
        {
            Ok(row) => {
                let rows: i64 = row.try_get(0).map_err(|e| db_error(doing, e))?;
                match u64::try_from(rows) {
                    Ok(rows) => kept.push((table.clone(), rows, *before)),
                    Err(_) => report.too_large.push(table.clone()),
                }
            }
            Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                report.busy.push(table.clone());
            }
            Err(error) => return Err(db_error(doing, error)),
        }
    }
    if kept.is_empty() {
        return Ok(report);
    }
    let after = sizes(client).await?;
    for (table, rows, bytes_before) in kept {
        let bytes_after = after
            .iter()
            .find(|(name, _)| *name == table)
            .map_or(0, |(_, bytes)| *bytes);
        report.rotated.push(RotatedTable {
            table,
            rows,
            bytes_before,
            bytes_after,
        });
    }
    Ok(report)
}

/// What the periodic check knows of each table: its smallest size seen
/// since its last rotation by this store (0 before the first).
#[derive(Debug, Default, Clone)]
struct Floors(HashMap<String, u64>);

impl Floors {
    /// The tables due for rotation among `sizes`: grown by at least
    /// `min_growth` bytes and to at least twice their floor. Lowers each
    /// floor to the size seen (another store may have rotated the table).
    fn due(&mut self, sizes: &[(String, u64)], min_growth: u64) -> Vec<(String, u64)> {
        let mut due = Vec::new();
        for (table, bytes) in sizes {
            let floor = self.0.entry(table.clone()).or_insert(0);
            if *bytes >= floor.saturating_add(min_growth) && *bytes >= floor.saturating_mul(2) {
                due.push((table.clone(), *bytes));
            } else {
                *floor = (*floor).min(*bytes);
            }
        }
        due
    }

    /// After a pass: a rotated table's floor is its size after; a table
    /// too large to rotate waits until it doubles again; a busy one is
    /// tried at the next check.
    fn passed(&mut self, report: &RotationReport, sizes: &[(String, u64)]) {
        for rotated in &report.rotated {
            self.0.insert(rotated.table.clone(), rotated.bytes_after);
        }
        for table in &report.too_large {
            if let Some((_, bytes)) = sizes.iter().find(|(name, _)| name == table) {
                self.0.insert(table.clone(), *bytes);
            }
        }
    }
}

/// Starts the periodic check of a writable store (when its rotation has an
/// interval): it holds the store weakly and ends once the store is gone.
/// A failed check is retried at the next one; the calls report the
/// server's failures.
pub(crate) fn start(inner: &Arc<Inner>) {
    let Some(interval) = inner.rotation.interval else {
        return;
    };
    let inner = Arc::downgrade(inner);
    tokio::spawn(async move {
        let mut floors = Floors::default();
        loop {
            tokio::time::sleep(interval).await;
            let Some(inner) = inner.upgrade() else { break };
            // Bounded as a call is: a pass nobody answers is given up (and
            // does not keep the store alive).
            let rotation = inner.rotation.clone();
            let mut seen = floors.clone();
            let pass =
                crate::deadline::on_connection(&inner, "rotating the state tables", |client| {
                    Box::pin(async move {
                        let sizes = sizes(client).await?;
                        let due = seen.due(&sizes, rotation.min_growth);
                        let report = rotate_tables(client, &rotation, &due).await;
                        Ok((seen, report, sizes))
                    })
                });
            if let Ok((seen, report, sizes)) = pass.await {
                floors = seen;
                if let Ok(report) = report {
                    floors.passed(&report, &sizes);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(of: &[(&str, u64)]) -> Vec<(String, u64)> {
        of.iter().map(|(t, b)| ((*t).to_owned(), *b)).collect()
    }

    #[test]
    fn a_table_is_due_once_it_grew_by_min_growth_and_doubled() {
        let mut floors = Floors::default();
        // Before a first rotation the floor is 0: only the growth counts.
        let due = floors.due(&sizes(&[("cursors", 99), ("work", 100)]), 100);
        assert_eq!(due, sizes(&[("work", 100)]));
        floors.passed(
            &RotationReport {
                rotated: vec![RotatedTable {
                    table: "work".into(),
                    rows: 1,
                    bytes_before: 100,
                    bytes_after: 40,
                }],
                ..RotationReport::default()
            },
            &sizes(&[("cursors", 99), ("work", 100)]),
        );
        // Doubled but not grown by 100, then both.
        assert!(floors.due(&sizes(&[("work", 139)]), 100).is_empty());
        assert_eq!(
            floors.due(&sizes(&[("work", 140)]), 100),
            sizes(&[("work", 140)])
        );
        let mut floors = Floors::default();
        floors.0.insert("work".into(), 300);
        assert!(floors.due(&sizes(&[("work", 599)]), 100).is_empty());
        assert_eq!(floors.due(&sizes(&[("work", 600)]), 100).len(), 1);
    }

    #[test]
    fn floors_follow_a_table_rotated_elsewhere_and_wait_out_large_ones() {
        let mut floors = Floors::default();
        floors.0.insert("cursors".into(), 1_000);
        // Another store rotated it down to 200: the floor follows.
        assert!(floors.due(&sizes(&[("cursors", 200)]), 100).is_empty());
        assert_eq!(floors.0["cursors"], 200);
        assert_eq!(floors.due(&sizes(&[("cursors", 400)]), 100).len(), 1);
        // Too large to rotate: the floor becomes its size.
        floors.passed(
            &RotationReport {
                too_large: vec!["cursors".into()],
                ..RotationReport::default()
            },
            &sizes(&[("cursors", 400)]),
        );
        assert!(floors.due(&sizes(&[("cursors", 799)]), 100).is_empty());
        assert_eq!(floors.due(&sizes(&[("cursors", 800)]), 100).len(), 1);
    }
}
