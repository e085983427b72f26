//! Helpers every backend shares: input validation, idempotent replay,
//! orderings, and the JSON/integer encodings SQL backends store.
//!
//! Backends call these instead of rewriting them, so every backend rejects
//! the same input with the same code and message.

use std::cmp::Ordering;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Result, StoreError};
use crate::types::{
    ConsumerDeclaration, Cursor, CursorKind, CursorRef, Dispatch, FailOutcome, FailRequest,
    FailResult, Head, NewEvent, ReadOptions, StoredEvent, CLEAR_EVENT_TYPE,
};

/// Rejects an empty session id.
pub fn validate_session_id(session_id: &str) -> Result<()> {
    if session_id.is_empty() {
        return Err(StoreError::invalid_input(
            "session id is empty: name the session with a non-empty string",
        ));
    }
    Ok(())
}

/// Rejects an empty name of `what` (a holder, consumer, reducer, participant...).
pub fn validate_name(what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(StoreError::invalid_input(format!(
            "{what} is empty: pass a non-empty string"
        )));
    }
    Ok(())
}

/// Validates a batch: non-empty types and ids, non-empty target names, no
/// `a2.cleared` events (only `clear` appends markers), and no id twice.
pub fn validate_new_events(events: &[NewEvent]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (position, event) in events.iter().enumerate() {
        if event.event_type.is_empty() {
            return Err(StoreError::invalid_input(format!(
                "event {position} of the batch has an empty type"
            )));
        }
        if event.event_type == CLEAR_EVENT_TYPE {
            return Err(StoreError::invalid_input(format!(
                "event {position} of the batch has the reserved type '{CLEAR_EVENT_TYPE}': use clear() to clear a session"
            )));
        }
        if let Some(id) = &event.id {
            if id.is_empty() {
                return Err(StoreError::invalid_input(format!(
                    "event {position} of the batch has an empty id: omit it to have one generated"
                )));
            }
            if !seen.insert(id.as_str()) {
                return Err(StoreError::partial_duplicate(format!(
                    "batch contains the event id '{id}' more than once"
                )));
            }
        }
        for target in &event.targets {
            validate_name("target consumer", &target.consumer)?;
            if target.lane.as_deref() == Some("") {
                return Err(StoreError::invalid_input(format!(
                    "event {position} targets consumer '{}' on an empty lane: omit the lane for an event cursor",
                    target.consumer
                )));
            }
        }
        if let Some(cause) = &event.cause {
            validate_name("cause consumer", &cause.consumer)?;
        }
        if too_deep(&event.payload) {
            return Err(StoreError::invalid_input(format!(
                "event {position} of the batch has a payload nested more than {MAX_JSON_DEPTH} arrays/objects deep"
            )));
        }
    }
    Ok(())
}

/// The deepest nesting of arrays and objects a stored JSON value may have
/// (`[]` is 1 level, `[[]]` 2, a scalar 0). `serde_json` reads back at most
/// 127 levels; 100 leaves room for a backend that wraps a value in a document.
pub const MAX_JSON_DEPTH: usize = 100;

/// Rejects a JSON value nested deeper than [`MAX_JSON_DEPTH`] as invalid
/// input. Walks the value with an explicit stack (no recursion), so any depth
/// is checked without growing the call stack.
pub fn validate_json_depth(what: &str, value: &serde_json::Value) -> Result<()> {
    if too_deep(value) {
        return Err(StoreError::invalid_input(format!(
            "{what} is nested more than {MAX_JSON_DEPTH} arrays/objects deep"
        )));
    }
    Ok(())
}

/// Validates reducer states before a `write_state`: none nested deeper than
/// [`MAX_JSON_DEPTH`].
pub fn validate_state_writes(writes: &[crate::StateWrite]) -> Result<()> {
    writes
        .iter()
        .try_for_each(|write| validate_json_depth("reducer state", &write.state))
}

/// Validates presence values before a `set_presence`: none nested deeper
/// than [`MAX_JSON_DEPTH`].
pub fn validate_presence_values(
    values: &std::collections::BTreeMap<String, serde_json::Value>,
) -> Result<()> {
    values
        .values()
        .try_for_each(|value| validate_json_depth("presence value", value))
}

/// Whether `value` nests deeper than [`MAX_JSON_DEPTH`]; iterative, and free
/// for scalars.
fn too_deep(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    let mut pending: Vec<(&Value, usize)> = Vec::new();
    let mut next = Some((value, 0));
    while let Some((value, depth)) = next.take().or_else(|| pending.pop()) {
        let depth = depth + 1;
        match value {
            Value::Array(items) => {
                if depth > MAX_JSON_DEPTH {
                    return true;
                }
                pending.extend(items.iter().map(|child| (child, depth)));
            }
            Value::Object(fields) => {
                if depth > MAX_JSON_DEPTH {
                    return true;
                }
                pending.extend(fields.values().map(|child| (child, depth)));
            }
            _ => {}
        }
    }
    false
}

/// Validates consumer declarations: non-empty names, each name declared
/// once (identical repeats allowed), log lanes non-empty, and no target in
/// `events` naming a lane declared as a log lane.
pub fn validate_consumers(
    consumers: Option<&[ConsumerDeclaration]>,
    events: &[NewEvent],
) -> Result<()> {
    let Some(consumers) = consumers else {
        return Ok(());
    };
    for (position, consumer) in consumers.iter().enumerate() {
        validate_name("consumer name", &consumer.name)?;
        let redeclared = consumers[..position]
            .iter()
            .any(|earlier| earlier.name == consumer.name && earlier != consumer);
        if redeclared {
            return Err(StoreError::invalid_input(format!(
                "consumer '{}' is declared twice with different declarations: declare each consumer once",
                consumer.name
            )));
        }
        let Some(log) = &consumer.log else { continue };
        if log.lane.is_empty() {
            return Err(StoreError::invalid_input(format!(
                "log consumer '{}' has no lane: a log consumer always has a lane",
                consumer.name
            )));
        }
        let clash = events
            .iter()
            .flat_map(|event| &event.targets)
            .any(|target| {
                target.consumer == consumer.name && target.lane.as_deref() == Some(&log.lane)
            });
        if clash {
            return Err(lane_conflict(&consumer.name, &log.lane));
        }
    }
    Ok(())
}

/// The error for a `(consumer, lane)` used both as a log lane and a target lane.
pub fn lane_conflict(consumer: &str, lane: &str) -> StoreError {
    StoreError::invalid_input(format!(
        "lane '{lane}' of consumer '{consumer}' is used both as a log lane and as a target lane: give targeted work a different lane"
    ))
}

/// A log declaration of `consumer`, or an `InvalidInput` error when it has none.
pub fn log_declaration(consumer: &ConsumerDeclaration) -> Result<&crate::LogDeclaration> {
    validate_name("consumer name", &consumer.name)?;
    match &consumer.log {
        Some(log) if !log.lane.is_empty() => Ok(log),
        _ => Err(StoreError::invalid_input(format!(
            "consumer '{}' is not a log consumer: declare `log` with a lane",
            consumer.name
        ))),
    }
}

/// The lease expiry from exactly one of `ttl_ms` (positive) and `expires_at_ms`.
pub fn lease_expiry(now_ms: i64, ttl_ms: Option<i64>, expires_at_ms: Option<i64>) -> Result<i64> {
    match (ttl_ms, expires_at_ms) {
        (Some(_), Some(_)) => Err(StoreError::invalid_input(
            "both ttl_ms and expires_at_ms given: pass exactly one",
        )),
        (None, None) => Err(StoreError::invalid_input(
            "neither ttl_ms nor expires_at_ms given: pass exactly one",
        )),
        (Some(ttl), None) if ttl <= 0 => Err(StoreError::invalid_input(format!(
            "ttl_ms must be positive, got {ttl}"
        ))),
        (Some(ttl), None) => Ok(now_ms.saturating_add(ttl)),
        (None, Some(expires)) => Ok(expires),
    }
}

/// Rejects a negative retry delay.
pub fn validate_retry_after(retry_after_ms: Option<i64>) -> Result<()> {
    match retry_after_ms {
        Some(delay) if delay < 0 => Err(StoreError::invalid_input(format!(
            "retry_after_ms must not be negative, got {delay}"
        ))),
        _ => Ok(()),
    }
}

/// What a `fail_attempt` naming `attempt` does to a cursor whose bookkeeping
/// is `dispatch` (`on_head`: the cursor is still on the failed index).
/// `Some(result)` answers without a change: superseded, an idempotent repeat,
/// or an already dead-lettered head; `None` means record the failure with
/// [`record_failure`].
pub fn fail_verdict(dispatch: &Dispatch, on_head: bool, attempt: u32) -> Option<FailResult> {
    let released = dispatch.claim_holder.is_none();
    let repeat = released && dispatch.last_failed_attempt == Some(attempt);
    if !on_head || dispatch.attempt_count != attempt || (released && !repeat) {
        return Some(FailResult {
            outcome: FailOutcome::Superseded,
            failure_count: if on_head { dispatch.failure_count } else { 0 },
        });
    }
    if repeat || dispatch.failed_at.is_some() {
        let outcome = if dispatch.failed_at.is_some() {
            FailOutcome::DeadLettered
        } else {
            FailOutcome::Failed
        };
        return Some(FailResult {
            outcome,
            failure_count: dispatch.failure_count,
        });
    }
    None
}

/// Records the failure `request` describes at `now_ms` on `dispatch`: counted,
/// error kept, holder released, retry delay or dead letter (`failed_at` set,
/// no delay) at `max_failures`.
pub fn record_failure(dispatch: &mut Dispatch, request: &FailRequest, now_ms: i64) -> FailResult {
    dispatch.failure_count = dispatch.failure_count.saturating_add(1);
    dispatch.last_error = Some(request.error.clone());
    dispatch.last_failed_at = Some(now_ms);
    dispatch.last_failed_attempt = Some(request.attempt);
    dispatch.claim_holder = None;
    let dead = request
        .max_failures
        .is_some_and(|max| dispatch.failure_count >= max);
    dispatch.claim_expires_at = match request.retry_after_ms {
        Some(delay) if !dead => Some(now_ms.saturating_add(delay)),
        _ => None,
    };
    if dead {
        dispatch.failed_at = Some(now_ms);
    }
    FailResult {
        outcome: if dead {
            FailOutcome::DeadLettered
        } else {
            FailOutcome::Failed
        },
        failure_count: dispatch.failure_count,
    }
}

/// Rejects a presence TTL that is not positive.
pub fn validate_presence_ttl(ttl_ms: i64) -> Result<()> {
    if ttl_ms <= 0 {
        return Err(StoreError::invalid_input(format!(
            "presence ttl_ms must be positive, got {ttl_ms}"
        )));
    }
    Ok(())
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

/// Idempotent replay of a batch whose every id is stored: `stored[i]` is the
/// row owning `events[i].id`. Same type and payload required, else
/// `IdempotencyConflict`. Returns the stored rows in the batch's order.
pub fn idempotent_replay(
    events: &[NewEvent],
    stored: Vec<StoredEvent>,
) -> Result<Vec<StoredEvent>> {
    for (event, row) in events.iter().zip(&stored) {
        if event.event_type != row.event_type || event.payload != row.payload {
            return Err(StoreError::idempotency_conflict(format!(
                "event id '{}' is stored at index {} with a different type or payload",
                row.id, row.index
            )));
        }
    }
    Ok(stored)
}

/// Whether a log cursor taking `types` (`None`: all) takes `event_type`.
/// The clear marker is never taken.
pub fn takes(types: Option<&[String]>, event_type: &str) -> bool {
    event_type != CLEAR_EVENT_TYPE
        && types.is_none_or(|types| types.iter().any(|t| t == event_type))
}

/// The idle log cursor `wake_log` returns on a session with nothing after its clear.
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
    }
}

/// Order of claimed and dead-lettered heads: index, consumer, lane (`None` first).
pub fn compare_heads(a: &Head, b: &Head) -> Ordering {
    a.event
        .index
        .cmp(&b.event.index)
        .then_with(|| a.consumer.cmp(&b.consumer))
        .then_with(|| a.lane.cmp(&b.lane))
}

/// Order of renew results: index, consumer, lane (`None` first).
pub fn compare_refs(a: &CursorRef, b: &CursorRef) -> Ordering {
    a.index
        .cmp(&b.index)
        .then_with(|| a.consumer.cmp(&b.consumer))
        .then_with(|| a.lane.cmp(&b.lane))
}

/// Order of `cursors()`: consumer, then lane cursors by lane name, then
/// laneless event cursors by head.
pub fn compare_cursors(a: &Cursor, b: &Cursor) -> Ordering {
    a.consumer
        .cmp(&b.consumer)
        .then_with(|| match (&a.lane, &b.lane) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => a.head.cmp(&b.head),
        })
}

/// Whether a presence write at `at` beats the stored entry (`None`: no entry).
/// Later `at` wins, an equal `at` lets the newer call win, and an expired
/// entry never blocks a write.
pub fn presence_write_wins(existing: Option<(i64, i64)>, at: i64, now_ms: i64) -> bool {
    match existing {
        None => true,
        Some((existing_at, expires_at)) => expires_at <= now_ms || existing_at <= at,
    }
}

/// JSON text of a value a SQL backend stores (causes, targets, type lists, payloads).
pub fn encode_json<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|source| StoreError::backend("encoding a value as JSON", source))
}

/// Decodes JSON text a SQL backend stored; a failure means a corrupt row.
pub fn decode_json<T: DeserializeOwned>(what: &str, text: &str) -> Result<T> {
    serde_json::from_str(text)
        .map_err(|source| StoreError::backend(format!("corrupt {what} in the database"), source))
}

/// A log index or count as a SQL `BIGINT`; values beyond `i64::MAX` are invalid input.
pub fn to_sql_int(what: &str, value: u64) -> Result<i64> {
    i64::try_from(value)
        .map_err(|_| StoreError::invalid_input(format!("{what} {value} is out of range")))
}

/// A SQL `BIGINT` read back as an index or count; a negative value means a corrupt row.
pub fn from_sql_int(what: &str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|source| {
        StoreError::backend(format!("corrupt {what} {value} in the database"), source)
    })
}

/// A SQL integer read back as an attempt or failure count.
pub fn from_sql_count(what: &str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|source| {
        StoreError::backend(format!("corrupt {what} {value} in the database"), source)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Target;
    use crate::ErrorCode;
    use serde_json::json;

    #[test]
    fn json_depth_is_checked_without_recursion() {
        let nested = |levels: usize| {
            let mut value = json!([]);
            for _ in 1..levels {
                value = serde_json::Value::Array(vec![value]);
            }
            value
        };
        assert!(validate_json_depth("v", &json!(1)).is_ok());
        assert!(validate_json_depth("v", &nested(MAX_JSON_DEPTH)).is_ok());
        let text = serde_json::to_string(&nested(MAX_JSON_DEPTH)).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
        let error = validate_json_depth("v", &nested(MAX_JSON_DEPTH + 1)).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        let mut wrapped = serde_json::Map::new();
        wrapped.insert(
            "a".to_owned(),
            serde_json::Value::Array(vec![json!(1), nested(10_000)]),
        );
        let wrapped = serde_json::Value::Object(wrapped);
        assert!(validate_json_depth("v", &wrapped).is_err());
        let event = NewEvent::new("t", nested(MAX_JSON_DEPTH + 1));
        assert_eq!(
            validate_new_events(&[event]).unwrap_err().code(),
            ErrorCode::InvalidInput
        );
    }

    #[test]
    fn lease_needs_exactly_one_positive_bound() {
        assert_eq!(lease_expiry(10, Some(5), None).unwrap(), 15);
        assert_eq!(lease_expiry(10, None, Some(3)).unwrap(), 3);
        for (ttl, exp) in [
            (None, None),
            (Some(1), Some(1)),
            (Some(0), None),
            (Some(-1), None),
        ] {
            assert_eq!(
                lease_expiry(10, ttl, exp).unwrap_err().code(),
                ErrorCode::InvalidInput
            );
        }
    }

    #[test]
    fn batches_are_validated() {
        let ok = NewEvent::new("msg", json!(1)).with_id("a");
        assert!(validate_new_events(std::slice::from_ref(&ok)).is_ok());
        let twice = [ok.clone(), ok.clone()];
        assert_eq!(
            validate_new_events(&twice).unwrap_err().code(),
            ErrorCode::PartialDuplicateBatch
        );
        let empty_type = [NewEvent::new("", json!(1))];
        assert_eq!(
            validate_new_events(&empty_type).unwrap_err().code(),
            ErrorCode::InvalidInput
        );
        let twice = [
            ConsumerDeclaration::log("c", "L", None, false),
            ConsumerDeclaration::log("c", "L", Some(vec!["a".into()]), false),
        ];
        assert_eq!(
            validate_consumers(Some(&twice), &[]).unwrap_err().code(),
            ErrorCode::InvalidInput
        );
        let same = [twice[0].clone(), twice[0].clone()];
        assert!(validate_consumers(Some(&same), &[]).is_ok());
        let consumers = [ConsumerDeclaration::log("c", "L", None, false)];
        let clash = [NewEvent::new("msg", json!(1)).with_target(Target::lane("c", "L"))];
        assert_eq!(
            validate_consumers(Some(&consumers), &clash)
                .unwrap_err()
                .code(),
            ErrorCode::InvalidInput
        );
    }

    #[test]
    fn replay_requires_same_type_and_payload() {
        let event = NewEvent::new("msg", json!({"a": 1})).with_id("x");
        let row = StoredEvent {
            id: "x".into(),
            event_type: "msg".into(),
            payload: json!({"a": 1}).into(),
            index: 1,
            session_id: "s".into(),
            created_at: 0,
            cause: None,
        };
        assert!(idempotent_replay(std::slice::from_ref(&event), vec![row.clone()]).is_ok());
        let mut other = row;
        other.payload = json!({"a": 2}).into();
        assert_eq!(
            idempotent_replay(&[event], vec![other]).unwrap_err().code(),
            ErrorCode::IdempotencyConflict
        );
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
    }

    #[test]
    fn presence_last_writer_wins() {
        assert!(presence_write_wins(None, 1, 0));
        assert!(presence_write_wins(Some((5, 100)), 5, 0));
        assert!(!presence_write_wins(Some((6, 100)), 5, 0));
        assert!(presence_write_wins(Some((6, 100)), 5, 100));
    }

    #[test]
    fn takes_never_the_clear_marker() {
        assert!(takes(None, "msg"));
        assert!(!takes(None, CLEAR_EVENT_TYPE));
        let types = vec!["a".to_owned()];
        assert!(takes(Some(&types), "a"));
        assert!(!takes(Some(&types), "b"));
    }
}
