//! The versioned schema: migrations applied on open, tracked in `PRAGMA user_version`.
//!
//! The README's "Schema" section explains every table and index.

use a2_store_api::StoreError;
use rusqlite::{Connection, TransactionBehavior};

use crate::errors::SqlContext;

/// Migration `n` (0-based) moves a database from version `n` to `n + 1`.
/// Released migrations are never edited; changes are new entries.
const MIGRATIONS: &[&str] = &[
    // Version 1: the whole cursor model.
    r#"
CREATE TABLE sessions (
    sid               INTEGER PRIMARY KEY,
    name              TEXT    NOT NULL UNIQUE,
    clear_index       INTEGER NOT NULL DEFAULT 0,
    reclaimed_through INTEGER NOT NULL DEFAULT 0
);

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
CREATE INDEX events_by_type ON events (sid, type, idx);

CREATE TABLE event_ids (
    sid INTEGER NOT NULL,
    id  TEXT    NOT NULL,
    idx INTEGER NOT NULL,
    PRIMARY KEY (sid, id)
) WITHOUT ROWID;

CREATE TABLE cursors (
    cid                 INTEGER PRIMARY KEY,
    sid                 INTEGER NOT NULL,
    consumer            TEXT    NOT NULL,
    lane                TEXT    NOT NULL,
    ev_index            INTEGER NOT NULL,
    kind                INTEGER NOT NULL,
    position            INTEGER NOT NULL,
    head                INTEGER,
    types               TEXT,
    attempt_count       INTEGER NOT NULL DEFAULT 0,
    first_claimed_at    INTEGER,
    last_claimed_at     INTEGER,
    claim_holder        TEXT,
    claim_expires_at    INTEGER,
    failure_count       INTEGER NOT NULL DEFAULT 0,
    last_failed_at      INTEGER,
    last_failed_attempt INTEGER,
    last_error          TEXT,
    failed_at           INTEGER,
    born                INTEGER NOT NULL DEFAULT 0,
    expired             INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX cursors_by_key ON cursors (sid, consumer, lane, ev_index);
CREATE INDEX cursors_ready ON cursors (sid, head, consumer, lane)
    WHERE head IS NOT NULL AND failed_at IS NULL AND (claim_expires_at IS NULL OR expired = 1);
CREATE INDEX cursors_busy ON cursors (sid, claim_expires_at)
    WHERE head IS NOT NULL AND failed_at IS NULL AND claim_expires_at IS NOT NULL
    AND expired = 0;
CREATE INDEX cursors_pending ON cursors (sid, consumer)
    WHERE head IS NOT NULL AND failed_at IS NULL;
CREATE INDEX cursors_dead ON cursors (sid, head)
    WHERE head IS NOT NULL AND failed_at IS NOT NULL;
CREATE INDEX cursors_listed ON cursors (sid) WHERE kind <> 0;
CREATE INDEX cursors_stale ON cursors (sid, born) WHERE kind <> 2;
CREATE INDEX cursors_logs ON cursors (sid) WHERE kind = 2;

CREATE TABLE lane_queue (
    cid INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    PRIMARY KEY (cid, idx)
) WITHOUT ROWID;

CREATE TABLE completions (
    cid          INTEGER NOT NULL,
    idx          INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    returned_ids TEXT    NOT NULL,
    PRIMARY KEY (cid, idx)
) WITHOUT ROWID;

CREATE TABLE snapshot_heads (
    sid     INTEGER NOT NULL,
    reducer TEXT    NOT NULL,
    idx     INTEGER NOT NULL,
    state   TEXT    NOT NULL,
    PRIMARY KEY (sid, reducer)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    sid     INTEGER NOT NULL,
    reducer TEXT    NOT NULL,
    idx     INTEGER NOT NULL,
    state   TEXT    NOT NULL,
    PRIMARY KEY (sid, reducer, idx)
) WITHOUT ROWID;

CREATE TABLE pins (
    cid     INTEGER NOT NULL,
    head    INTEGER NOT NULL,
    sid     INTEGER NOT NULL,
    reducer TEXT    NOT NULL,
    cp_idx  INTEGER NOT NULL,
    PRIMARY KEY (cid, head, reducer, cp_idx)
) WITHOUT ROWID;
CREATE INDEX pins_by_checkpoint ON pins (sid, reducer, cp_idx);

CREATE TABLE presence (
    sid         INTEGER NOT NULL,
    participant TEXT    NOT NULL,
    field       TEXT    NOT NULL,
    value       TEXT    NOT NULL,
    seen        INTEGER,
    at          INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (sid, participant, field)
) WITHOUT ROWID;
"#,
    // Version 2: the work index across sessions (`work.rs`), backfilled from
    // the cursors, and the pending-head index widened by the claim expiry so
    // a pair's earliest head is one seek.
    r#"
CREATE TABLE work (
    session  TEXT    NOT NULL,
    consumer TEXT    NOT NULL,
    ready_at INTEGER,
    PRIMARY KEY (session, consumer)
) WITHOUT ROWID;
CREATE INDEX work_ready ON work (consumer, ready_at, session) WHERE ready_at IS NOT NULL;
CREATE INDEX work_listed ON work (consumer, session);

DROP INDEX cursors_pending;
CREATE INDEX cursors_pending ON cursors (sid, consumer, claim_expires_at)
    WHERE head IS NOT NULL AND failed_at IS NULL;

INSERT INTO work (session, consumer, ready_at)
SELECT s.name, c.consumer,
       MIN(CASE WHEN c.failed_at IS NULL THEN COALESCE(c.claim_expires_at, 0) END)
FROM cursors AS c JOIN sessions AS s ON s.sid = c.sid
WHERE c.head IS NOT NULL
GROUP BY c.sid, c.consumer;
"#,
    // Version 3: time and control. A queued lane index keeps its not-before
    // time (`NULL`: unscheduled); pauses of a consumer in one session or in
    // every session (`session = ''`: session ids are never empty), found by
    // consumer or by the session a claim looks at; where a
    // forked session came from; and the dead letters of every session in
    // `redrive_all`'s order, so a bulk redrive reads the dead letters only.
    r#"
ALTER TABLE lane_queue ADD COLUMN not_before INTEGER;

CREATE TABLE pauses (
    consumer  TEXT    NOT NULL,
    session   TEXT    NOT NULL,
    until_ms  INTEGER,
    paused_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, session)
) WITHOUT ROWID;
CREATE INDEX pauses_by_session ON pauses (session);

ALTER TABLE sessions ADD COLUMN forked_from TEXT;
ALTER TABLE sessions ADD COLUMN forked_through INTEGER;

CREATE INDEX cursors_dead_all ON cursors (failed_at, sid)
    WHERE head IS NOT NULL AND failed_at IS NOT NULL;
"#,
    // Version 4: retention. Every session has an incarnation, drawn from a
    // counter no delete ever lowers (existing sessions take their key,
    // distinct, and the counter starts above the highest), and the store
    // time of its last append (`NULL` while nothing was appended and no
    // presence written: the session does not exist for retention), found
    // in last-activity order by `prune`; expired presence found by expiry.
    // Existing sessions take their last row's time; those holding only
    // presence 0 (idle since an unknown time).
    r#"
CREATE TABLE counters (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

ALTER TABLE sessions ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN last_activity INTEGER;
UPDATE sessions SET incarnation = sid,
    last_activity = COALESCE(
        (SELECT e.created_at FROM events AS e WHERE e.sid = sessions.sid
            ORDER BY e.idx DESC LIMIT 1),
        (SELECT 0 FROM presence AS p WHERE p.sid = sessions.sid LIMIT 1));
INSERT INTO counters (name, value)
    SELECT 'incarnation', COALESCE(MAX(sid), 0) FROM sessions;
CREATE INDEX sessions_idle ON sessions (last_activity, name);

CREATE INDEX presence_expiry ON presence (expires_at);
"#,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database at `conn` (opened from `path`) to [`SCHEMA_VERSION`],
/// one migration per transaction. A database written by a newer build is
/// refused with `IncompatibleSchema` and left untouched.
pub(crate) fn migrate(conn: &mut Connection, path: &str) -> Result<(), StoreError> {
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|error| open_error(path, "locking the database to migrate it", error))?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(|error| open_error(path, "reading the schema version", error))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::IncompatibleSchema {
                message: format!(
                    "database '{path}' has schema version {version}, newer than version {SCHEMA_VERSION} this build supports: open it with a newer build"
                ),
            });
        }
        if version < 0 {
            return Err(StoreError::IncompatibleSchema {
                message: format!(
                    "database '{path}' has an invalid schema version {version} (this build writes {SCHEMA_VERSION})"
                ),
            });
        }
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        let step = MIGRATIONS
            .get(usize::try_from(version).unwrap_or(usize::MAX))
            .ok_or_else(|| StoreError::IncompatibleSchema {
                message: format!("database '{path}' has unknown schema version {version}"),
            })?;
        tx.execute_batch(step).map_err(|error| {
            open_error(
                path,
                &format!("migrating the schema from version {version}"),
                error,
            )
        })?;
        // `PRAGMA` takes no bound parameters; the value is a compile-time integer.
        tx.pragma_update(None, "user_version", version + 1)
            .map_err(|error| open_error(path, "recording the schema version", error))?;
        tx.commit()
            .ctx(&format!("committing the migration of '{path}'"))?;
    }
}

/// A failure while opening `path`: typed like every SQL error, with the path
/// and a hint in the message.
pub(crate) fn open_error(path: &str, doing: &str, error: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as Code;
    let hint = match error.sqlite_error_code() {
        Some(Code::NotADatabase) => " (the file is not a SQLite database)",
        Some(Code::DatabaseCorrupt) => " (the database file is corrupt or could not be read)",
        Some(Code::CannotOpen) => " (check that the directory exists and is writable)",
        Some(Code::ReadOnly) => {
            " (the file, its directory or its -wal/-shm side files are read-only or immutable: check ls -l and lsattr)"
        }
        Some(Code::PermissionDenied) => " (permission denied)",
        _ => "",
    };
    crate::errors::sql_error(&format!("{doing} of '{path}'{hint}"), error)
}

/// The plan SQLite picks for `sql` on a database migrated to this version
/// (every parameter unbound), one step a line: the unit tests check that
/// the queries read index ranges, never a whole table.
#[cfg(test)]
pub(crate) fn query_plan(sql: &str) -> String {
    let mut conn = Connection::open_in_memory().unwrap();
    migrate(&mut conn, ":memory:").unwrap();
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let unbound = vec![rusqlite::types::Null; stmt.parameter_count()];
    let steps: Vec<String> = stmt
        .query_map(rusqlite::params_from_iter(unbound), |row| {
            row.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    steps.join("\n")
}
