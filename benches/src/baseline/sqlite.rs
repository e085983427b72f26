//! The bare rusqlite baseline: the same rows and row updates a SQLite store
//! makes, with cached statements and nothing else — the physical limit of
//! SQLite on this machine.

use std::time::{Duration, Instant};

use a2_conformance::bench::{payload, LEASE_MS, START_MS};
use a2_store_api::{IdGenerator, RandomIds};
use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup, BenchmarkId, Throughput};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::Value;
use tempfile::TempDir;

use super::CHUNK;

/// Where and how durably the baseline database lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// A private in-memory database (compare with `sqlite-memory`).
    Memory,
    /// A WAL file with `synchronous = NORMAL` (compare with `sqlite-file`).
    File,
    /// A WAL file with `synchronous = FULL` (compare with `sqlite-file-full`).
    FileFull,
}

impl Storage {
    /// The function id of this baseline.
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "baseline-rusqlite-memory",
            Self::File => "baseline-rusqlite-file",
            Self::FileFull => "baseline-rusqlite-file-full",
        }
    }
}

/// Unwraps a rusqlite result, aborting the benchmark with the step's name.
fn sql<T>(step: &str, result: rusqlite::Result<T>) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("baseline step '{step}' failed: {error}"),
    }
}

const SCHEMA: &str = r"
CREATE TABLE events (
    sid        INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    id         TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    cause      TEXT,
    PRIMARY KEY (sid, idx)
) WITHOUT ROWID;
CREATE TABLE event_ids (
    sid INTEGER NOT NULL,
    id  TEXT    NOT NULL,
    idx INTEGER NOT NULL,
    PRIMARY KEY (sid, id)
) WITHOUT ROWID;
CREATE TABLE cursors (
    cid              INTEGER PRIMARY KEY,
    sid              INTEGER NOT NULL,
    position         INTEGER NOT NULL,
    head             INTEGER,
    attempt_count    INTEGER NOT NULL DEFAULT 0,
    claim_holder     TEXT,
    claim_expires_at INTEGER
);
CREATE INDEX cursors_ready ON cursors (sid, head) WHERE head IS NOT NULL;
CREATE TABLE lane_queue (
    cid INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    PRIMARY KEY (cid, idx)
) WITHOUT ROWID;
CREATE TABLE completions (
    cid     INTEGER NOT NULL,
    idx     INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    ids     TEXT    NOT NULL,
    PRIMARY KEY (cid, idx)
) WITHOUT ROWID;
";

const INSERT_EVENT: &str = "INSERT INTO events (sid, idx, id, type, payload, created_at) \
                            VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const INSERT_ID: &str = "INSERT INTO event_ids (sid, id, idx) VALUES (?1, ?2, ?3)";

/// Rows one baseline session holds before it moves to the next (as the bodies do).
const SESSION_ROWS: u64 = 20_000;

/// A baseline database with one session being written.
pub struct RawSqlite {
    conn: Connection,
    _dir: Option<TempDir>,
    ids: RandomIds,
    sid: i64,
    head: i64,
}

impl RawSqlite {
    /// Opens a fresh database with the schema.
    pub fn open(storage: Storage) -> Self {
        let (conn, dir) = match storage {
            Storage::Memory => (sql("open", Connection::open_in_memory()), None),
            Storage::File | Storage::FileFull => {
                let dir = match tempfile::Builder::new().prefix("a2-baseline-").tempdir() {
                    Ok(dir) => dir,
                    Err(error) => panic!("cannot create the baseline directory: {error}"),
                };
                let conn = sql("open", Connection::open(dir.path().join("baseline.db")));
                let mode: String = sql(
                    "journal_mode",
                    conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)),
                );
                assert_eq!(mode, "wal", "baseline journal mode");
                let sync = if storage == Storage::FileFull {
                    "FULL"
                } else {
                    "NORMAL"
                };
                sql("synchronous", conn.pragma_update(None, "synchronous", sync));
                (conn, Some(dir))
            }
        };
        sql("schema", conn.execute_batch(SCHEMA));
        Self {
            conn,
            _dir: dir,
            ids: RandomIds,
            sid: 1,
            head: 0,
        }
    }

    /// Moves to a fresh session when `rows` more would pass the bound.
    fn room(&mut self, rows: u64) -> bool {
        if self.head as u64 + rows > SESSION_ROWS {
            self.sid += 1;
            self.head = 0;
            return true;
        }
        self.head == 0
    }

    /// Inserts a batch in one transaction with cached statements (the
    /// payload is serialized here, as a store must); returns the indexes.
    pub fn append(&mut self, events: &[(&str, Value)]) -> Vec<i64> {
        let tx = sql(
            "begin",
            self.conn
                .transaction_with_behavior(TransactionBehavior::Immediate),
        );
        let mut indexes = Vec::with_capacity(events.len());
        {
            let mut insert = sql("prepare", tx.prepare_cached(INSERT_EVENT));
            let mut insert_id = sql("prepare", tx.prepare_cached(INSERT_ID));
            for (event_type, payload) in events {
                self.head += 1;
                let id = self.ids.next_id();
                let text = match serde_json::to_string(payload) {
                    Ok(text) => text,
                    Err(error) => panic!("baseline payload: {error}"),
                };
                sql(
                    "insert event",
                    insert.execute(params![self.sid, self.head, id, event_type, text, START_MS]),
                );
                sql(
                    "insert id",
                    insert_id.execute(params![self.sid, id, self.head]),
                );
                indexes.push(self.head);
            }
        }
        sql("commit", tx.commit());
        indexes
    }

    /// Queues `indexes` on the session's lane cursor, creating it (and
    /// pointing its head at the first queued index) when needed.
    pub fn queue(&mut self, cid: &mut Option<i64>, indexes: &[i64]) {
        let tx = sql("begin", self.conn.transaction());
        let id = match *cid {
            Some(id) => id,
            None => {
                sql(
                    "insert cursor",
                    tx.execute(
                        "INSERT INTO cursors (sid, position) VALUES (?1, 0)",
                        params![self.sid],
                    ),
                );
                let id = tx.last_insert_rowid();
                *cid = Some(id);
                id
            }
        };
        for index in indexes {
            sql(
                "queue",
                tx.execute(
                    "INSERT INTO lane_queue (cid, idx) VALUES (?1, ?2)",
                    params![id, index],
                ),
            );
        }
        sql(
            "wake",
            tx.execute(
                "UPDATE cursors SET head = (SELECT MIN(idx) FROM lane_queue WHERE cid = ?1 AND idx > position) \
                 WHERE cid = ?1 AND head IS NULL",
                params![id],
            ),
        );
        sql("commit", tx.commit());
    }

    /// Claims the lowest free head of the session: finds it, sets holder,
    /// expiry and attempt, and reads its row (payload parsed), in one
    /// transaction. Returns `(cid, index, attempt)`.
    pub fn claim(&mut self, holder: &str, now: i64) -> Option<(i64, i64, i64)> {
        let tx = sql(
            "begin",
            self.conn
                .transaction_with_behavior(TransactionBehavior::Immediate),
        );
        let claimed = {
            let mut find = sql(
                "prepare",
                tx.prepare_cached(
                    "SELECT cid, head FROM cursors WHERE sid = ?1 AND head IS NOT NULL \
                     AND (claim_expires_at IS NULL OR claim_expires_at <= ?2) ORDER BY head LIMIT 1",
                ),
            );
            let found: Option<(i64, i64)> = sql(
                "find",
                find.query_row(params![self.sid, now], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional(),
            );
            match found {
                None => None,
                Some((cid, index)) => {
                    let mut update = sql(
                        "prepare",
                        tx.prepare_cached(
                            "UPDATE cursors SET attempt_count = attempt_count + 1, claim_holder = ?1, \
                             claim_expires_at = ?2 WHERE cid = ?3 RETURNING attempt_count",
                        ),
                    );
                    let attempt: i64 = sql(
                        "claim",
                        update.query_row(params![holder, now + LEASE_MS, cid], |row| row.get(0)),
                    );
                    let mut read = sql(
                        "prepare",
                        tx.prepare_cached(
                            "SELECT id, type, payload, created_at FROM events WHERE sid = ?1 AND idx = ?2",
                        ),
                    );
                    let row: (String, String, String, i64) = sql(
                        "read head",
                        read.query_row(params![self.sid, index], |row| {
                            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                        }),
                    );
                    let payload: Value = match serde_json::from_str(&row.2) {
                        Ok(value) => value,
                        Err(error) => panic!("baseline payload: {error}"),
                    };
                    black_box((row, payload));
                    Some((cid, index, attempt))
                }
            }
        };
        sql("commit", tx.commit());
        claimed
    }

    /// Completes a claimed head: checks the attempt, records the completion
    /// and moves the cursor to the next queued index, in one transaction.
    pub fn complete(&mut self, cid: i64, index: i64, attempt: i64) -> bool {
        let tx = sql(
            "begin",
            self.conn
                .transaction_with_behavior(TransactionBehavior::Immediate),
        );
        let done = {
            let mut check = sql(
                "prepare",
                tx.prepare_cached("SELECT head, attempt_count FROM cursors WHERE cid = ?1"),
            );
            let current: (Option<i64>, i64) = sql(
                "check",
                check.query_row(params![cid], |row| Ok((row.get(0)?, row.get(1)?))),
            );
            if current != (Some(index), attempt) {
                false
            } else {
                let mut record = sql(
                    "prepare",
                    tx.prepare_cached(
                        "INSERT INTO completions (cid, idx, attempt, ids) VALUES (?1, ?2, ?3, '[]')",
                    ),
                );
                sql("record", record.execute(params![cid, index, attempt]));
                let mut advance = sql(
                    "prepare",
                    tx.prepare_cached(
                        "UPDATE cursors SET position = ?2, \
                         head = (SELECT MIN(idx) FROM lane_queue WHERE cid = ?1 AND idx > ?2), \
                         attempt_count = 0, claim_holder = NULL, claim_expires_at = NULL WHERE cid = ?1",
                    ),
                );
                sql("advance", advance.execute(params![cid, index]));
                true
            }
        };
        sql("commit", tx.commit());
        done
    }
}

/// Inserts a batch of `batch` rows per iteration. Id `(baseline-rusqlite-*, batch)`.
pub fn append(group: &mut BenchmarkGroup<'_, WallTime>, storage: Storage, batch: usize) {
    group.throughput(Throughput::Elements(batch as u64));
    let mut state: Option<RawSqlite> = None;
    let mut seq = 0_u64;
    group.bench_function(BenchmarkId::new(storage.name(), batch), |b| {
        b.iter_custom(|iters| {
            let db = state.get_or_insert_with(|| RawSqlite::open(storage));
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                db.room(batch as u64);
                let events = (0..batch as u64)
                    .map(|offset| ("msg", payload(seq + offset)))
                    .collect::<Vec<_>>();
                seq += batch as u64;
                let start = Instant::now();
                let indexes = db.append(&events);
                total += start.elapsed();
                black_box(indexes);
            }
            total
        })
    });
}

/// One lane claim + complete per iteration (rows prepared untimed in chunks
/// of 100). Id `(baseline-rusqlite-*, lane)`.
pub fn claim_complete(group: &mut BenchmarkGroup<'_, WallTime>, storage: Storage) {
    group.throughput(Throughput::Elements(1));
    let mut state: Option<(RawSqlite, Option<i64>, u64)> = None;
    let mut seq = 0_u64;
    group.bench_function(BenchmarkId::new(storage.name(), "lane"), |b| {
        b.iter_custom(|iters| {
            let (db, cid, ready) = state.get_or_insert_with(|| (RawSqlite::open(storage), None, 0));
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if *ready == 0 {
                    if db.room(CHUNK) {
                        *cid = None;
                    }
                    let events = (0..CHUNK)
                        .map(|offset| ("work", payload(seq + offset)))
                        .collect::<Vec<_>>();
                    seq += CHUNK;
                    let indexes = db.append(&events);
                    db.queue(cid, &indexes);
                    *ready = CHUNK;
                }
                let cycles = left.min(*ready);
                let start = Instant::now();
                for _ in 0..cycles {
                    let Some((id, index, attempt)) = db.claim("w1", START_MS) else {
                        panic!("baseline lane had no claimable head");
                    };
                    assert!(db.complete(id, index, attempt), "baseline completion");
                }
                total += start.elapsed();
                *ready -= cycles;
                left -= cycles;
            }
            total
        })
    });
}
