//! `transact!`: every store call's transaction, run again after a
//! deadlock or serialization failure (up to `MAX_RETRIES` times), and once
//! at once when a guess about a row it decided on was out of date.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Runs `$body` (which uses `$tx`) in a transaction on a pooled connection,
/// committing when it returns `Ok`, rolling back otherwise (and waiting for
/// the rollback before answering or retrying), and running it again after a
/// deadlock or serialization failure; all of it within the store's call
/// bound, past which the call fails with `Unavailable` and its connection is
/// closed (`crate::deadline`).
/// `transact!(inner, what, deadline = at, |tx| body)` answers by `at` (a
/// call that spent part of its bound before its transaction).
macro_rules! transact {
    ($inner:expr, $what:expr, |$tx:ident| $body:expr) => {{
        let inner: &$crate::inner::Inner = &$inner;
        transact!(
            inner,
            $what,
            deadline = tokio::time::Instant::now() + inner.call_bound,
            |$tx| $body
        )
    }};
    ($inner:expr, $what:expr, deadline = $deadline:expr, |$tx:ident| $body:expr) => {{
        let inner: &$crate::inner::Inner = &$inner;
        let what: &str = $what;
        let mut tries: u32 = 0;
        let mut missed = false;
        // The call's client-side bound (see `crate::deadline`): retries
        // included, it answers by then.
        let deadline: tokio::time::Instant = $deadline;
        loop {
            let client = match tokio::time::timeout_at(deadline, inner.pool.get()).await {
                Ok(got) => got.map_err(|e| $crate::error::pool_error(what, e))?,
                Err(_) => break Err($crate::deadline::no_answer(what, inner.call_bound)),
            };
            let attempt = tokio::time::timeout_at(deadline, async {
                let $tx = $crate::db::Tx::new(&client);
                let outcome: std::result::Result<_, $crate::error::TxError> = async {
                    let value = $body;
                    $tx.commit().await?;
                    Ok(value)
                }
                .await;
                // A failed call answers only once its transaction has ended
                // on the server: its row locks are gone before its caller
                // (or its own retry, on another connection) claims again.
                match outcome {
                    Ok(value) => Ok(value),
                    Err(error) => {
                        // A connection that cannot even roll back is broken:
                        // the server ends the transaction as it closes, and
                        // the call's own error is the one to report.
                        let _ = $tx.end().await;
                        Err(error)
                    }
                }
            })
            .await;
            let outcome: std::result::Result<_, $crate::error::TxError> = match attempt {
                Ok(outcome) => outcome,
                Err(_) => {
                    // No answer in time: the connection may still owe one.
                    $crate::deadline::discard(client);
                    break Err($crate::deadline::no_answer(what, inner.call_bound));
                }
            };
            match outcome {
                Ok(value) => break Ok::<_, a2_store_api::StoreError>(value),
                // A guess about a row was out of date (it is forgotten): at
                // once, and once only.
                Err(error) if error.missed_guess() && !missed => {
                    missed = true;
                    drop(client);
                }
                Err(error) if error.retryable() && tries < $crate::store::MAX_RETRIES => {
                    tries += 1;
                    drop(client);
                    tokio::time::sleep($crate::transact::backoff(tries)).await;
                }
                Err(error) => break Err(error.into_store(what)),
            }
        }
    }};
}

/// A short randomized pause before retry `tries` (1-based): up to 2^tries ms.
pub(crate) fn backoff(tries: u32) -> Duration {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(tries);
    let cap = 1_u64 << tries.min(8);
    Duration::from_millis(1 + hasher.finish() % cap)
}
