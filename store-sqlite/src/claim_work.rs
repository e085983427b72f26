//! `claim_work`: the work index as an [`a2_store_api::work::WorkSource`],
//! claimed by the one shared loop `a2_store_api::work::claim_work`.
//!
//! Ready sessions come from `work_ready` `(consumer, ready_at, session)`:
//! one range read per served consumer, already in fairness order, of at
//! most `limit` rows (each consumer's rows name distinct sessions, so the
//! first `limit` sessions of the merged order are among them). With a
//! session list, the rows are looked up by primary key instead. Either way
//! the cost follows the rows read, not the number of sessions.

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::order::compare_work;
use a2_store_api::work::{WorkSignal, WorkSource};
use a2_store_api::{ClaimRequest, ClaimResult, ClaimWorkRequest, Clock, StoreError};
use async_trait::async_trait;
use rusqlite::Connection;

use crate::claims;
use crate::errors::SqlContext;
use crate::pool::{Access, Pool};
use crate::values::{Json, SqlLimit};
use crate::wake::{WorkWake, FALLBACK_POLL};

/// One store's work index and claims, as the shared loop uses them.
pub(crate) struct Work<'a> {
    /// The store's connections.
    pub pool: &'a Arc<Pool>,
    /// The database's wake-up in this process.
    pub wake: &'a Arc<WorkWake>,
}

/// What one read of the index looks for: served consumers (sorted, no
/// repeats) and the optional session list.
#[derive(Clone)]
struct Scope {
    consumers: Vec<String>,
    sessions: Option<Vec<String>>,
}

impl Scope {
    fn of(request: &ClaimWorkRequest) -> Self {
        Self {
            consumers: request.consumer_names(),
            sessions: request.sessions.clone(),
        }
    }
}

#[async_trait]
impl WorkSource for Work<'_> {
    async fn ready_sessions(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let scope = Scope::of(request);
        let skip = skip.to_vec();
        self.pool
            .run(Access::Read, move |tx, _| {
                ready_sessions(tx, &scope, now_ms, &skip, limit)
            })
            .await
    }

    async fn claim_session(&self, request: ClaimRequest) -> Result<ClaimResult, StoreError> {
        self.pool
            .run(Access::Write, move |tx, ctx| claims::claim(tx, ctx, &request))
            .await
    }

    async fn earliest_ready(
        &self,
        request: &ClaimWorkRequest,
    ) -> Result<Option<i64>, StoreError> {
        let scope = Scope::of(request);
        self.pool
            .run(Access::Read, move |tx, _| earliest_ready(tx, &scope))
            .await
    }

    fn clock(&self) -> &dyn Clock {
        self.pool.ctx().clock.as_ref()
    }

    fn signal(&self) -> &WorkSignal {
        self.wake.signal()
    }

    fn fallback_poll(&self) -> Option<Duration> {
        self.wake.shared().then_some(FALLBACK_POLL)
    }
}

/// Up to `limit` sessions of `scope` with a row ready at `now`, not in
/// `skip`, in fairness order (by each session's earliest such row).
fn ready_sessions(
    tx: &Connection,
    scope: &Scope,
    now: i64,
    skip: &[String],
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut rows: Vec<(i64, String, String)> = Vec::new();
    let skipped: Vec<String> = skip.to_vec();
    for consumer in &scope.consumers {
        let found: Vec<(String, i64)> = match &scope.sessions {
            None => tx
                .prepare_cached(
                    "SELECT session, ready_at FROM work INDEXED BY work_ready \
                     WHERE consumer = ?1 AND ready_at IS NOT NULL AND ready_at <= ?2 \
                     AND session NOT IN (SELECT value FROM json_each(?3)) \
                     ORDER BY ready_at, session LIMIT ?4",
                )
                .and_then(|mut stmt| {
                    stmt.query_map(
                        (consumer, now, Json(&skipped), SqlLimit(Some(limit))),
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )?
                    .collect()
                }),
            Some(sessions) => tx
                .prepare_cached(
                    "SELECT session, ready_at FROM work \
                     WHERE session IN (SELECT value FROM json_each(?1)) AND consumer = ?2 \
                     AND ready_at IS NOT NULL AND ready_at <= ?3",
                )
                .and_then(|mut stmt| {
                    stmt.query_map((Json(sessions), consumer, now), |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })?
                    .collect()
                }),
        }
        .ctx("finding sessions with work")?;
        rows.extend(
            found
                .into_iter()
                .map(|(session, ready_at)| (ready_at, session, consumer.clone())),
        );
    }
    rows.sort_by(|a, b| compare_work((a.0, &a.1, &a.2), (b.0, &b.1, &b.2)));
    let mut sessions: Vec<String> = Vec::new();
    for (_, session, _) in rows {
        if sessions.len() >= limit {
            break;
        }
        if !skip.contains(&session) && !sessions.contains(&session) {
            sessions.push(session);
        }
    }
    Ok(sessions)
}

/// The earliest `ready_at` among the `Ready` rows of `scope`.
fn earliest_ready(tx: &Connection, scope: &Scope) -> Result<Option<i64>, StoreError> {
    let mut earliest: Option<i64> = None;
    for consumer in &scope.consumers {
        let found: Option<i64> = match &scope.sessions {
            None => tx
                .prepare_cached(
                    "SELECT MIN(ready_at) FROM work INDEXED BY work_ready \
                     WHERE consumer = ?1 AND ready_at IS NOT NULL",
                )
                .and_then(|mut stmt| stmt.query_row([consumer], |row| row.get(0))),
            Some(sessions) => tx
                .prepare_cached(
                    "SELECT MIN(ready_at) FROM work \
                     WHERE session IN (SELECT value FROM json_each(?1)) AND consumer = ?2 \
                     AND ready_at IS NOT NULL",
                )
                .and_then(|mut stmt| {
                    stmt.query_row((Json(sessions), consumer), |row| row.get(0))
                }),
        }
        .ctx("finding the earliest work")?;
        earliest = match (earliest, found) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(earliest)
}
