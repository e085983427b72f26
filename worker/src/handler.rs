//! Handlers: what a worker runs for each claimed head.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use a2_store_api::NewEvent;
use async_trait::async_trait;

use crate::job::Job;

/// What a handler answers: the events the completion stores (with the
/// attempt as their cause), or why the attempt failed.
pub type HandlerResult = Result<Vec<NewEvent>, HandlerError>;

/// Processes one claimed head.
///
/// The worker calls [`handle`](Self::handle) once per attempt, in a task of
/// its own: a panic is a failed attempt (retried like a retryable error),
/// never a dead worker. Returned events without an id get deterministic ids
/// (see [`ids`](crate::ids)); the worker completes the head with them.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt of `job`'s head.
    async fn handle(&self, job: Job) -> HandlerResult;
}

/// A [`Handler`] made from an async closure by [`handler_fn`].
#[derive(Clone)]
pub struct FnHandler<F>(F);

impl<F> fmt::Debug for FnHandler<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnHandler")
    }
}

/// A handler from an async function of the job:
///
/// ```
/// use a2_worker::{handler_fn, HandlerError, Job};
/// use a2_store_api::NewEvent;
///
/// let echo = handler_fn(|job: Job| async move {
///     if job.event().event_type != "msg" {
///         return Err(HandlerError::permanent("only messages"));
///     }
///     Ok(vec![NewEvent::new("reply", job.event().payload.clone())])
/// });
/// # let _ = echo;
/// ```
pub fn handler_fn<F, Fut>(f: F) -> FnHandler<F>
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    FnHandler(f)
}

#[async_trait]
impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    async fn handle(&self, job: Job) -> HandlerResult {
        (self.0)(job).await
    }
}

/// Whether a failed attempt is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// Retried after the policy's delay (or the error's own), until the
    /// policy's `max_failures` dead-letters the head.
    Retryable,
    /// Dead-lettered at once.
    Permanent,
}

/// Why a handler's attempt failed: its text is recorded as the head's
/// `last_error`.
///
/// Any `std::error::Error` converts into a retryable `HandlerError`, so `?`
/// works in handlers; use [`permanent`](Self::permanent) for input that can
/// never succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    kind: FailureKind,
    message: String,
    retry_after: Option<Duration>,
}

impl HandlerError {
    /// A retryable failure, retried after the policy's delay.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            kind: FailureKind::Retryable,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A retryable failure, retried after `delay` instead of the policy's
    /// (still dead-lettered at `max_failures`).
    pub fn retry_after(message: impl Into<String>, delay: Duration) -> Self {
        Self {
            kind: FailureKind::Retryable,
            message: message.into(),
            retry_after: Some(delay),
        }
    }

    /// A failure no retry can fix: the head is dead-lettered at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            kind: FailureKind::Permanent,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Retryable or permanent.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// Whether the head is dead-lettered at once.
    pub fn is_permanent(&self) -> bool {
        self.kind == FailureKind::Permanent
    }

    /// The error text recorded with the failure.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The delay asked for instead of the policy's, if any.
    pub fn delay(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E> From<E> for HandlerError
where
    E: std::error::Error + Send + Sync + 'static,
{
    /// A retryable failure whose text is the error and its sources, joined by `: `.
    fn from(error: E) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::retryable(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("calling the model")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn errors_convert_to_retryable_with_their_sources() {
        let error: HandlerError = Outer(std::io::Error::other("reset")).into();
        assert_eq!(error.kind(), FailureKind::Retryable);
        assert_eq!(error.message(), "calling the model: reset");
        assert_eq!(error.delay(), None);
        let later = HandlerError::retry_after("rate limited", Duration::from_secs(7));
        assert_eq!(later.delay(), Some(Duration::from_secs(7)));
        assert!(HandlerError::permanent("bad input").is_permanent());
        assert_eq!(
            HandlerError::permanent("bad input").to_string(),
            "bad input"
        );
    }
}
