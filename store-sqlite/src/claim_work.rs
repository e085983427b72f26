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
use a2_store_api::pause::hold;
use a2_store_api::work::{WorkSignal, WorkSource};
use a2_store_api::{ClaimRequest, ClaimResult, ClaimWorkRequest, Clock, Hold, Pause, StoreError};
use async_trait::async_trait;
use rusqlite::Connection;

use crate::claims;
use crate::errors::SqlContext;
use crate::pause;
use crate::pool::{Access, Pool};
use crate::values::{Json, SqlLimit};
use crate::wake::{WorkWake, FALLBACK_POLL};
use crate::writer::Fire;
use crate::SqliteStore;

/// A served consumer's rows ready at `?2`, not in the JSON list `?3` and
/// not paused in their session at `?2`, in fairness order, at most `?4`: a
/// range of `work_ready` (a pause is one primary-key probe).
const READY: &str = "SELECT session, ready_at FROM work INDEXED BY work_ready \
     WHERE consumer = ?1 AND ready_at IS NOT NULL AND ready_at <= ?2 \
     AND session NOT IN (SELECT value FROM json_each(?3)) \
     AND NOT EXISTS (SELECT 1 FROM pauses AS p WHERE p.consumer = ?1 \
     AND p.session = work.session AND (p.until_ms IS NULL OR p.until_ms > ?2)) \
     ORDER BY ready_at, session LIMIT ?4";

/// A served consumer's (`?2`) rows ready at `?3` in the listed sessions
/// (the JSON list `?1`): one primary-key lookup per listed session (the
/// list drives the join; `NOT INDEXED` keeps SQLite from reading the
/// consumer's whole `work_ready` range instead).
const READY_LISTED: &str = "SELECT w.session, w.ready_at \
     FROM json_each(?1) AS l CROSS JOIN work AS w NOT INDEXED \
     WHERE w.session = l.value AND w.consumer = ?2 \
     AND w.ready_at IS NOT NULL AND w.ready_at <= ?3 \
     AND NOT EXISTS (SELECT 1 FROM pauses AS p WHERE p.consumer = ?2 \
     AND p.session = w.session AND (p.until_ms IS NULL OR p.until_ms > ?3))";

/// A served consumer's earliest `Ready` row: the first entry of its
/// `work_ready` range.
const EARLIEST: &str = "SELECT MIN(ready_at) FROM work INDEXED BY work_ready \
     WHERE consumer = ?1 AND ready_at IS NOT NULL";

/// A served consumer's (`?2`) `Ready` rows in the listed sessions (the
/// JSON list `?1`), by primary key as [`READY_LISTED`].
const EARLIEST_LISTED: &str = "SELECT w.session, w.ready_at \
     FROM json_each(?1) AS l CROSS JOIN work AS w NOT INDEXED \
     WHERE w.session = l.value AND w.consumer = ?2 AND w.ready_at IS NOT NULL";

/// A served consumer's `Ready` rows in fairness order, read while some of
/// its sessions are paused: the walk stops at the first row it cannot beat.
const EARLIEST_WALK: &str = "SELECT session, ready_at FROM work INDEXED BY work_ready \
     WHERE consumer = ?1 AND ready_at IS NOT NULL ORDER BY ready_at, session";

/// A consumer's pauses in single sessions (not the store-wide one).
const SESSION_PAUSES: &str = "SELECT consumer, session, until_ms, paused_at FROM pauses \
     WHERE consumer = ?1 AND session <> ''";

/// One store's work index and claims, as the shared loop uses them.
pub(crate) struct Work<'a> {
    /// The store (its writes).
    pub store: &'a SqliteStore,
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
        self.store
            .write(move |tx, ctx| Ok((claims::claim(tx, ctx, &request)?, Fire::NONE)))
            .await
    }

    async fn earliest_ready(&self, request: &ClaimWorkRequest) -> Result<Option<i64>, StoreError> {
        let scope = Scope::of(request);
        let now = self.clock().now_ms();
        self.pool
            .run(Access::Read, move |tx, _| earliest_ready(tx, &scope, now))
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
        // Paused in every session: none of its rows is served now.
        let everywhere: Vec<Pause> = pause::everywhere(tx, consumer)?.into_iter().collect();
        // (A store-wide pause covers every session name, `""` included.)
        if hold(&everywhere, consumer, "", now).is_held() {
            continue;
        }
        let found: Vec<(String, i64)> = match &scope.sessions {
            None => tx.prepare_cached(READY).and_then(|mut stmt| {
                stmt.query_map(
                    (consumer, now, Json(&skipped), SqlLimit(Some(limit))),
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )?
                .collect()
            }),
            Some(sessions) => tx.prepare_cached(READY_LISTED).and_then(|mut stmt| {
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

/// The earliest time a claim of `scope` may find work, as of `now`: the
/// earliest `ready_at` among its `Ready` rows, where a pair paused until
/// resumed does not count and one paused until a time counts from then
/// (`pause::hold`).
fn earliest_ready(tx: &Connection, scope: &Scope, now: i64) -> Result<Option<i64>, StoreError> {
    let mut earliest: Option<i64> = None;
    for consumer in &scope.consumers {
        let everywhere: Vec<Pause> = pause::everywhere(tx, consumer)?.into_iter().collect();
        // The store-wide pause holds every session alike: the consumer's
        // earliest is the later of its end and the rest's earliest.
        let wide = hold(&everywhere, consumer, "", now);
        if wide.hides() {
            continue;
        }
        let found = earliest_of(tx, scope, consumer, now)?;
        let found = match wide {
            Hold::Until(until) => found.map(|at| at.max(until)),
            _ => found,
        };
        earliest = match (earliest, found) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(earliest)
}

/// The earliest `ready_at` of `consumer`'s rows in `scope` under the
/// consumer's pauses in single sessions, at `now`.
fn earliest_of(
    tx: &Connection,
    scope: &Scope,
    consumer: &str,
    now: i64,
) -> Result<Option<i64>, StoreError> {
    let mut paused: Vec<Pause> = tx
        .prepare_cached(SESSION_PAUSES)
        .and_then(|mut stmt| {
            stmt.query_map([consumer], |row| {
                let session: String = row.get(1)?;
                Ok(Pause::new(
                    row.get::<_, String>(0)?,
                    Some(session),
                    row.get(2)?,
                    row.get(3)?,
                ))
            })?
            .collect()
        })
        .ctx("reading pauses")?;
    paused.retain(|pause| pause.in_force(now));
    // When a pair becomes claimable for the loop: never while held open-ended.
    let effective = |session: &str, ready_at: i64| -> Option<i64> {
        match hold(&paused, consumer, session, now) {
            Hold::Free => Some(ready_at),
            Hold::Until(until) => Some(ready_at.max(until)),
            Hold::Indefinite => None,
        }
    };
    let mut earliest: Option<i64> = None;
    match &scope.sessions {
        None if paused.is_empty() => {
            earliest = tx
                .prepare_cached(EARLIEST)
                .and_then(|mut stmt| stmt.query_row([consumer], |row| row.get(0)))
                .ctx("finding the earliest work")?;
        }
        None => {
            let mut stmt = tx
                .prepare_cached(EARLIEST_WALK)
                .ctx("finding the earliest work")?;
            let mut rows = stmt.query([consumer]).ctx("finding the earliest work")?;
            while let Some(row) = rows.next().ctx("finding the earliest work")? {
                let session: String = row.get(0).ctx("finding the earliest work")?;
                let ready_at: i64 = row.get(1).ctx("finding the earliest work")?;
                // Rows come by `ready_at`, and none counts before its own.
                if earliest.is_some_and(|best| ready_at >= best) {
                    break;
                }
                if let Some(at) = effective(&session, ready_at) {
                    earliest = Some(earliest.map_or(at, |best| best.min(at)));
                }
            }
        }
        Some(sessions) => {
            let rows: Vec<(String, i64)> = tx
                .prepare_cached(EARLIEST_LISTED)
                .and_then(|mut stmt| {
                    stmt.query_map((Json(sessions), consumer), |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })?
                    .collect()
                })
                .ctx("finding the earliest work")?;
            for (session, ready_at) in rows {
                if let Some(at) = effective(&session, ready_at) {
                    earliest = Some(earliest.map_or(at, |best| best.min(at)));
                }
            }
        }
    }
    Ok(earliest)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::schema::query_plan as plan;

    #[test]
    fn finding_work_reads_index_ranges_only() {
        let ready = plan(READY);
        assert!(
            ready.contains(
                "work USING COVERING INDEX work_ready (consumer=? AND ready_at>? AND ready_at<?)"
            ),
            "{ready}"
        );
        assert!(!ready.contains("TEMP B-TREE"), "no sort: {ready}");
        for sql in [EARLIEST, EARLIEST_WALK] {
            let earliest = plan(sql);
            assert!(
                earliest.contains("USING COVERING INDEX work_ready"),
                "{earliest}"
            );
            assert!(!earliest.contains("TEMP B-TREE"), "no sort: {earliest}");
        }
        for listed in [READY_LISTED, EARLIEST_LISTED] {
            let shown = plan(listed);
            assert!(
                shown.contains("SEARCH w USING PRIMARY KEY (session=? AND consumer=?)"),
                "{shown}"
            );
        }
        for sql in [
            READY,
            READY_LISTED,
            EARLIEST,
            EARLIEST_LISTED,
            EARLIEST_WALK,
        ] {
            let shown = plan(sql);
            assert!(
                !shown.contains("SCAN work") && !shown.contains("SCAN w "),
                "no scan of the work table: {shown}"
            );
        }
    }
}
