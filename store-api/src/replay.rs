//! Idempotent replay: a repeated append of stored ids, and a repeated
//! completion of a head the cursor already moved past.
//!
//! A completion replay runs in two steps so a backend reads only what it
//! needs: [`completion_record`] judges the recorded completion (attempt and
//! returned ids), then, when it matches, [`completed_events`] judges the
//! stored rows owning those ids.

use crate::error::{Result, StoreError};
use crate::types::{CompleteRequest, NewEvent, StoredEvent};

/// Idempotent replay of a batch whose every id is stored: `stored[i]` is the
/// row owning `events[i].id`. Same type and payload required, else
/// `IdempotencyConflict`. Returns the stored rows in the batch's order.
pub fn append(events: &[NewEvent], stored: Vec<StoredEvent>) -> Result<Vec<StoredEvent>> {
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

/// The first step of a completion replay: `record` is the completion
/// recorded for the request's head (its attempt and returned ids), `None`
/// when there is none. `Ok(false)`: the attempt is not the recorded one, so
/// the completion is superseded; `Ok(true)`: the record matches, read the
/// rows owning the returned ids and finish with [`completed_events`];
/// `PartialDuplicateBatch` when the returned ids differ from the recorded.
pub fn completion_record(
    request: &CompleteRequest,
    record: Option<(u32, &[Option<String>])>,
) -> Result<bool> {
    let Some((attempt, ids)) = record else {
        return Ok(false);
    };
    if attempt != request.attempt {
        return Ok(false);
    }
    let same_ids = ids.len() == request.events.len()
        && ids
            .iter()
            .zip(&request.events)
            .all(|(recorded, event)| *recorded == event.id);
    if same_ids {
        Ok(true)
    } else {
        Err(StoreError::completion_mismatch())
    }
}

/// The second step of a completion replay: `stored` are the rows owning the
/// returned events' ids (in the batch's order, missing ones left out). Every
/// id must be stored with the request's attempt as its cause and the same
/// type and payload; returns the stored rows.
pub fn completed_events(
    request: &CompleteRequest,
    stored: Vec<StoredEvent>,
) -> Result<Vec<StoredEvent>> {
    let cause = request.cause();
    if stored.len() != request.events.len()
        || stored.iter().any(|row| row.cause.as_ref() != Some(&cause))
    {
        return Err(StoreError::completion_mismatch());
    }
    if request.events.is_empty() {
        return Ok(Vec::new());
    }
    append(&request.events, stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Cause;
    use crate::ErrorCode;
    use serde_json::json;

    fn row(id: &str, cause: Option<Cause>) -> StoredEvent {
        StoredEvent {
            id: id.into(),
            event_type: "msg".into(),
            payload: json!({"a": 1}).into(),
            index: 1,
            session_id: "s".into(),
            created_at: 0,
            cause,
        }
    }

    #[test]
    fn append_replay_requires_same_type_and_payload() {
        let event = NewEvent::new("msg", json!({"a": 1})).with_id("x");
        assert!(append(std::slice::from_ref(&event), vec![row("x", None)]).is_ok());
        let mut other = row("x", None);
        other.payload = json!({"a": 2}).into();
        assert_eq!(
            append(&[event], vec![other]).unwrap_err().code(),
            ErrorCode::IdempotencyConflict
        );
    }

    #[test]
    fn completion_replay_needs_the_recorded_attempt_ids_and_causes() {
        let request = CompleteRequest {
            session_id: "s".into(),
            consumer: "c".into(),
            index: 3,
            attempt: 2,
            events: vec![NewEvent::new("msg", json!({"a": 1})).with_id("x")],
            ..CompleteRequest::default()
        };
        let ids = [Some("x".to_owned())];
        assert!(!completion_record(&request, None).unwrap());
        assert!(!completion_record(&request, Some((1, &ids))).unwrap());
        assert!(completion_record(&request, Some((2, &ids))).unwrap());
        assert_eq!(
            completion_record(&request, Some((2, &[None])))
                .unwrap_err()
                .code(),
            ErrorCode::PartialDuplicateBatch
        );
        let cause = Cause {
            consumer: "c".into(),
            lane: None,
            index: 3,
            attempt: 2,
        };
        let rows = completed_events(&request, vec![row("x", Some(cause))]).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            completed_events(&request, vec![row("x", None)])
                .unwrap_err()
                .code(),
            ErrorCode::PartialDuplicateBatch
        );
        assert_eq!(
            completed_events(&request, Vec::new()).unwrap_err().code(),
            ErrorCode::PartialDuplicateBatch
        );
    }
}
