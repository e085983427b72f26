//! The job a handler is given: the claimed head and a context to write and
//! read the session under the attempt's fence.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, AppendResult, Cause, ConsumerDeclaration, ErrorCode, Head, NewEvent,
    ReadOptions, Result, Store, StoredEvent,
};
use tokio::sync::{Mutex, Notify};

use crate::ids::{assign_ids, output_id, OutputKind};

/// Tells a handler that its lease is lost: another attempt may run the head,
/// and this attempt's completion will be superseded (never applied).
///
/// Clones share the flag. The worker sets it when a renewal reports the
/// claim superseded or no longer held.
#[derive(Debug, Clone)]
pub struct LeaseToken {
    state: Arc<LeaseState>,
}

#[derive(Debug, Default)]
struct LeaseState {
    lost: AtomicBool,
    changed: Notify,
}

impl Default for LeaseToken {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaseToken {
    /// A token for a lease not lost.
    pub fn new() -> Self {
        Self {
            state: Arc::new(LeaseState::default()),
        }
    }

    /// Whether the lease was lost.
    pub fn is_lost(&self) -> bool {
        self.state.lost.load(Ordering::Acquire)
    }

    /// Resolves once the lease is lost (at once if it already is); pending
    /// forever otherwise, so use it in a `select!` beside the work.
    pub async fn lost(&self) {
        loop {
            let changed = self.state.changed.notified();
            tokio::pin!(changed);
            // Registered before the flag is read, so a loss in between still wakes it.
            changed.as_mut().enable();
            if self.is_lost() {
                return;
            }
            changed.await;
        }
    }

    /// Marks the lease lost and wakes every waiter.
    pub(crate) fn mark_lost(&self) {
        self.state.lost.store(true, Ordering::Release);
        self.state.changed.notify_waiters();
    }
}

/// How many times a store call hit by a transient error (`Busy`, `Backend`)
/// is made in all, and the pause before the first repeat (doubled after each).
const TRANSIENT_TRIES: u32 = 4;
const TRANSIENT_PAUSE: Duration = Duration::from_millis(50);

/// How long a call answered `Unavailable` (the backend unreachable: a
/// failover, a partition) keeps being repeated, and the longest pause
/// between repeats: a failover takes seconds, and the work of the attempt
/// is kept if its completion gets through meanwhile (it is fenced, so a
/// late one is answered superseded, never applied twice).
const UNAVAILABLE_FOR: Duration = Duration::from_secs(20);
const UNAVAILABLE_MAX_PAUSE: Duration = Duration::from_secs(1);

/// Whether a store error may go away when the same call is made again.
pub(crate) fn is_transient(code: ErrorCode) -> bool {
    code.is_retryable() || code == ErrorCode::Backend
}

/// Runs `call` until it succeeds, fails with a non-transient error, or has
/// been made [`TRANSIENT_TRIES`] times (pausing 50, 100, 200 ms between);
/// while it answers `Unavailable`, for up to [`UNAVAILABLE_FOR`] (pauses
/// doubling up to [`UNAVAILABLE_MAX_PAUSE`]). Only for calls that are
/// idempotent when repeated.
pub(crate) async fn with_transient_retry<T, F, Fut>(mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = TRANSIENT_PAUSE;
    let mut tries = 1;
    let started = tokio::time::Instant::now();
    loop {
        match call().await {
            Err(error)
                if error.code() == ErrorCode::Unavailable
                    && started.elapsed() + pause < UNAVAILABLE_FOR =>
            {
                tracing::debug!(target: "a2_worker", error = %error, tries, "store unavailable; repeating the call");
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2).min(UNAVAILABLE_MAX_PAUSE);
                tries += 1;
            }
            Err(error) if tries < TRANSIENT_TRIES && is_transient(error.code()) => {
                tracing::debug!(target: "a2_worker", error = %error, tries, "transient store error; repeating the call");
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2);
                tries += 1;
            }
            other => return other,
        }
    }
}

struct JobInner {
    session_id: String,
    head: Head,
    cause: Cause,
    store: Arc<dyn Store>,
    consumers: Arc<[ConsumerDeclaration]>,
    lease: LeaseToken,
    /// Events appended through [`Job::append`] so far: the position of the next one.
    appended: Mutex<u64>,
}

impl std::fmt::Debug for JobInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("session_id", &self.session_id)
            .field("cause", &self.cause)
            .field("lease_lost", &self.lease.is_lost())
            .finish_non_exhaustive()
    }
}

/// One attempt of a claimed head, as a handler sees it.
///
/// Cheap to clone (clones share the attempt), so a handler may hand it to
/// tasks of its own; everything it writes is fenced by the attempt.
#[derive(Debug, Clone)]
pub struct Job {
    inner: Arc<JobInner>,
}

impl Job {
    pub(crate) fn new(
        session_id: String,
        head: Head,
        store: Arc<dyn Store>,
        consumers: Arc<[ConsumerDeclaration]>,
        lease: LeaseToken,
    ) -> Self {
        let cause = Cause {
            consumer: head.consumer.clone(),
            lane: head.lane.clone(),
            index: head.event.index,
            attempt: head.dispatch.attempt_count,
        };
        Self {
            inner: Arc::new(JobInner {
                session_id,
                head,
                cause,
                store,
                consumers,
                lease,
                appended: Mutex::new(0),
            }),
        }
    }

    /// The session of the head.
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    /// The claimed head as the store returned it (event, cursor, bookkeeping).
    pub fn head(&self) -> &Head {
        &self.inner.head
    }

    /// The event to process.
    pub fn event(&self) -> &StoredEvent {
        &self.inner.head.event
    }

    /// The consumer the head belongs to.
    pub fn consumer(&self) -> &str {
        &self.inner.head.consumer
    }

    /// The head's lane, `None` for an event cursor.
    pub fn lane(&self) -> Option<&str> {
        self.inner.head.lane.as_deref()
    }

    /// The head's log index.
    pub fn index(&self) -> u64 {
        self.inner.head.event.index
    }

    /// This attempt's number (1-based).
    pub fn attempt(&self) -> u32 {
        self.inner.cause.attempt
    }

    /// Failures the store counted for this head before this attempt.
    pub fn failures(&self) -> u32 {
        self.inner.head.dispatch.failure_count
    }

    /// The cause this attempt's events carry: `(consumer, lane, index, attempt)`.
    pub fn cause(&self) -> &Cause {
        &self.inner.cause
    }

    /// The lease token: [`LeaseToken::is_lost`] / [`LeaseToken::lost`] tell
    /// the handler when to stop early.
    pub fn lease(&self) -> &LeaseToken {
        &self.inner.lease
    }

    /// Whether the lease is lost (this attempt can no longer complete).
    pub fn is_lease_lost(&self) -> bool {
        self.inner.lease.is_lost()
    }

    /// The store, for calls the job's helpers do not cover. Writes made
    /// through it are not fenced unless they carry [`cause`](Self::cause).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The deterministic id of the returned event at `position`; the worker
    /// gives it to returned events without an id (see [`ids`](crate::ids)).
    pub fn returned_id(&self, position: u64) -> String {
        output_id(
            &self.inner.session_id,
            &self.inner.cause,
            OutputKind::Returned,
            position,
        )
    }

    /// Appends `events` to the session now, fenced by this attempt: events
    /// without a cause get [`cause`](Self::cause), so the append fails with
    /// `SupersededAttempt` once the attempt is no longer current. Events
    /// without an id get the deterministic id of their position among this
    /// attempt's appended events, and transient errors are retried with the
    /// same ids, so a retried append is a replay, never a second copy.
    ///
    /// Positions advance only when an append succeeds: after an error,
    /// appending the same events again is safe (a replay if the first call
    /// was stored after all). Appends of one job run one at a time.
    /// Declarations the worker serves go with the append.
    pub async fn append(&self, mut events: Vec<NewEvent>) -> Result<AppendResult> {
        let inner = &self.inner;
        let mut appended = inner.appended.lock().await;
        for event in &mut events {
            if event.cause.is_none() {
                event.cause = Some(inner.cause.clone());
            }
        }
        assign_ids(
            &mut events,
            &inner.session_id,
            &inner.cause,
            OutputKind::Appended,
            *appended,
        );
        let count = u64::try_from(events.len()).unwrap_or(u64::MAX);
        let options = AppendOptions {
            consumers: Some(inner.consumers.to_vec()),
            origin_index: None,
        };
        let result = with_transient_retry(|| {
            inner
                .store
                .append(&inner.session_id, events.clone(), options.clone())
        })
        .await?;
        *appended = appended.saturating_add(count);
        Ok(result)
    }

    /// Reads the session's stored events (`after < index <= through`),
    /// retrying transient errors.
    pub async fn read(&self, options: ReadOptions) -> Result<Vec<StoredEvent>> {
        let inner = &self.inner;
        with_transient_retry(|| inner.store.read(&inner.session_id, options)).await
    }

    /// Every event before the head, oldest first (the session so far).
    pub async fn history(&self) -> Result<Vec<StoredEvent>> {
        let through = self.index().saturating_sub(1);
        self.read(ReadOptions {
            after: None,
            through: Some(through),
            limit: None,
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::StoreError;
    use std::sync::atomic::AtomicU32;

    /// A failover answers `Unavailable` for seconds: the call is repeated
    /// for [`UNAVAILABLE_FOR`] (pauses capped), then its error is returned.
    #[tokio::test(start_paused = true)]
    async fn unavailable_is_repeated_through_a_failover_then_given_up() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let result: Result<u32> = with_transient_retry(|| {
            let call = calls.fetch_add(1, Ordering::SeqCst);
            let elapsed = started.elapsed();
            async move {
                if elapsed < Duration::from_secs(5) {
                    Err(StoreError::unavailable(
                        "promoting",
                        std::io::Error::other("refused"),
                    ))
                } else {
                    Ok(call)
                }
            }
        })
        .await;
        assert!(result.is_ok(), "the call got through after the failover");
        assert!(
            started.elapsed() < Duration::from_secs(7),
            "{:?}",
            started.elapsed()
        );

        calls.store(0, Ordering::SeqCst);
        let started = tokio::time::Instant::now();
        let result: Result<()> = with_transient_retry(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async {
                Err(StoreError::unavailable(
                    "down",
                    std::io::Error::other("refused"),
                ))
            }
        })
        .await;
        assert_eq!(result.unwrap_err().code(), ErrorCode::Unavailable);
        assert!(
            started.elapsed() <= UNAVAILABLE_FOR,
            "{:?}",
            started.elapsed()
        );
        assert!(calls.load(Ordering::SeqCst) > TRANSIENT_TRIES);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_are_retried_a_bounded_number_of_times() {
        let calls = AtomicU32::new(0);
        let result: Result<()> = with_transient_retry(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async {
                Err(StoreError::Backend {
                    message: "connection reset".into(),
                    source: None,
                })
            }
        })
        .await;
        assert_eq!(result.unwrap_err().code(), ErrorCode::Backend);
        assert_eq!(calls.load(Ordering::SeqCst), TRANSIENT_TRIES);

        calls.store(0, Ordering::SeqCst);
        let result: Result<()> = with_transient_retry(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(StoreError::invalid_input("bad")) }
        })
        .await;
        assert_eq!(result.unwrap_err().code(), ErrorCode::InvalidInput);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "not transient: made once");

        calls.store(0, Ordering::SeqCst);
        let result = with_transient_retry(|| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(StoreError::Backend {
                        message: "reset".into(),
                        source: None,
                    })
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 2);
    }

    #[tokio::test]
    async fn lease_token_wakes_waiters_once_lost() {
        let token = LeaseToken::new();
        assert!(!token.is_lost());
        let waiter = tokio::spawn({
            let token = token.clone();
            async move { token.lost().await }
        });
        tokio::task::yield_now().await;
        token.mark_lost();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(token.is_lost());
        token.lost().await;
    }
}
