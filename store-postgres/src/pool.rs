//! The connection pool: its size, how many connections it keeps open, how
//! long a call waits for a connection, and how long a connection may live
//! or sit unused.
//!
//! Timeouts are deadpool's own (`wait`, `create`, `recycle`, run on the
//! tokio runtime). The `min_idle` connections are opened ahead of need and
//! warmed ([`crate::warm`]) before they are handed out; connections opened
//! on demand are not (a call waiting for one would wait for its warm-up
//! too, and the cold statements' costs spread over its first calls are the
//! smaller tail). Idle and lifetime limits are enforced twice, each where
//! it is exact: a `pre_recycle` hook refuses to hand out a connection past
//! either limit (deadpool then takes another or opens a new one), so no
//! call ever runs on one; and a keeper task closes connections past them,
//! so the server sees them go without waiting for the next call, and opens
//! connections up to `min_idle` again whenever the pool is idle (a kept
//! connection past a limit is so replaced by a fresh one). The keeper holds
//! the pool weakly and ends once the pool is gone.

use std::time::Duration;

use a2_store_api::{Result, StoreError};
use deadpool_postgres::{Hook, HookError, Manager, Metrics, Object, Pool};

use crate::options::PostgresOptions;

/// The shortest pause between two passes of the keeper.
const MIN_REAP_INTERVAL: Duration = Duration::from_millis(100);

/// The longest pause between two passes of the keeper when it keeps
/// connections open.
const KEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Builds the pool of `options.pool_size` connections with the options'
/// timeouts and limits, and starts its keeper when a limit is set or
/// connections are kept open.
pub(crate) fn build(manager: Manager, options: &PostgresOptions) -> Result<Pool> {
    let limits = Limits {
        idle: options.idle_timeout,
        lifetime: options.max_lifetime,
    };
    let read_only = options.read_only;
    let bound = options.call_bound();
    let mut builder = Pool::builder(manager)
        .max_size(options.pool_size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        // Past these the call fails with `Busy` instead of hanging.
        .wait_timeout(Some(
            options.pool_timeout.unwrap_or(options.statement_timeout),
        ))
        .create_timeout(Some(options.statement_timeout))
        .recycle_timeout(Some(options.statement_timeout));
    if read_only {
        // Every transaction of a read-only store is read-only on the server.
        builder = builder.post_create(Hook::async_fn(|client, _| {
            Box::pin(async move {
                client
                    .batch_execute("SET default_transaction_read_only = on")
                    .await
                    .map_err(HookError::Backend)
            })
        }));
    }
    if limits.any() {
        builder = builder.pre_recycle(Hook::sync_fn(move |_, metrics| {
            if limits.expired(metrics) {
                Err(HookError::message(
                    "the connection passed idle_timeout_ms or max_lifetime_ms",
                ))
            } else {
                Ok(())
            }
        }));
    }
    let pool = builder
        .build()
        .map_err(|error| StoreError::backend("building the connection pool", error))?;
    let keep = options.min_idle.min(options.pool_size);
    if let Some(interval) = limits.keeper_interval(keep) {
        let weak = pool.weak();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(pool) = weak.upgrade() else { break };
                // Dropping the removed clients closes their connections.
                // Closed connections (the server ended them) go too, when
                // connections are kept open, so they are replaced.
                drop(pool.retain(|client, metrics| {
                    !limits.expired(&metrics) && (keep == 0 || !client.is_closed())
                }));
                let status = pool.status();
                if status.size < keep && status.available == status.size {
                    // Best effort: a failure here is the next call's to report.
                    let _ = fill(&pool, keep, read_only, bound).await;
                }
            }
        });
    }
    Ok(pool)
}

/// Opens connections until the pool holds `count`, by taking `count` at
/// once and handing them back, and warms the ones it opened
/// ([`crate::warm`]; `read_only`: the store's), each within `bound` (the
/// store's call bound). A connection whose warm-up failed or got no answer
/// is closed, not handed back. Errors as a call's would be.
pub(crate) async fn fill(
    pool: &Pool,
    count: usize,
    read_only: bool,
    bound: Duration,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    let doing = "opening the pool's connections";
    let taken = futures::future::try_join_all((0..count).map(|_| pool.get()))
        .await
        .map_err(|error| crate::error::pool_error(doing, error))?;
    let warmed = futures::future::join_all(taken.into_iter().map(|client| async move {
        if Object::metrics(&client).recycle_count > 0 {
            return Ok(());
        }
        match tokio::time::timeout(bound, crate::warm::warm(&client, read_only)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                // Its session may be left inside the warm-up's transaction.
                drop(Object::take(client));
                Err(crate::error::db_error(doing, error))
            }
            Err(_) => {
                // No answer: the connection may still owe one.
                crate::deadline::discard(client);
                Err(crate::deadline::no_answer(doing, bound))
            }
        }
    }))
    .await;
    for outcome in warmed {
        outcome?;
    }
    Ok(())
}

/// How long a pooled connection may sit unused and live in all.
#[derive(Debug, Clone, Copy)]
struct Limits {
    idle: Option<Duration>,
    lifetime: Option<Duration>,
}

impl Limits {
    fn any(&self) -> bool {
        self.idle.is_some() || self.lifetime.is_some()
    }

    /// Whether a connection is past a limit: unused (not handed out) for
    /// longer than the idle timeout, or older than the lifetime.
    fn expired(&self, metrics: &Metrics) -> bool {
        self.idle.is_some_and(|idle| metrics.last_used() >= idle)
            || self.lifetime.is_some_and(|life| metrics.age() >= life)
    }

    /// How often the reaper looks: half the shorter limit, at least
    /// [`MIN_REAP_INTERVAL`]; `None` when no limit is set.
    fn reap_interval(&self) -> Option<Duration> {
        let shortest = match (self.idle, self.lifetime) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        Some((shortest / 2).max(MIN_REAP_INTERVAL))
    }

    /// How often the keeper looks: as the reaper, or every
    /// [`KEEP_INTERVAL`] (at most) when connections are kept open (`keep`
    /// above 0); `None` when there is nothing to do.
    fn keeper_interval(&self, keep: usize) -> Option<Duration> {
        match (self.reap_interval(), keep > 0) {
            (Some(reap), true) => Some(reap.min(KEEP_INTERVAL)),
            (Some(reap), false) => Some(reap),
            (None, true) => Some(KEEP_INTERVAL),
            (None, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaper_runs_at_half_the_shorter_limit() {
        let none = Limits {
            idle: None,
            lifetime: None,
        };
        assert_eq!(none.reap_interval(), None);
        assert!(!none.any());
        let both = Limits {
            idle: Some(Duration::from_secs(10)),
            lifetime: Some(Duration::from_secs(4)),
        };
        assert_eq!(both.reap_interval(), Some(Duration::from_secs(2)));
        let tiny = Limits {
            idle: Some(Duration::from_millis(10)),
            lifetime: None,
        };
        assert_eq!(tiny.reap_interval(), Some(MIN_REAP_INTERVAL));
    }

    #[test]
    fn limits_expire_connections() {
        let fresh = Metrics::default();
        let limits = Limits {
            idle: Some(Duration::from_secs(60)),
            lifetime: Some(Duration::from_secs(60)),
        };
        assert!(!limits.expired(&fresh));
        let zero = Limits {
            idle: None,
            lifetime: Some(Duration::ZERO),
        };
        assert!(zero.expired(&fresh));
    }
}
