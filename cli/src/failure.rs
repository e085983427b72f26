//! What went wrong, as the one line the user sees, and the exit status.

use std::fmt;

use a2_store::{ErrorCode, StoreError};

/// Exit status when `check` found a failing case.
pub const EXIT_CHECK_FAILED: u8 = 1;
/// Exit status of every error (bad arguments, unreachable store, failed call).
pub const EXIT_ERROR: u8 = 2;

/// A failure of a command: one line saying what went wrong and what to do.
#[derive(Debug)]
pub struct Failure {
    message: String,
}

impl Failure {
    /// A failure with `message` (flattened to one line when shown).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// A store call `doing` (e.g. "reading the log of session 's'") failed
    /// with `error` in the store at `url`; adds what to do when the error
    /// has a remedy it does not already state.
    pub fn store(url: &str, doing: &str, error: &StoreError) -> Self {
        let text = chain(error);
        let hint = match error.code() {
            ErrorCode::IncompatibleSchema if text.contains("newer") || text.contains("older") => "",
            ErrorCode::IncompatibleSchema => {
                " — the database was written by a newer a2-store: upgrade this tool to open it"
            }
            // The pool's own message names the URL keys to raise.
            ErrorCode::Busy if text.contains("pool_timeout_ms") => "",
            ErrorCode::Busy => {
                " — another process holds the database locked: retry, or raise ?busy_timeout_ms= in the URL"
            }
            ErrorCode::StorageFull => " — free disk space and retry",
            // The message says the server is unreachable and to retry.
            ErrorCode::Unavailable if url.starts_with("postgres") => {
                " — check that the server is up and the URL's hosts and ports (list every server of a failover pair with target_session_attrs=read-write)"
            }
            // TLS failures say what to change about TLS themselves.
            ErrorCode::Backend if text.contains("TLS") => "",
            ErrorCode::Backend if url.starts_with("postgres") => {
                " — check that the server is up and the URL's host, port, user and database"
            }
            ErrorCode::Backend => " — check the URL, the path and its permissions",
            _ => "",
        };
        Self::new(format!("{doing} in '{url}': {text}{hint}"))
    }
}

impl fmt::Display for Failure {
    /// The message on one line: line breaks become spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one_line: Vec<&str> = self.message.split_whitespace().collect();
        f.write_str(&one_line.join(" "))
    }
}

impl std::error::Error for Failure {}

/// An error and its sources joined with `: `, skipping a source whose text
/// the outer message already holds.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_show_on_one_line() {
        let failure = Failure::new("first\nsecond  third\r\n");
        assert_eq!(failure.to_string(), "first second third");
    }

    #[test]
    fn store_failures_keep_the_source_and_say_what_to_do() {
        let error = StoreError::backend("opening db", std::io::Error::other("permission denied"));
        let text = Failure::store("sqlite:x.db", "opening the store", &error).to_string();
        assert!(
            text.starts_with(
                "opening the store in 'sqlite:x.db': backend failure: opening db: permission denied"
            ),
            "{text}"
        );
        assert!(text.contains("permissions"), "{text}");
        let schema = StoreError::IncompatibleSchema {
            message: "schema 9, this build knows 1".into(),
        };
        let text = Failure::store("sqlite:x.db", "opening the store", &schema).to_string();
        assert!(text.contains("upgrade"), "{text}");
        let stated = StoreError::IncompatibleSchema {
            message: "schema 9 is newer than 1: open it with a newer build".into(),
        };
        let text = Failure::store("sqlite:x.db", "opening the store", &stated).to_string();
        assert!(!text.contains("upgrade this tool"), "{text}");
    }
}
