//! Rotation: reclaiming the state tables without vacuum (see
//! [`Rotation`]). The migrations install `rotate_table` (version 14), which
//! locks one table, keeps its live rows, truncates it and inserts them
//! back, all in one transaction; this module decides which tables to
//! rotate, runs it for each in a transaction of its own (so a rotation
//! holds one table's lock, never waits for a second while holding it, and
//! cannot deadlock with a call), and runs the store's periodic check.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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

/// Bytes on disk of each named table with its indexes and TOAST, the
/// statistics' estimates of its dead and live rows, whether a transaction
/// holds back vacuum's horizon, and the seconds since the table was last
/// vacuumed (by anyone, autovacuum included; infinite if never): `$1` the
/// names (the connection's `search_path` is the store's schema), `$2` the
/// age in seconds past which an open transaction holding a snapshot or a
/// transaction id (or a prepared one) is taken to hold it. A client
/// connection of another role whose transaction this role cannot see
/// counts as one.
const SIZES: &str = "WITH held AS (SELECT \
        EXISTS (SELECT 1 FROM pg_stat_activity a \
            WHERE a.pid <> pg_backend_pid() AND a.backend_type = 'client backend' \
            AND (a.query = '<insufficient privilege>' \
                OR ((a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL) \
                    AND a.xact_start < clock_timestamp() - make_interval(secs => $2)))) \
        OR EXISTS (SELECT 1 FROM pg_prepared_xacts p \
            WHERE p.prepared < clock_timestamp() - make_interval(secs => $2)) AS held) \
    SELECT t, COALESCE(pg_total_relation_size(to_regclass(t)), 0), \
    COALESCE(pg_stat_get_dead_tuples(to_regclass(t)), 0), \
    COALESCE(pg_stat_get_live_tuples(to_regclass(t)), 0), held.held, \
    COALESCE(extract(epoch FROM clock_timestamp() - GREATEST( \
        pg_stat_get_last_vacuum_time(to_regclass(t)), \
        pg_stat_get_last_autovacuum_time(to_regclass(t))))::float8, 'Infinity') \
    FROM unnest($1::text[]) t, held";

/// The `VACUUM` of each rotated table, without truncating its end (which
/// would take the table's exclusive lock): it blocks no call, and leaves
/// the space of the dead rows for reuse.
fn vacuum_of(table: &str) -> Option<&'static str> {
    Some(match table {
        "sessions" => "VACUUM (TRUNCATE false) sessions",
        "cursors" => "VACUUM (TRUNCATE false) cursors",
        "lane_queue" => "VACUUM (TRUNCATE false) lane_queue",
        "work" => "VACUUM (TRUNCATE false) work",
        "presence" => "VACUUM (TRUNCATE false) presence",
        "snapshots" => "VACUUM (TRUNCATE false) snapshots",
        "checkpoints" => "VACUUM (TRUNCATE false) checkpoints",
        "pins" => "VACUUM (TRUNCATE false) pins",
        "subscribers" => "VACUUM (TRUNCATE false) subscribers",
        "pauses" => "VACUUM (TRUNCATE false) pauses",
        "events" => "VACUUM (TRUNCATE false) events",
        "completions" => "VACUUM (TRUNCATE false) completions",
        _ => return None,
    })
}

/// One table as a check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Measured {
    /// The table's name.
    name: String,
    /// Bytes of the table with its indexes and TOAST.
    bytes: u64,
    /// Dead rows, as the server's statistics estimate them
    /// (`pg_stat_get_dead_tuples`).
    dead: u64,
    /// Live rows, as estimated.
    live: u64,
    /// Whether a transaction holds back vacuum's horizon (see [`SIZES`]),
    /// so a `VACUUM` would reclaim nothing.
    held: bool,
    /// Time since the table was last vacuumed, by anyone.
    since_vacuum: Duration,
}

impl Measured {
    /// Whether at least half the table's rows are dead, so a rotation
    /// copies no more rows than it reclaims. A table that grew by live rows
    /// (the log, as events are appended) has nothing for a rotation to
    /// reclaim.
    fn mostly_dead(&self) -> bool {
        self.dead > 0 && self.dead >= self.live
    }
}

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
    /// Tables the periodic check vacuumed rather than rotated (see
    /// [`Rotation::vacuum_first`]): no transaction held vacuum back, so a
    /// `VACUUM`, which blocks no call, made their dead rows' space free for
    /// reuse (the files keep their size).
    pub vacuumed: Vec<String>,
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
            let every: Vec<Due> = sizes(client, Duration::ZERO)
                .await?
                .into_iter()
                .map(|table| Due {
                    table: table.name,
                    bytes: table.bytes,
                    wait: rotation.lock_timeout,
                    vacuum: false,
                })
                .collect();
            rotate_tables(client, rotation.max_live, &every).await
        })
    })
    .await
}

/// Every table rotations reclaim as it is now, in [`STATE_TABLES`] then
/// [`LOG_TABLES`] order.
async fn sizes(client: &Client, interval: Duration) -> Result<Vec<Measured>> {
    let doing = "measuring the state tables";
    let names: Vec<&str> = rotated_tables().collect();
    let held_after = interval.as_secs_f64();
    let rows = client
        .query(SIZES, &[&names, &held_after])
        .await
        .map_err(|e| db_error(doing, e))?;
    let mut sizes = Vec::with_capacity(rows.len());
    for row in rows {
        let count = |column: usize| -> Result<u64> {
            let value: i64 = row.try_get(column).map_err(|e| db_error(doing, e))?;
            Ok(u64::try_from(value).unwrap_or(0))
        };
        sizes.push(Measured {
            name: row.try_get(0).map_err(|e| db_error(doing, e))?,
            bytes: count(1)?,
            dead: count(2)?,
            live: count(3)?,
            held: row.try_get(4).map_err(|e| db_error(doing, e))?,
            since_vacuum: Duration::try_from_secs_f64(
                row.try_get(5).map_err(|e| db_error(doing, e))?,
            )
            .unwrap_or(Duration::MAX),
        });
    }
    Ok(sizes)
}

/// A table to reclaim: its name, its bytes before, how long a rotation
/// waits for its lock, and whether it is vacuumed instead.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Due {
    table: String,
    bytes: u64,
    wait: Duration,
    vacuum: bool,
}

/// The least time between two vacuums of a table by the periodic checks,
/// in check intervals: the stores of every process check, and a `VACUUM`
/// costs the calls running beside it (it reads and writes the table and
/// its indexes).
const VACUUM_GAP: u32 = 10;

/// The first lock wait of the periodic check's rotation of a table: calls
/// on the table queue behind a rotation waiting for its lock, so it first
/// waits no longer than this, and twice as long after each pass that found
/// the table busy, up to [`Rotation::lock_timeout`].
const FIRST_WAIT: Duration = Duration::from_millis(1);

/// Rotates each of `tables` in turn, each in its own transaction, and
/// reports what became of each.
async fn rotate_tables(client: &Client, max_live: u64, tables: &[Due]) -> Result<RotationReport> {
    let mut report = RotationReport::default();
    if tables.is_empty() {
        return Ok(report);
    }
    let doing = "rotating the state tables";
    let max_live = i64::try_from(max_live).unwrap_or(i64::MAX);
    let mut kept = Vec::new();
    for Due {
        table,
        bytes: before,
        wait,
        vacuum,
    } in tables
    {
        if let (true, Some(sql)) = (*vacuum, vacuum_of(table)) {
            client
                .batch_execute(sql)
                .await
                .map_err(|e| db_error("vacuuming a state table", e))?;
            report.vacuumed.push(table.clone());
            continue;
        }
        let lock_ms = i64::try_from(wait.as_millis().max(1)).unwrap_or(i64::MAX);
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
    // Only the bytes are read: no age matters.
    let after = sizes(client, Duration::ZERO).await?;
    for (table, rows, bytes_before) in kept {
        let bytes_after = after
            .iter()
            .find(|measured| measured.name == table)
            .map_or(0, |measured| measured.bytes);
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
/// since its last rotation by this store (0 before the first), and how
/// long its next rotation waits for the lock (see [`FIRST_WAIT`]).
#[derive(Debug, Default, Clone)]
struct Floors {
    floors: HashMap<String, u64>,
    waits: HashMap<String, Duration>,
}

impl Floors {
    /// The tables due among `sizes`. To rotate: grown by at least
    /// `min_growth` bytes and to at least twice their floor. With
    /// [`Rotation::vacuum_first`], only those at least half dead
    /// ([`Measured::mostly_dead`]), and while no transaction holds vacuum
    /// back they are vacuumed instead, once at least `min_growth` bytes
    /// and [`VACUUM_GAP`] intervals after their last vacuum (by any store
    /// or autovacuum): a `VACUUM` shrinks nothing, so the floors do not
    /// apply, and it blocks no call, so it need not wait for them. Lowers
    /// each floor to the size seen (another store may have rotated the
    /// table).
    fn due(&mut self, sizes: &[Measured], rotation: &Rotation) -> Vec<Due> {
        let mut due = Vec::new();
        for table in sizes {
            let (name, bytes) = (&table.name, table.bytes);
            let floor = self.floors.entry(name.clone()).or_insert(0);
            let vacuum = rotation.vacuum_first && !table.held;
            let grown = bytes >= floor.saturating_add(rotation.min_growth)
                && bytes >= floor.saturating_mul(2);
            let is_due = if !rotation.vacuum_first {
                grown
            } else if !table.mostly_dead() {
                false
            } else if vacuum {
                bytes >= rotation.min_growth
                    && table.since_vacuum >= rotation.interval.unwrap_or_default() * VACUUM_GAP
            } else {
                grown
            };
            if is_due {
                let wait = self.waits.get(name).copied().unwrap_or(FIRST_WAIT);
                due.push(Due {
                    table: name.clone(),
                    bytes,
                    wait: wait.min(rotation.lock_timeout),
                    vacuum,
                });
            } else {
                *floor = (*floor).min(bytes);
            }
        }
        due
    }

    /// After a pass: a rotated table's floor is its size after, and its
    /// next wait the first; a table vacuumed or too large to rotate waits
    /// until it doubles again; a busy one is tried at the next check,
    /// waiting twice as long (at most `lock_timeout`).
    fn passed(&mut self, report: &RotationReport, sizes: &[Measured], lock_timeout: Duration) {
        for rotated in &report.rotated {
            self.floors
                .insert(rotated.table.clone(), rotated.bytes_after);
            self.waits.remove(&rotated.table);
        }
        for table in report.too_large.iter().chain(&report.vacuumed) {
            if let Some(measured) = sizes.iter().find(|measured| measured.name == *table) {
                self.floors.insert(table.clone(), measured.bytes);
            }
        }
        for table in &report.busy {
            let wait = self.waits.entry(table.clone()).or_insert(FIRST_WAIT);
            *wait = wait.saturating_mul(2).min(lock_timeout);
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
                        let sizes = sizes(client, interval).await?;
                        let due = seen.due(&sizes, &rotation);
                        let report = rotate_tables(client, rotation.max_live, &due).await;
                        Ok((seen, report, sizes))
                    })
                });
            if let Ok((seen, report, sizes)) = pass.await {
                floors = seen;
                if let Ok(report) = report {
                    floors.passed(&report, &sizes, inner.rotation.lock_timeout);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables of these sizes, each with one live row and one dead, while a
    /// transaction holds vacuum back.
    fn sizes(of: &[(&str, u64)]) -> Vec<Measured> {
        of.iter()
            .map(|(t, b)| Measured {
                name: (*t).to_owned(),
                bytes: *b,
                dead: 1,
                live: 1,
                held: true,
                since_vacuum: Duration::MAX,
            })
            .collect()
    }

    /// What `due` answers without a busy pass: the names and bytes, each
    /// waited for the first wait.
    fn named(of: &[(&str, u64)]) -> Vec<Due> {
        of.iter()
            .map(|(t, b)| Due {
                table: (*t).to_owned(),
                bytes: *b,
                wait: FIRST_WAIT,
                vacuum: false,
            })
            .collect()
    }

    /// A rotation of 100 bytes' growth, locks waited for at most 8 ms.
    fn rotation() -> Rotation {
        Rotation {
            min_growth: 100,
            lock_timeout: Duration::from_millis(8),
            ..Rotation::default()
        }
    }

    #[test]
    fn a_busy_table_is_waited_for_longer_each_pass_up_to_the_lock_timeout() {
        let mut floors = Floors::default();
        let busy = RotationReport {
            busy: vec!["cursors".into()],
            ..RotationReport::default()
        };
        let wait =
            |floors: &mut Floors| floors.due(&sizes(&[("cursors", 1_000)]), &rotation())[0].wait;
        assert_eq!(wait(&mut floors), Duration::from_millis(1));
        for expected in [2, 4, 8, 8] {
            floors.passed(&busy, &[], Duration::from_millis(8));
            assert_eq!(wait(&mut floors), Duration::from_millis(expected));
        }
        // Rotated: the next one starts from the first wait again.
        let rotated = RotationReport {
            rotated: vec![RotatedTable {
                table: "cursors".into(),
                rows: 1,
                bytes_before: 1_000,
                bytes_after: 10,
            }],
            ..RotationReport::default()
        };
        floors.passed(&rotated, &[], Duration::from_millis(8));
        assert_eq!(wait(&mut floors), FIRST_WAIT);
    }

    #[test]
    fn a_table_grown_by_live_rows_is_not_due() {
        let mut floors = Floors::default();
        let grown = |dead, live| Measured {
            name: "events".into(),
            bytes: 1_000,
            dead,
            live,
            held: true,
            since_vacuum: Duration::MAX,
        };
        // The log grew by appends: nothing to reclaim.
        assert!(floors.due(&[grown(0, 5_000)], &rotation()).is_empty());
        assert!(floors.due(&[grown(4_999, 5_000)], &rotation()).is_empty());
        assert_eq!(
            floors.due(&[grown(5_000, 5_000)], &rotation()),
            named(&[("events", 1_000)])
        );
        // Dead rows and nothing live: due.
        assert_eq!(floors.due(&[grown(3, 0)], &rotation()).len(), 1);
    }

    #[test]
    fn a_table_is_vacuumed_unless_vacuum_is_held_back() {
        let table = |held| Measured {
            name: "cursors".into(),
            bytes: 1_000,
            dead: 900,
            live: 100,
            held,
            since_vacuum: Duration::MAX,
        };
        let vacuum =
            |held, rotation: &Rotation| Floors::default().due(&[table(held)], rotation)[0].vacuum;
        assert!(vacuum(false, &rotation()));
        assert!(!vacuum(true, &rotation()));
        // Unless the rotation does not leave tables to vacuum, which also
        // rotates tables grown by live rows.
        let regardless = Rotation {
            vacuum_first: false,
            ..rotation()
        };
        assert!(!vacuum(false, &regardless));
        let appended = Measured {
            dead: 0,
            ..table(false)
        };
        assert_eq!(Floors::default().due(&[appended], &regardless).len(), 1);
        // Vacuumed (by any store) within the gap: not again.
        let recent = Measured {
            since_vacuum: Duration::from_secs(9),
            ..table(false)
        };
        assert!(Floors::default()
            .due(std::slice::from_ref(&recent), &rotation())
            .is_empty());
        let old = Measured {
            since_vacuum: Duration::from_secs(10),
            ..recent
        };
        assert_eq!(Floors::default().due(&[old], &rotation()).len(), 1);
    }

    /// `vacuum_of` names its tables a second time: every table a pass
    /// measures has its `VACUUM`, of that table, so a table due for a
    /// vacuum is never rotated instead.
    #[test]
    fn every_rotated_table_has_its_vacuum() {
        for table in rotated_tables() {
            assert_eq!(
                vacuum_of(table),
                Some(format!("VACUUM (TRUNCATE false) {table}").as_str()),
                "{table}"
            );
        }
    }

    #[test]
    fn a_table_is_due_once_it_grew_by_min_growth_and_doubled() {
        let mut floors = Floors::default();
        // Before a first rotation the floor is 0: only the growth counts.
        let due = floors.due(&sizes(&[("cursors", 99), ("work", 100)]), &rotation());
        assert_eq!(due, named(&[("work", 100)]));
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
            Duration::from_millis(8),
        );
        // Doubled but not grown by 100, then both.
        assert!(floors.due(&sizes(&[("work", 139)]), &rotation()).is_empty());
        assert_eq!(
            floors.due(&sizes(&[("work", 140)]), &rotation()),
            named(&[("work", 140)])
        );
        let mut floors = Floors::default();
        floors.floors.insert("work".into(), 300);
        assert!(floors.due(&sizes(&[("work", 599)]), &rotation()).is_empty());
        assert_eq!(floors.due(&sizes(&[("work", 600)]), &rotation()).len(), 1);
    }

    #[test]
    fn floors_follow_a_table_rotated_elsewhere_and_wait_out_large_ones() {
        let mut floors = Floors::default();
        floors.floors.insert("cursors".into(), 1_000);
        // Another store rotated it down to 200: the floor follows.
        assert!(floors
            .due(&sizes(&[("cursors", 200)]), &rotation())
            .is_empty());
        assert_eq!(floors.floors["cursors"], 200);
        assert_eq!(
            floors.due(&sizes(&[("cursors", 400)]), &rotation()).len(),
            1
        );
        // Too large to rotate: the floor becomes its size.
        floors.passed(
            &RotationReport {
                too_large: vec!["cursors".into()],
                ..RotationReport::default()
            },
            &sizes(&[("cursors", 400)]),
            Duration::from_millis(8),
        );
        assert!(floors
            .due(&sizes(&[("cursors", 799)]), &rotation())
            .is_empty());
        assert_eq!(
            floors.due(&sizes(&[("cursors", 800)]), &rotation()).len(),
            1
        );
    }
}
