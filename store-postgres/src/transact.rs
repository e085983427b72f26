//! `transact!`: every store call's transaction, run again after a
//! deadlock or serialization failure (up to `MAX_RETRIES` times), and once
//! at once when a guess about a row it decided on was out of date.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Runs `$body` (which uses `$tx`) in a transaction on a pooled connection,
/// committing when it returns `Ok`, rolling back otherwise (and waiting for
/// the rollback before answering or retrying), and running it again after a
/// deadlock or serialization failure.
macro_rules! transact {
    ($inner:expr, $what:expr, |$tx:ident| $body:expr) => {{
        let inner: &$crate::inner::Inner = &$inner;
        let what: &str = $what;
        let mut tries: u32 = 0;
        let mut missed = false;
        loop {
            let client = inner
                .pool
                .get()
                .await
                .map_err(|e| $crate::error::pool_error(what, e))?;
            let outcome: std::result::Result<_, $crate::error::TxError> = {
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
