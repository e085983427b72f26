//! Client-side bounds on every call: the server's `statement_timeout`
//! cannot end a call whose connection stopped carrying packets (a silent
//! partition, a stalled proxy, a server host gone without a reset), so each
//! call also runs under a deadline of its own
//! ([`PostgresOptions::call_bound`](crate::PostgresOptions::call_bound)).
//! A call past it fails with `Unavailable` and its connection is closed,
//! never handed to another call: whatever it was waiting for may still
//! arrive on it.

use std::time::Duration;

use a2_store_api::{Result, StoreError};
use deadpool_postgres::Object;
use futures::future::BoxFuture;

use crate::inner::Inner;

/// The error of a call that got no answer within `bound`.
pub(crate) fn no_answer(what: &str, bound: Duration) -> StoreError {
    StoreError::Unavailable {
        message: format!(
            "{what}: PostgreSQL did not answer within {} ms (the pool wait + statement_timeout_ms + network_timeout_ms): the network or the server stopped responding, and the connection was closed — retry the call; if it was cut off at its commit the call may have been applied, and repeating it is safe",
            bound.as_millis()
        ),
        source: None,
    }
}

/// Closes a pooled connection instead of returning it to the pool: a call
/// on it timed out, so the connection may still owe answers (or be dead).
pub(crate) fn discard(client: Object) {
    drop(Object::take(client));
}

/// Runs `work` on a pooled connection within the store's call bound:
/// `Unavailable` past it (the connection closed, not pooled again), the
/// pool's own error when no connection comes.
pub(crate) async fn on_connection<T, F>(inner: &Inner, what: &str, work: F) -> Result<T>
where
    F: for<'c> FnOnce(&'c Object) -> BoxFuture<'c, Result<T>>,
{
    let bound = inner.call_bound;
    let deadline = tokio::time::Instant::now() + bound;
    let client = tokio::time::timeout_at(deadline, inner.pool.get())
        .await
        .map_err(|_| no_answer(what, bound))?
        .map_err(|e| crate::error::pool_error(what, e))?;
    let done = tokio::time::timeout_at(deadline, work(&client)).await;
    match done {
        Ok(outcome) => outcome,
        Err(_) => {
            discard(client);
            Err(no_answer(what, bound))
        }
    }
}

/// Settings every connection of a store gets from
/// [`PostgresOptions::network_timeout`](crate::PostgresOptions::network_timeout),
/// unless the URL set them: TCP keepalives (first probe after half the
/// timeout), the TCP user timeout (unacknowledged data for this long ends
/// the connection) and the time to open a connection to each host, so a
/// host that drops packets costs at most this before the next host of a
/// multi-host URL is tried.
pub(crate) fn apply_network_timeout(config: &mut tokio_postgres::Config, network: Duration) {
    let network = network.max(Duration::from_millis(1));
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(network);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(network);
    }
    if config.get_keepalives() && config.get_keepalives_idle() == DRIVER_KEEPALIVE_IDLE {
        config.keepalives_idle((network / 2).max(Duration::from_secs(1)));
        config.keepalives_interval((network / 4).max(Duration::from_secs(1)));
        config.keepalives_retries(2);
    }
}

/// tokio-postgres's default first-probe delay (2 hours), i.e. the URL did
/// not set `keepalives_idle`.
const DRIVER_KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_timeout_fills_what_the_url_left_out() {
        let mut config: tokio_postgres::Config =
            "postgres://u@h1:5432,h2:5433/db?connect_timeout=3"
                .parse()
                .unwrap();
        apply_network_timeout(&mut config, Duration::from_secs(10));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(10))
        );
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(5));
        let mut plain: tokio_postgres::Config = "postgres://u@h/db".parse().unwrap();
        apply_network_timeout(&mut plain, Duration::from_secs(4));
        assert_eq!(plain.get_connect_timeout(), Some(&Duration::from_secs(4)));
        assert_eq!(plain.get_keepalives_idle(), Duration::from_secs(2));
    }

    #[test]
    fn the_error_is_retryable_and_names_the_bound() {
        let error = no_answer("claiming work", Duration::from_millis(6000));
        assert!(error.is_retryable());
        assert!(error.to_string().contains("6000 ms"), "{error}");
    }
}
