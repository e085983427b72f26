//! The hand-written PostgreSQL job queue the store is measured against:
//! a table of jobs on a plain `tokio-postgres` connection, claimed with
//! `FOR UPDATE SKIP LOCKED`, completed by deleting the row, every statement
//! its own transaction (autocommit).
//!
//! Used by the `pg_queue` target (the unbatched queue) and by the
//! `peer_drain` example (`benches/peer/run`), which also runs the batched
//! form and the serial form:
//!
//! - **unbatched** ([`BareQueue::batch`] 1): claim one job,
//!   `UPDATE jobs SET locked_until = $1 WHERE id = (SELECT id … LIMIT 1 FOR
//!   UPDATE SKIP LOCKED) RETURNING`, then `DELETE … WHERE id = $1`: two
//!   statements and two commits per job.
//! - **batched** (batch k > 1): claim up to k jobs in one `UPDATE … WHERE id
//!   = ANY(ARRAY(SELECT id … LIMIT $2 FOR UPDATE SKIP LOCKED))`, complete
//!   them in one `DELETE … WHERE id = ANY($1)`.
//! - **serial** ([`BareQueue::serial`]): jobs carry a session, and only the
//!   first remaining job of a session is claimable (no earlier job of its
//!   session is left), so a session's jobs run one at a time, in order, as
//!   on a lane or a named queue. A claimed job keeps its session's later
//!   jobs back until it is deleted.
//!
//! The table lives in the connection's `search_path` (unqualified `jobs`);
//! the caller picks the schema or the database.

use tokio_postgres::{Client, Error};

/// The jobs table of the independent queue (no session).
pub const CREATE_TABLE: &str =
    "CREATE TABLE jobs (id bigserial PRIMARY KEY, payload jsonb NOT NULL, locked_until bigint)";

/// The jobs table of the serial queue: a session per job, and the index
/// that finds the first remaining job of a session.
pub const CREATE_SERIAL_TABLE: &str = "CREATE TABLE jobs (id bigserial PRIMARY KEY, \
     session integer NOT NULL, payload jsonb NOT NULL, locked_until bigint); \
     CREATE INDEX jobs_session_id ON jobs (session, id)";

/// Inserts jobs `0..$1` into the independent table, payload `{"n": n}`.
pub const FILL: &str = "INSERT INTO jobs (payload) \
     SELECT jsonb_build_object('n', n) FROM generate_series(0::bigint, $1::bigint - 1) AS n";

/// Inserts jobs `0..$1` into the serial table, job `n` in session
/// `n % $2`, payload `{"n": n}`.
pub const FILL_SERIAL: &str = "INSERT INTO jobs (session, payload) \
     SELECT (n % $2::bigint)::integer, jsonb_build_object('n', n) \
     FROM generate_series(0::bigint, $1::bigint - 1) AS n";

/// Claims the oldest free job: `$1` the lock mark; returns `id, payload`.
pub const CLAIM_ONE: &str = "UPDATE jobs SET locked_until = $1 WHERE id = \
    (SELECT id FROM jobs WHERE locked_until IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) \
    RETURNING id, payload";

/// Claims the oldest free job that is first in its session.
pub const CLAIM_ONE_SERIAL: &str = "UPDATE jobs SET locked_until = $1 WHERE id = \
    (SELECT j.id FROM jobs j WHERE j.locked_until IS NULL \
       AND NOT EXISTS (SELECT 1 FROM jobs e WHERE e.session = j.session AND e.id < j.id) \
     ORDER BY j.id LIMIT 1 FOR UPDATE OF j SKIP LOCKED) \
    RETURNING id, payload";

/// Claims up to `$2` of the oldest free jobs in one statement.
pub const CLAIM_BATCH: &str = "UPDATE jobs SET locked_until = $1 WHERE id = ANY(ARRAY(\
    SELECT id FROM jobs WHERE locked_until IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)) \
    RETURNING id, payload";

/// Claims up to `$2` of the oldest free jobs that are first in their
/// sessions (so at most one per session).
pub const CLAIM_BATCH_SERIAL: &str = "UPDATE jobs SET locked_until = $1 WHERE id = ANY(ARRAY(\
    SELECT j.id FROM jobs j WHERE j.locked_until IS NULL \
       AND NOT EXISTS (SELECT 1 FROM jobs e WHERE e.session = j.session AND e.id < j.id) \
     ORDER BY j.id LIMIT $2 FOR UPDATE OF j SKIP LOCKED)) \
    RETURNING id, payload";

/// Completes one job.
pub const COMPLETE_ONE: &str = "DELETE FROM jobs WHERE id = $1";

/// Completes a batch of jobs (`$1`: `bigint[]`).
pub const COMPLETE_BATCH: &str = "DELETE FROM jobs WHERE id = ANY($1)";

/// The mark a claim writes into `locked_until` (a real queue would write a
/// lease end; no bare worker here ever gives a job back).
const LOCK_MARK: i64 = 1;

/// One form of the bare queue: unbatched or batched, independent or serial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BareQueue {
    /// Jobs per claim and per completion; 1 is the unbatched queue.
    pub batch: usize,
    /// Whether only the first remaining job of a session is claimable.
    pub serial: bool,
}

impl BareQueue {
    /// The unbatched, independent queue (the `pg_queue` target's).
    pub const UNBATCHED: Self = Self {
        batch: 1,
        serial: false,
    };

    /// The table this form needs ([`CREATE_TABLE`] or [`CREATE_SERIAL_TABLE`]).
    pub fn create_table_sql(&self) -> &'static str {
        if self.serial {
            CREATE_SERIAL_TABLE
        } else {
            CREATE_TABLE
        }
    }

    /// Creates the table and inserts `jobs` jobs, job `n` in session
    /// `n % sessions` when serial (`sessions` is then at least 1).
    pub async fn setup(&self, client: &Client, jobs: u64, sessions: u64) -> Result<(), Error> {
        client.batch_execute(self.create_table_sql()).await?;
        let jobs = i64::try_from(jobs).unwrap_or(i64::MAX);
        if self.serial {
            let sessions = i64::try_from(sessions.max(1)).unwrap_or(i64::MAX);
            client.execute(FILL_SERIAL, &[&jobs, &sessions]).await?;
        } else {
            client.execute(FILL, &[&jobs]).await?;
        }
        Ok(())
    }

    /// Claims and completes jobs on `client` until a claim finds none free,
    /// calling `handle` with each job's id once it is claimed and before it
    /// is completed; returns how many jobs it completed.
    ///
    /// A serial queue's worker may stop while other workers still hold the
    /// first jobs of the sessions left: those workers take the rest.
    pub async fn drain(&self, client: &Client, mut handle: impl FnMut(i64)) -> Result<u64, Error> {
        let mut done = 0;
        if self.batch <= 1 {
            let claim = client
                .prepare(if self.serial {
                    CLAIM_ONE_SERIAL
                } else {
                    CLAIM_ONE
                })
                .await?;
            let complete = client.prepare(COMPLETE_ONE).await?;
            while let Some(row) = client.query_opt(&claim, &[&LOCK_MARK]).await? {
                let id: i64 = row.try_get(0)?;
                handle(id);
                client.execute(&complete, &[&id]).await?;
                done += 1;
            }
        } else {
            let claim = client
                .prepare(if self.serial {
                    CLAIM_BATCH_SERIAL
                } else {
                    CLAIM_BATCH
                })
                .await?;
            let complete = client.prepare(COMPLETE_BATCH).await?;
            let limit = i64::try_from(self.batch).unwrap_or(i64::MAX);
            loop {
                let rows = client.query(&claim, &[&LOCK_MARK, &limit]).await?;
                if rows.is_empty() {
                    return Ok(done);
                }
                let mut ids = Vec::with_capacity(rows.len());
                for row in &rows {
                    let id: i64 = row.try_get(0)?;
                    handle(id);
                    ids.push(id);
                }
                client.execute(&complete, &[&ids]).await?;
                done += ids.len() as u64;
            }
        }
        Ok(done)
    }
}
