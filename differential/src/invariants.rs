//! Invariants every backend must keep after every step, checked on each
//! store's own state (not only by comparison with the reference).

use std::collections::BTreeSet;

use a2_store_api::{log, ClaimResult, CursorKind, CLEAR_EVENT_TYPE};

use crate::call::{Call, Outcome, Projection};
use crate::model::Model;
use crate::snapshot::StoreState;
use crate::vocab::SESSIONS;

/// Checks the invariants on one store's states around `call`.
///
/// `now` is that store's clock when the call ran. Returns the first broken
/// invariant, described.
pub fn check(
    model: &Model,
    call: &Call,
    outcome: &Projection,
    before: &StoreState,
    after: &StoreState,
    now: i64,
) -> Result<(), String> {
    for (index, state) in after.sessions.iter().enumerate() {
        let name = SESSIONS.get(index).copied().unwrap_or("?");
        contiguous(name, state)?;
        unique_holders(name, state)?;
        lanes_follow_model(name, index, state, model)?;
        log_heads_take_their_types(name, state, model)?;
        nothing_below_clear(name, state)?;
    }
    claims_respect_leases(call, outcome, before, after, now)
}

/// Read returns exactly the rows `reclaimed_through + 1 ..= head`.
fn contiguous(name: &str, state: &crate::snapshot::SessionState) -> Result<(), String> {
    let (from, head) = match &state.info {
        Some(info) => (info.reclaimed_through + 1, info.head),
        None => (1, 0),
    };
    let indexes: Vec<u64> = state.rows().iter().map(|row| row.index).collect();
    let expected: Vec<u64> = (from..=head).collect();
    if indexes != expected {
        return Err(format!(
            "session {name}: read returned indexes {indexes:?}, expected {from}..={head} (reclaimed offset to head)"
        ));
    }
    Ok(())
}

/// No two cursors hold the same head ref, and a lane or log cursor is listed once.
fn unique_holders(name: &str, state: &crate::snapshot::SessionState) -> Result<(), String> {
    let mut refs = BTreeSet::new();
    let mut lanes = BTreeSet::new();
    for cursor in state.cursors() {
        if let Some(head) = cursor.head_ref() {
            if !refs.insert(head.clone()) {
                return Err(format!(
                    "session {name}: two cursors hold the head {head:?}"
                ));
            }
        }
        if cursor.kind != CursorKind::Event
            && !lanes.insert((cursor.consumer.clone(), cursor.lane.clone()))
        {
            return Err(format!(
                "session {name}: cursor ({}, {:?}) listed twice",
                cursor.consumer, cursor.lane
            ));
        }
    }
    Ok(())
}

/// A lane cursor's head is the lowest unfinished index targeted at its lane.
fn lanes_follow_model(
    name: &str,
    session: usize,
    state: &crate::snapshot::SessionState,
    model: &Model,
) -> Result<(), String> {
    if state.cursors.is_err() {
        return Ok(());
    }
    for cursor in state.cursors() {
        if cursor.kind != CursorKind::Lane {
            continue;
        }
        let lane = cursor.lane.clone().unwrap_or_default();
        let key = (session, cursor.consumer.clone(), lane.clone());
        let Some(lane_model) = model.lanes.get(&key) else {
            return Err(format!(
                "session {name}: lane cursor ({}, {lane}) exists but nothing was targeted at it since the last clear",
                cursor.consumer
            ));
        };
        let expected = lane_model.expected_head();
        if cursor.head != expected {
            return Err(format!(
                "session {name}: lane cursor ({}, {lane}) has head {:?}, but the lowest unfinished targeted index is {expected:?} (queued {:?}, finished {:?})",
                cursor.consumer, cursor.head, lane_model.queued, lane_model.finished
            ));
        }
    }
    for (key, lane_model) in &model.lanes {
        if key.0 != session {
            continue;
        }
        let listed = state.cursors().iter().any(|c| {
            c.kind == CursorKind::Lane && c.consumer == key.1 && c.lane.as_deref() == Some(&key.2)
        });
        if !listed {
            return Err(format!(
                "session {name}: indexes {:?} were targeted at lane ({}, {}) but it has no cursor",
                lane_model.queued, key.1, key.2
            ));
        }
    }
    Ok(())
}

/// A log cursor's head is an event of a type it takes (never the marker),
/// and, when its types never changed, it skipped no event it takes.
fn log_heads_take_their_types(
    name: &str,
    state: &crate::snapshot::SessionState,
    model: &Model,
) -> Result<(), String> {
    for cursor in state.cursors() {
        if cursor.kind != CursorKind::Log {
            continue;
        }
        let Some(head) = cursor.head else { continue };
        let lane = cursor.lane.clone().unwrap_or_default();
        let versions = model
            .log_types
            .get(&(cursor.consumer.clone(), lane.clone()))
            .cloned()
            .unwrap_or_else(|| vec![cursor.types.clone()]);
        let Some(row) = state.rows().iter().find(|row| row.index == head) else {
            continue;
        };
        if row.event_type == CLEAR_EVENT_TYPE {
            return Err(format!(
                "session {name}: log cursor ({}, {lane}) has the clear marker {head} as head",
                cursor.consumer
            ));
        }
        if !versions
            .iter()
            .any(|types| log::takes(types.as_deref(), &row.event_type))
        {
            return Err(format!(
                "session {name}: log cursor ({}, {lane}) has head {head} of type '{}', which no declaration of it takes ({versions:?})",
                cursor.consumer, row.event_type
            ));
        }
        if let [types] = versions.as_slice() {
            let skipped = state.rows().iter().find(|row| {
                row.index > cursor.position
                    && row.index < head
                    && row.event_type != CLEAR_EVENT_TYPE
                    && log::takes(types.as_deref(), &row.event_type)
            });
            if let Some(row) = skipped {
                return Err(format!(
                    "session {name}: log cursor ({}, {lane}) at position {} with head {head} skipped event {} of taken type '{}'",
                    cursor.consumer, cursor.position, row.index, row.event_type
                ));
            }
        }
    }
    Ok(())
}

/// Every head (cursors and dead letters) is above the clear.
fn nothing_below_clear(name: &str, state: &crate::snapshot::SessionState) -> Result<(), String> {
    let clear = state.clear_index();
    if clear == 0 {
        return Ok(());
    }
    for cursor in state.cursors() {
        if let Some(head) = cursor.head.filter(|head| *head <= clear) {
            return Err(format!(
                "session {name}: cursor ({}, {:?}) has head {head} at or below the clear {clear}",
                cursor.consumer, cursor.lane
            ));
        }
    }
    for letter in state.dead_letters() {
        if letter.event.index <= clear {
            return Err(format!(
                "session {name}: dead letter {:?} at or below the clear {clear}",
                letter.cursor_ref()
            ));
        }
    }
    Ok(())
}

/// A claim hands out no head whose lease is still held, none at or below the
/// clear, and every claimed head is then held by the claimer.
fn claims_respect_leases(
    call: &Call,
    outcome: &Projection,
    before: &StoreState,
    after: &StoreState,
    now: i64,
) -> Result<(), String> {
    let (Call::Claim(request), Ok(Outcome::Claim(ClaimResult::Claimed { heads, .. }))) =
        (call, outcome)
    else {
        return Ok(());
    };
    let index = SESSIONS
        .iter()
        .position(|s| *s == request.session_id)
        .unwrap_or(0);
    let (Some(was), Some(is)) = (before.session(index), after.session(index)) else {
        return Ok(());
    };
    for head in heads {
        let cursor_ref = head.cursor_ref();
        if head.event.index <= is.clear_index() {
            return Err(format!(
                "claimed {cursor_ref:?} at or below the clear {}",
                is.clear_index()
            ));
        }
        let held = was.cursors().iter().find(|c| {
            c.head_ref().as_ref() == Some(&cursor_ref)
                && c.dispatch.claim_holder.is_some()
                && c.dispatch.claim_expires_at.is_some_and(|at| at > now)
        });
        if let Some(cursor) = held {
            return Err(format!(
                "claimed {cursor_ref:?} for {} while {:?} held it until {:?} (now {now})",
                request.holder, cursor.dispatch.claim_holder, cursor.dispatch.claim_expires_at
            ));
        }
        let holder_now = is
            .cursors()
            .iter()
            .find(|c| c.head_ref().as_ref() == Some(&cursor_ref))
            .and_then(|c| c.dispatch.claim_holder.clone());
        if holder_now.as_deref() != Some(request.holder.as_str()) {
            return Err(format!(
                "claimed {cursor_ref:?} for {} but the cursor's holder is {holder_now:?}",
                request.holder
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use a2_store_api::{
        ClaimRequest, Cursor, CursorKind, Dispatch, Head, SessionInfo, StoredEvent,
    };
    use serde_json::json;

    use super::*;
    use crate::snapshot::SessionState;

    fn row(index: u64, event_type: &str) -> StoredEvent {
        StoredEvent {
            id: format!("e{index}"),
            event_type: event_type.to_owned(),
            payload: json!(null).into(),
            index,
            session_id: "s0".to_owned(),
            created_at: 0,
            cause: None,
        }
    }

    fn cursor(kind: CursorKind, consumer: &str, lane: Option<&str>, head: Option<u64>) -> Cursor {
        Cursor {
            consumer: consumer.to_owned(),
            lane: lane.map(str::to_owned),
            kind,
            position: head.map_or(0, |h| h - 1),
            head,
            types: None,
            dispatch: Dispatch::default(),
        }
    }

    fn state(rows: Vec<StoredEvent>, cursors: Vec<Cursor>, clear: u64) -> StoreState {
        let head = rows.last().map_or(0, |r| r.index);
        let session = SessionState {
            rows: Ok(rows),
            cursors: Ok(cursors),
            dead_letters: Ok(Vec::new()),
            presence: Ok(Vec::new()),
            states: Vec::new(),
            info: Some(SessionInfo {
                session_id: "s0".to_owned(),
                head,
                clear_index: clear,
                reclaimed_through: 0,
            }),
        };
        let empty = SessionState {
            rows: Ok(Vec::new()),
            cursors: Ok(Vec::new()),
            dead_letters: Ok(Vec::new()),
            presence: Ok(Vec::new()),
            states: Vec::new(),
            info: None,
        };
        StoreState {
            sessions: vec![session, empty],
            listing: Ok(Vec::new()),
        }
    }

    fn check_state(model: &Model, after: &StoreState) -> Result<(), String> {
        check(
            model,
            &Call::Advance(1),
            &Ok(Outcome::Advanced(1)),
            after,
            after,
            0,
        )
    }

    #[test]
    fn a_consistent_state_passes() {
        let mut model = Model::default();
        model
            .lanes
            .entry((0, "agent".to_owned(), "L1".to_owned()))
            .or_default()
            .queued
            .extend([1, 2]);
        let after = state(
            vec![row(1, "msg"), row(2, "msg")],
            vec![cursor(CursorKind::Lane, "agent", Some("L1"), Some(1))],
            0,
        );
        assert_eq!(check_state(&model, &after), Ok(()));
    }

    #[test]
    fn a_gap_in_the_log_is_caught() {
        let after = state(vec![row(1, "msg"), row(3, "msg")], Vec::new(), 0);
        assert!(check_state(&Model::default(), &after)
            .unwrap_err()
            .contains("read returned"));
    }

    #[test]
    fn two_cursors_on_one_head_are_caught() {
        let after = state(
            vec![row(1, "msg")],
            vec![
                cursor(CursorKind::Event, "agent", None, Some(1)),
                cursor(CursorKind::Event, "agent", None, Some(1)),
            ],
            0,
        );
        assert!(check_state(&Model::default(), &after)
            .unwrap_err()
            .contains("two cursors"));
    }

    #[test]
    fn a_lane_ahead_of_its_lowest_unfinished_index_is_caught() {
        let mut model = Model::default();
        model
            .lanes
            .entry((0, "agent".to_owned(), "L1".to_owned()))
            .or_default()
            .queued
            .extend([1, 2]);
        let after = state(
            vec![row(1, "msg"), row(2, "msg")],
            vec![cursor(CursorKind::Lane, "agent", Some("L1"), Some(2))],
            0,
        );
        assert!(check_state(&model, &after)
            .unwrap_err()
            .contains("lowest unfinished"));
    }

    #[test]
    fn a_log_head_of_a_type_not_taken_is_caught() {
        let mut model = Model::default();
        model.log_types.insert(
            ("audit".to_owned(), "log".to_owned()),
            vec![Some(vec!["msg".to_owned()])],
        );
        let after = state(
            vec![row(1, "tool")],
            vec![cursor(CursorKind::Log, "audit", Some("log"), Some(1))],
            0,
        );
        assert!(check_state(&model, &after)
            .unwrap_err()
            .contains("no declaration"));
        let skipped = state(
            vec![row(1, "msg"), row(2, "msg")],
            vec![Cursor {
                position: 0,
                ..cursor(CursorKind::Log, "audit", Some("log"), Some(2))
            }],
            0,
        );
        assert!(check_state(&model, &skipped)
            .unwrap_err()
            .contains("skipped"));
    }

    #[test]
    fn a_head_below_the_clear_is_caught() {
        let after = state(
            vec![row(1, "msg"), row(2, CLEAR_EVENT_TYPE)],
            vec![cursor(CursorKind::Event, "agent", None, Some(1))],
            2,
        );
        assert!(check_state(&Model::default(), &after)
            .unwrap_err()
            .contains("at or below the clear"));
    }

    #[test]
    fn claiming_a_held_head_is_caught() {
        let mut held = cursor(CursorKind::Event, "agent", None, Some(1));
        held.dispatch.claim_holder = Some("w0".to_owned());
        held.dispatch.claim_expires_at = Some(100);
        let before = state(vec![row(1, "msg")], vec![held.clone()], 0);
        let mut taken = held.clone();
        taken.dispatch.claim_holder = Some("w1".to_owned());
        let after = state(vec![row(1, "msg")], vec![taken.clone()], 0);
        let call = Call::Claim(ClaimRequest {
            session_id: "s0".to_owned(),
            holder: "w1".to_owned(),
            ttl_ms: Some(10),
            ..ClaimRequest::default()
        });
        let outcome = Ok(Outcome::Claim(ClaimResult::Claimed {
            heads: vec![Head {
                event: row(1, "msg"),
                consumer: "agent".to_owned(),
                lane: None,
                dispatch: taken.dispatch,
                clear_index: None,
            }],
            dead_lettered: Vec::new(),
            head: 1,
        }));
        let message = check(&Model::default(), &call, &outcome, &before, &after, 50).unwrap_err();
        assert!(message.contains("while"), "{message}");
        // Once the lease has expired, the same claim is fine.
        assert_eq!(
            check(&Model::default(), &call, &outcome, &before, &after, 100),
            Ok(())
        );
    }
}
