//! Invariants every backend must keep after every step, checked on each
//! store's own state (not only by comparison with the reference).

use std::collections::BTreeSet;

use a2_store_api::{codec, ClaimResult, CursorKind, CLEAR_EVENT_TYPE};

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
            .any(|types| codec::takes(types.as_deref(), &row.event_type))
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
                    && codec::takes(types.as_deref(), &row.event_type)
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
