//! Rules of the log itself: which events a log cursor takes, the bounds of
//! a read, and the clear marker.

use crate::error::{Result, StoreError};
use crate::types::{
    ClearRequest, ClearResult, ConsumerDeclaration, Cursor, CursorKind, Dispatch, LogDeclaration,
    NewEvent, ReadOptions, StateWrite, StoredEvent, CLEAR_EVENT_TYPE,
};
use crate::Payload;

/// Whether a log cursor taking `types` (`None`: all) takes `event_type`.
/// The clear marker is never taken.
pub fn takes(types: Option<&[String]>, event_type: &str) -> bool {
    event_type != CLEAR_EVENT_TYPE
        && types.is_none_or(|types| types.iter().any(|t| t == event_type))
}

/// Whether a completion naming incarnation `requested` of a session whose
/// incarnation is `current` (`None`: the session does not exist) refreshes
/// the `types` of the existing log cursors its declarations name. Every
/// completion that succeeds does (applied, replayed, superseded, at or
/// below the clear, without a cursor) except one naming another
/// incarnation of the session ([`incarnation_current`]): it is superseded
/// before any declaration is looked at and changes nothing, so the log
/// cursors of a session recreated under the same id keep their types. A
/// completion that fails changes nothing either (its backend rolls the
/// refresh back with the rest).
///
/// [`incarnation_current`]: crate::retention::incarnation_current
pub fn completion_refreshes_types(requested: Option<u64>, current: Option<u64>) -> bool {
    crate::retention::incarnation_current(requested, current)
}

/// The idle log cursor `wake_log` returns on a session with nothing after
/// its clear (`marker`: the clear index, 0 when never cleared).
pub fn idle_log_cursor(consumer: &ConsumerDeclaration, marker: u64) -> Cursor {
    let log = consumer.log.as_ref();
    Cursor {
        consumer: consumer.name.clone(),
        lane: log.map(|log| log.lane.clone()),
        kind: CursorKind::Log,
        position: marker,
        head: None,
        types: log.and_then(|log| log.types.clone()),
        dispatch: Dispatch::default(),
        pause: None,
    }
}

/// The `(after, through)` bounds of a read against `head`; `through < after` is invalid.
pub fn read_bounds(options: &ReadOptions, head: u64) -> Result<(u64, u64)> {
    let after = options.after.unwrap_or(0);
    if let Some(through) = options.through {
        if through < after {
            return Err(StoreError::invalid_input(format!(
                "read through {through} is below after {after}: through must be at least after"
            )));
        }
    }
    Ok((after, options.through.unwrap_or(head).min(head)))
}

impl LogDeclaration {
    /// Where a log cursor created now starts: at the clear (`clear_index`)
    /// with `backfill`, else at the log `head` before this call, so it takes
    /// only events appended from now on. With `backfill` its first head is
    /// the next taken event after the clear; without, the first taken event
    /// of the batch being appended (none for `wake_log`).
    pub fn start_position(&self, clear_index: u64, head: u64) -> u64 {
        if self.backfill {
            clear_index
        } else {
            head
        }
    }
}

impl StateWrite {
    /// Whether a snapshot write is cached in a session whose clear index is
    /// `clear_index`: one folded through an index below the clear describes
    /// cleared history and is dropped silently.
    pub fn kept(&self, clear_index: u64) -> bool {
        self.index >= clear_index
    }
}

impl ClearRequest {
    /// The answer of a clear whose `if_last_index` does not match the
    /// session's `head`: `Some(NotCleared { head })`, nothing changes.
    /// `None`: go on and clear.
    pub fn unmet_condition(&self, head: u64) -> Option<ClearResult> {
        self.if_last_index
            .is_some_and(|expected| expected != head)
            .then_some(ClearResult::NotCleared { head })
    }
}

impl NewEvent {
    /// The `a2.cleared` marker a clear appends: no id (one is generated),
    /// a `null` payload, no cause, no targets.
    pub fn clear_marker() -> Self {
        Self {
            id: None,
            event_type: CLEAR_EVENT_TYPE.to_owned(),
            payload: Payload::default(),
            cause: None,
            targets: Vec::new(),
        }
    }
}

impl StoredEvent {
    /// The stored `a2.cleared` marker of `session_id` at `index` with the
    /// generated `id`, written at `created_at`.
    pub fn clear_marker(session_id: &str, id: String, index: u64, created_at: i64) -> Self {
        Self {
            id,
            event_type: CLEAR_EVENT_TYPE.to_owned(),
            payload: Payload::default(),
            index,
            session_id: session_id.to_owned(),
            created_at,
            cause: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_never_the_clear_marker() {
        assert!(takes(None, "msg"));
        assert!(!takes(None, CLEAR_EVENT_TYPE));
        let types = vec!["a".to_owned()];
        assert!(takes(Some(&types), "a"));
        assert!(!takes(Some(&types), "b"));
    }

    #[test]
    fn completions_of_another_incarnation_refresh_no_types() {
        assert!(completion_refreshes_types(None, Some(2)));
        assert!(completion_refreshes_types(Some(2), Some(2)));
        assert!(completion_refreshes_types(Some(1), None));
        assert!(!completion_refreshes_types(Some(1), Some(2)));
    }

    #[test]
    fn read_bounds_reject_through_below_after() {
        let bad = ReadOptions {
            after: Some(5),
            through: Some(4),
            limit: None,
        };
        assert!(read_bounds(&bad, 10).is_err());
        assert_eq!(read_bounds(&ReadOptions::default(), 10).unwrap(), (0, 10));
        let past = ReadOptions {
            after: Some(2),
            through: Some(40),
            limit: None,
        };
        assert_eq!(read_bounds(&past, 10).unwrap(), (2, 10));
    }

    #[test]
    fn clear_conditions_and_markers() {
        let request = ClearRequest {
            incarnation: None,
            session_id: "s".into(),
            if_last_index: Some(3),
            cause: None,
        };
        assert_eq!(request.unmet_condition(3), None);
        assert_eq!(
            request.unmet_condition(4),
            Some(ClearResult::NotCleared { head: 4 })
        );
        let log = LogDeclaration {
            lane: "L".into(),
            types: None,
            backfill: true,
        };
        assert_eq!(log.start_position(3, 9), 3);
        let log = LogDeclaration {
            backfill: false,
            ..log
        };
        assert_eq!(log.start_position(3, 9), 9);
        let write = StateWrite {
            index: 3,
            state: serde_json::json!(1),
            pins: Vec::new(),
        };
        assert!(write.kept(3) && !write.kept(4));
        let marker = StoredEvent::clear_marker("s", "id".into(), 5, 9);
        assert_eq!(marker.event_type, CLEAR_EVENT_TYPE);
        assert_eq!(NewEvent::clear_marker().payload, marker.payload);
    }
}
