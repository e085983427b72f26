//! Input validation: one function per [`Store`](crate::Store) method, named
//! after it, that every backend calls once at the top of that method, before
//! any other work. A request these accept may still be refused by a rule that
//! needs stored state (a lane conflict, a read past the head); a request they
//! refuse changes nothing.
//!
//! The checks each function runs are the building blocks below
//! ([`session_id`], [`name`], [`new_events`], [`consumers`], ...), in a fixed
//! order, so every backend answers the same bad input with the same code and
//! message.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::retention::{DeleteSessionRequest, PruneRequest, MAX_PRUNE_LIMIT};
use crate::rewrite::{RewritePayloadsRequest, MAX_REWRITE_ITEMS};
use crate::types::{
    AppendOptions, BulkRedrive, ClaimRequest, ClaimWorkRequest, ClearRequest, CompleteRequest,
    ConsumerDeclaration, FailRequest, ForkRequest, ListWork, LogDeclaration, NewEvent,
    PauseRequest, PresenceMeta, ReadOptions, RedriveRequest, RenewRequest, RescheduleRequest,
    ResumeRequest, ScheduleChange, StateWrite, CLEAR_EVENT_TYPE, MAX_WAIT_MS, MAX_WORK_LIMIT,
};

/// The deepest nesting of arrays and objects a stored JSON value may have
/// (`[]` is 1 level, `[[]]` 2, a scalar 0). `serde_json` reads back at most
/// 127 levels; 100 leaves room for a backend that wraps a value in a document.
pub const MAX_JSON_DEPTH: usize = 100;

/// [`Store::append`](crate::Store::append): the session id, the batch and
/// the declarations it is appended with.
pub fn append(session_id: &str, events: &[NewEvent], options: &AppendOptions) -> Result<()> {
    self::session_id(session_id)?;
    new_events(events)?;
    consumers(options.consumers.as_deref(), events)
}

/// [`Store::claim_available`](crate::Store::claim_available): session, holder,
/// declarations, exactly one positive lease bound, and a limit of at least 1.
pub fn claim_available(request: &ClaimRequest) -> Result<()> {
    session_id(&request.session_id)?;
    name("holder", &request.holder)?;
    consumers(request.consumers.as_deref(), &[])?;
    request.lease_expiry(0)?;
    if request.limit == Some(0) {
        return Err(StoreError::invalid_input(
            "claim limit is 0: pass at least 1, or no limit",
        ));
    }
    Ok(())
}

/// [`Store::claim_work`](crate::Store::claim_work): holder, at least one
/// consumer declaration, exactly one positive lease bound, a session list of
/// 1 to [`MAX_WORK_LIMIT`] ids, limits of 1 to [`MAX_WORK_LIMIT`], and a
/// wait of 1 to [`MAX_WAIT_MS`] ms.
pub fn claim_work(request: &ClaimWorkRequest) -> Result<()> {
    name("holder", &request.holder)?;
    if request.consumers.is_empty() {
        return Err(StoreError::invalid_input(
            "no consumers given: a cross-session claim serves at least one consumer",
        ));
    }
    consumers(Some(&request.consumers), &[])?;
    request.lease_expiry(0)?;
    if let Some(sessions) = &request.sessions {
        session_list(sessions)?;
    }
    work_limit("limit", request.limit)?;
    work_limit("session_limit", request.session_limit)?;
    work_limit("per_session_limit", request.per_session_limit)?;
    match request.wait_ms {
        Some(wait) if wait <= 0 => Err(StoreError::invalid_input(format!(
            "wait_ms must be positive, got {wait}: pass 1 to {MAX_WAIT_MS}, or no wait"
        ))),
        Some(wait) if wait > MAX_WAIT_MS => Err(StoreError::invalid_input(format!(
            "wait_ms {wait} is longer than the longest wait, {MAX_WAIT_MS} ms: wait again instead"
        ))),
        _ => Ok(()),
    }
}

/// [`Store::list_work`](crate::Store::list_work): at least one consumer name,
/// none empty, and a page size of 1 to [`MAX_WORK_LIMIT`].
pub fn list_work(request: &ListWork) -> Result<()> {
    if request.consumers.is_empty() {
        return Err(StoreError::invalid_input(
            "no consumers given: name the consumers whose work to list",
        ));
    }
    for consumer in &request.consumers {
        name("consumer name", consumer)?;
    }
    work_limit("limit", request.limit)
}

/// A list of sessions to serve: 1 to [`MAX_WORK_LIMIT`] ids, none empty.
pub fn session_list(sessions: &[String]) -> Result<()> {
    if sessions.is_empty() {
        return Err(StoreError::invalid_input(
            "the session list is empty: name at least one session, or pass no list to serve every session",
        ));
    }
    if sessions.len() > MAX_WORK_LIMIT {
        return Err(StoreError::invalid_input(format!(
            "the session list has {} ids, more than {MAX_WORK_LIMIT}: split it",
            sessions.len()
        )));
    }
    sessions.iter().try_for_each(|id| session_id(id))
}

/// A cross-session limit named `what`: `None`, or 1 to [`MAX_WORK_LIMIT`].
pub fn work_limit(what: &str, limit: Option<usize>) -> Result<()> {
    match limit {
        Some(0) => Err(StoreError::invalid_input(format!(
            "{what} is 0: pass 1 to {MAX_WORK_LIMIT}, or leave it out"
        ))),
        Some(limit) if limit > MAX_WORK_LIMIT => Err(StoreError::invalid_input(format!(
            "{what} {limit} is more than {MAX_WORK_LIMIT}: pass 1 to {MAX_WORK_LIMIT}"
        ))),
        _ => Ok(()),
    }
}

/// [`Store::renew_claims`](crate::Store::renew_claims): session, holder and
/// exactly one positive lease bound.
pub fn renew_claims(request: &RenewRequest) -> Result<()> {
    session_id(&request.session_id)?;
    name("holder", &request.holder)?;
    request.lease_expiry(0).map(|_| ())
}

/// [`Store::complete_attempt`](crate::Store::complete_attempt): session,
/// consumer, the returned batch and its declarations.
pub fn complete_attempt(request: &CompleteRequest) -> Result<()> {
    session_id(&request.session_id)?;
    name("consumer name", &request.consumer)?;
    new_events(&request.events)?;
    consumers(request.consumers.as_deref(), &request.events)
}

/// [`Store::fail_attempt`](crate::Store::fail_attempt): session, consumer
/// and a retry delay that is not negative.
pub fn fail_attempt(request: &FailRequest) -> Result<()> {
    session_id(&request.session_id)?;
    name("consumer name", &request.consumer)?;
    retry_after(request.retry_after_ms)
}

/// [`Store::dead_letters`](crate::Store::dead_letters): the session id.
pub fn dead_letters(session_id: &str) -> Result<()> {
    self::session_id(session_id)
}

/// [`Store::redrive`](crate::Store::redrive): session, consumer, a lane
/// that is not empty when given, and declarations.
pub fn redrive(request: &RedriveRequest) -> Result<()> {
    session_id(&request.session_id)?;
    name("consumer name", &request.consumer)?;
    lane(request.lane.as_deref())?;
    consumers(request.consumers.as_deref(), &[])
}

/// [`Store::redrive_all`](crate::Store::redrive_all): filters that are not
/// empty when given, a time window that is not empty, and a limit of 1 to
/// [`MAX_WORK_LIMIT`].
pub fn redrive_all(request: &BulkRedrive) -> Result<()> {
    if let Some(consumer) = &request.consumer {
        name("consumer name", consumer)?;
    }
    if let Some(session) = &request.session_id {
        session_id(session)?;
    }
    lane(request.lane.as_deref())?;
    if let (Some(since), Some(before)) = (request.dead_since_ms, request.dead_before_ms) {
        if since >= before {
            return Err(StoreError::invalid_input(format!(
                "dead_since_ms {since} is not before dead_before_ms {before}: the window holds nothing"
            )));
        }
    }
    work_limit("bulk redrive limit", request.limit)
}

/// [`Store::reschedule`](crate::Store::reschedule): session, consumer, a
/// lane that is not empty when given, a time that is not negative, and the
/// fencing cause's consumer.
pub fn reschedule(request: &RescheduleRequest) -> Result<()> {
    session_id(&request.session_id)?;
    name("consumer name", &request.consumer)?;
    lane(request.lane.as_deref())?;
    if let ScheduleChange::To(at) = request.change {
        at.check()?;
    }
    if let Some(cause) = &request.cause {
        name("cause consumer", &cause.consumer)?;
    }
    Ok(())
}

/// [`Store::pause`](crate::Store::pause): the consumer, the session when
/// given, and an end that is not negative (one in the past is refused by
/// [`PauseRequest::pause_at`]).
pub fn pause(request: &PauseRequest) -> Result<()> {
    name("consumer name", &request.consumer)?;
    if let Some(session) = &request.session_id {
        session_id(session)?;
    }
    if let Some(until) = request.until_ms.filter(|until| *until < 0) {
        return Err(StoreError::invalid_input(format!(
            "pause until_ms must not be negative, got {until}"
        )));
    }
    Ok(())
}

/// [`Store::resume`](crate::Store::resume): the consumer and the session when given.
pub fn resume(request: &ResumeRequest) -> Result<()> {
    name("consumer name", &request.consumer)?;
    if let Some(session) = &request.session_id {
        session_id(session)?;
    }
    Ok(())
}

/// [`Store::pauses`](crate::Store::pauses): the session id when given.
pub fn pauses(session: Option<&str>) -> Result<()> {
    match session {
        Some(session) => session_id(session),
        None => Ok(()),
    }
}

/// [`Store::fork`](crate::Store::fork): both session ids (the rules that
/// need stored state are [`ForkRequest::plan`]'s).
pub fn fork(request: &ForkRequest) -> Result<()> {
    session_id(&request.session_id)?;
    session_id(&request.into)
}

/// A lane given by name must not be empty (`None` names no lane).
pub fn lane(lane: Option<&str>) -> Result<()> {
    if lane == Some("") {
        return Err(StoreError::invalid_input(
            "empty lane name: omit the lane for an event cursor",
        ));
    }
    Ok(())
}

/// [`Store::clear`](crate::Store::clear): the session and the fencing cause's consumer.
pub fn clear(request: &ClearRequest) -> Result<()> {
    session_id(&request.session_id)?;
    if let Some(cause) = &request.cause {
        name("cause consumer", &cause.consumer)?;
    }
    Ok(())
}

/// [`Store::reclaim`](crate::Store::reclaim): the session id.
pub fn reclaim(session_id: &str) -> Result<()> {
    self::session_id(session_id)
}

/// [`Store::read`](crate::Store::read): the session id and bounds with
/// `through` not below `after`.
pub fn read(session_id: &str, options: &ReadOptions) -> Result<()> {
    self::session_id(session_id)?;
    crate::log::read_bounds(options, u64::MAX).map(|_| ())
}

/// [`Store::wake_log`](crate::Store::wake_log): the session id and a log
/// declaration; returns the declaration's log part.
pub fn wake_log<'a>(
    session_id: &str,
    consumer: &'a ConsumerDeclaration,
) -> Result<&'a LogDeclaration> {
    self::session_id(session_id)?;
    log_declaration(consumer)
}

/// [`Store::cursors`](crate::Store::cursors): the session id.
pub fn cursors(session_id: &str) -> Result<()> {
    self::session_id(session_id)
}

/// [`Store::subscribe`](crate::Store::subscribe): the session id.
pub fn subscribe(session_id: &str) -> Result<()> {
    self::session_id(session_id)
}

/// [`Store::write_state`](crate::Store::write_state): session, reducer and
/// states no deeper than [`MAX_JSON_DEPTH`].
pub fn write_state(session_id: &str, reducer: &str, writes: &[StateWrite]) -> Result<()> {
    self::session_id(session_id)?;
    name("reducer name", reducer)?;
    writes
        .iter()
        .try_for_each(|write| json_depth("reducer state", &write.state))
}

/// [`Store::read_state`](crate::Store::read_state): session and reducer.
pub fn read_state(session_id: &str, reducer: &str) -> Result<()> {
    self::session_id(session_id)?;
    name("reducer name", reducer)
}

/// [`Store::set_presence`](crate::Store::set_presence): session, participant,
/// a positive TTL and values no deeper than [`MAX_JSON_DEPTH`].
pub fn set_presence(
    session_id: &str,
    participant: &str,
    values: &BTreeMap<String, Value>,
    meta: &PresenceMeta,
) -> Result<()> {
    self::session_id(session_id)?;
    name("participant", participant)?;
    if meta.ttl_ms <= 0 {
        return Err(StoreError::invalid_input(format!(
            "presence ttl_ms must be positive, got {}",
            meta.ttl_ms
        )));
    }
    values
        .values()
        .try_for_each(|value| json_depth("presence value", value))
}

/// [`Store::read_presence`](crate::Store::read_presence): the session id.
pub fn read_presence(session_id: &str) -> Result<()> {
    self::session_id(session_id)
}

/// Rejects an empty session id.
pub fn session_id(session_id: &str) -> Result<()> {
    if session_id.is_empty() {
        return Err(StoreError::invalid_input(
            "session id is empty: name the session with a non-empty string",
        ));
    }
    if session_id.len() > MAX_SESSION_ID_BYTES {
        return Err(StoreError::invalid_input(format!(
            "session id is {} bytes long: at most {MAX_SESSION_ID_BYTES} bytes are allowed",
            session_id.len()
        )));
    }
    Ok(())
}

/// The longest session id, in bytes (UTF-8), any call accepts.
pub const MAX_SESSION_ID_BYTES: usize = 64 * 1_024;

/// [`Store::delete_session`](crate::Store::delete_session): the session id.
pub fn delete_session(request: &DeleteSessionRequest) -> Result<()> {
    session_id(&request.session_id)
}

/// [`Store::prune`](crate::Store::prune): a positive idle time, a limit of 1
/// to [`MAX_PRUNE_LIMIT`], and a valid continuation.
pub fn prune(request: &PruneRequest) -> Result<()> {
    if request.idle_for_ms <= 0 {
        return Err(StoreError::invalid_input(format!(
            "idle time is {} ms: prune sessions idle for a positive time",
            request.idle_for_ms
        )));
    }
    match request.limit {
        Some(0) => Err(StoreError::invalid_input(
            "prune limit is 0: pass 1 to 1000, or no limit",
        )),
        Some(limit) if limit > MAX_PRUNE_LIMIT => Err(StoreError::invalid_input(format!(
            "prune limit is {limit}: at most {MAX_PRUNE_LIMIT} sessions per call; \
             continue with the result's next"
        ))),
        _ => match &request.after {
            Some(from) => session_id(&from.session_id),
            None => Ok(()),
        },
    }
}

/// [`Store::rewrite_payloads`](crate::Store::rewrite_payloads): the session
/// id, at most [`MAX_REWRITE_ITEMS`] items, event indexes from 1, non-empty
/// reducer and participant names, no item named twice, presence
/// values that are not `null`, and new payloads no deeper than
/// [`MAX_JSON_DEPTH`].
pub fn rewrite_payloads(request: &RewritePayloadsRequest) -> Result<()> {
    session_id(&request.session_id)?;
    if request.len() > MAX_REWRITE_ITEMS {
        return Err(StoreError::invalid_input(format!(
            "rewrite names {} items: at most {MAX_REWRITE_ITEMS} per call; split it into pages",
            request.len()
        )));
    }
    let mut events = HashSet::new();
    for item in &request.events {
        if item.index == 0 {
            return Err(StoreError::invalid_input(
                "rewrite names event index 0: event indexes start at 1",
            ));
        }
        if !events.insert(item.index) {
            return Err(StoreError::invalid_input(format!(
                "rewrite names event {} twice: name each event once",
                item.index
            )));
        }
        json_depth("rewritten event payload", &item.new)?;
    }
    let mut states = HashSet::new();
    for item in &request.states {
        name("reducer name", &item.reducer)?;
        if !states.insert((item.reducer.as_str(), item.index)) {
            return Err(StoreError::invalid_input(format!(
                "rewrite names the state of reducer '{}' at index {} twice: name each state once",
                item.reducer, item.index
            )));
        }
        json_depth("rewritten reducer state", &item.new)?;
    }
    let mut fields = HashSet::new();
    for item in &request.presence {
        name("participant", &item.participant)?;
        if !fields.insert((item.participant.as_str(), item.field.as_str())) {
            return Err(StoreError::invalid_input(format!(
                "rewrite names presence field '{}' of participant '{}' twice: name each field once",
                item.field, item.participant
            )));
        }
        if item.expected.is_null() || item.new.is_null() {
            return Err(StoreError::invalid_input(format!(
                "rewrite of presence field '{}' of participant '{}' names a null value: \
                 live fields are never null, and set_presence deletes fields",
                item.field, item.participant
            )));
        }
        json_depth("rewritten presence value", &item.new)?;
    }
    Ok(())
}

/// Rejects an empty name of `what` (a holder, consumer, reducer, participant...).
pub fn name(what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(StoreError::invalid_input(format!(
            "{what} is empty: pass a non-empty string"
        )));
    }
    Ok(())
}

/// Validates a batch: non-empty types and ids, non-empty target names, no
/// `a2.cleared` events (only `clear` appends markers), payloads no deeper
/// than [`MAX_JSON_DEPTH`], and no id twice.
pub fn new_events(events: &[NewEvent]) -> Result<()> {
    let mut seen = HashSet::new();
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
            name("target consumer", &target.consumer)?;
            if let Some(at) = target.not_before {
                at.check()?;
            }
            if target.lane.as_deref() == Some("") {
                return Err(StoreError::invalid_input(format!(
                    "event {position} targets consumer '{}' on an empty lane: omit the lane for an event cursor",
                    target.consumer
                )));
            }
        }
        if let Some(cause) = &event.cause {
            name("cause consumer", &cause.consumer)?;
        }
        if too_deep(&event.payload) {
            return Err(StoreError::invalid_input(format!(
                "event {position} of the batch has a payload nested more than {MAX_JSON_DEPTH} arrays/objects deep"
            )));
        }
    }
    Ok(())
}

/// Validates consumer declarations: non-empty names, each name declared
/// once (identical repeats allowed), log lanes non-empty, and no target in
/// `events` naming a lane declared as a log lane.
pub fn consumers(consumers: Option<&[ConsumerDeclaration]>, events: &[NewEvent]) -> Result<()> {
    let Some(consumers) = consumers else {
        return Ok(());
    };
    for (position, consumer) in consumers.iter().enumerate() {
        name("consumer name", &consumer.name)?;
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
            return Err(StoreError::lane_conflict(&consumer.name, &log.lane));
        }
    }
    Ok(())
}

/// The log declaration of `consumer`, or an `InvalidInput` error when it has none.
pub fn log_declaration(consumer: &ConsumerDeclaration) -> Result<&LogDeclaration> {
    name("consumer name", &consumer.name)?;
    match &consumer.log {
        Some(log) if !log.lane.is_empty() => Ok(log),
        _ => Err(StoreError::invalid_input(format!(
            "consumer '{}' is not a log consumer: declare `log` with a lane",
            consumer.name
        ))),
    }
}

/// Rejects a negative retry delay.
pub fn retry_after(retry_after_ms: Option<i64>) -> Result<()> {
    match retry_after_ms {
        Some(delay) if delay < 0 => Err(StoreError::invalid_input(format!(
            "retry_after_ms must not be negative, got {delay}"
        ))),
        _ => Ok(()),
    }
}

/// Rejects a JSON value nested deeper than [`MAX_JSON_DEPTH`] as invalid
/// input. Walks the value with an explicit stack (no recursion), so any depth
/// is checked without growing the call stack.
pub fn json_depth(what: &str, value: &Value) -> Result<()> {
    if too_deep(value) {
        return Err(StoreError::invalid_input(format!(
            "{what} is nested more than {MAX_JSON_DEPTH} arrays/objects deep"
        )));
    }
    Ok(())
}

/// Whether `value` nests deeper than [`MAX_JSON_DEPTH`]; iterative, and free
/// for scalars.
fn too_deep(value: &Value) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Cause, Target};
    use crate::ErrorCode;
    use serde_json::json;

    fn code(result: Result<()>) -> Option<ErrorCode> {
        result.err().map(|error| error.code())
    }

    #[test]
    fn json_depth_is_checked_without_recursion() {
        let nested = |levels: usize| {
            let mut value = json!([]);
            for _ in 1..levels {
                value = Value::Array(vec![value]);
            }
            value
        };
        assert!(json_depth("v", &json!(1)).is_ok());
        assert!(json_depth("v", &nested(MAX_JSON_DEPTH)).is_ok());
        let text = serde_json::to_string(&nested(MAX_JSON_DEPTH)).unwrap();
        assert!(serde_json::from_str::<Value>(&text).is_ok());
        let error = json_depth("v", &nested(MAX_JSON_DEPTH + 1)).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        let mut wrapped = serde_json::Map::new();
        wrapped.insert("a".to_owned(), Value::Array(vec![json!(1), nested(10_000)]));
        assert!(json_depth("v", &Value::Object(wrapped)).is_err());
        let event = NewEvent::new("t", nested(MAX_JSON_DEPTH + 1));
        assert_eq!(code(new_events(&[event])), Some(ErrorCode::InvalidInput));
    }

    #[test]
    fn batches_are_validated() {
        let ok = NewEvent::new("msg", json!(1)).with_id("a");
        assert!(new_events(std::slice::from_ref(&ok)).is_ok());
        let twice = [ok.clone(), ok.clone()];
        assert_eq!(
            code(new_events(&twice)),
            Some(ErrorCode::PartialDuplicateBatch)
        );
        let empty_type = [NewEvent::new("", json!(1))];
        assert_eq!(code(new_events(&empty_type)), Some(ErrorCode::InvalidInput));
        let marker = [NewEvent::new(CLEAR_EVENT_TYPE, json!(1))];
        assert_eq!(code(new_events(&marker)), Some(ErrorCode::InvalidInput));
        let empty_lane = [NewEvent::new("m", json!(1)).with_target(Target::lane("c", ""))];
        assert_eq!(code(new_events(&empty_lane)), Some(ErrorCode::InvalidInput));
        let twice = [
            ConsumerDeclaration::log("c", "L", None, false),
            ConsumerDeclaration::log("c", "L", Some(vec!["a".into()]), false),
        ];
        assert_eq!(
            code(consumers(Some(&twice), &[])),
            Some(ErrorCode::InvalidInput)
        );
        let same = [twice[0].clone(), twice[0].clone()];
        assert!(consumers(Some(&same), &[]).is_ok());
        let declared = [ConsumerDeclaration::log("c", "L", None, false)];
        let clash = [NewEvent::new("msg", json!(1)).with_target(Target::lane("c", "L"))];
        assert_eq!(
            code(consumers(Some(&declared), &clash)),
            Some(ErrorCode::InvalidInput)
        );
    }

    #[test]
    fn each_operation_checks_its_request() {
        let claim = ClaimRequest {
            session_id: "s".into(),
            holder: "w".into(),
            ttl_ms: Some(10),
            ..ClaimRequest::default()
        };
        assert!(claim_available(&claim).is_ok());
        for bad in [
            ClaimRequest {
                limit: Some(0),
                ..claim.clone()
            },
            ClaimRequest {
                holder: String::new(),
                ..claim.clone()
            },
            ClaimRequest {
                ttl_ms: None,
                ..claim.clone()
            },
            ClaimRequest {
                session_id: String::new(),
                ..claim.clone()
            },
        ] {
            assert_eq!(code(claim_available(&bad)), Some(ErrorCode::InvalidInput));
        }
        let fail = FailRequest {
            session_id: "s".into(),
            consumer: "c".into(),
            retry_after_ms: Some(-1),
            ..FailRequest::default()
        };
        assert_eq!(code(fail_attempt(&fail)), Some(ErrorCode::InvalidInput));
        let clear_request = ClearRequest {
            session_id: "s".into(),
            cause: Some(Cause {
                consumer: String::new(),
                lane: None,
                index: 1,
                attempt: 1,
            }),
            ..ClearRequest::default()
        };
        assert_eq!(code(clear(&clear_request)), Some(ErrorCode::InvalidInput));
        let bad_read = ReadOptions {
            after: Some(5),
            through: Some(4),
            limit: None,
        };
        assert_eq!(code(read("s", &bad_read)), Some(ErrorCode::InvalidInput));
        let meta = PresenceMeta {
            at: 0,
            seen: None,
            ttl_ms: 0,
        };
        assert_eq!(
            code(set_presence("s", "p", &BTreeMap::new(), &meta)),
            Some(ErrorCode::InvalidInput)
        );
        assert!(wake_log("s", &ConsumerDeclaration::targeted("c")).is_err());
        assert!(wake_log("s", &ConsumerDeclaration::log("c", "L", None, true)).is_ok());
        assert_eq!(code(read_state("s", "")), Some(ErrorCode::InvalidInput));
    }
}
