//! Invariants every backend must keep after every step, checked on each
//! store's own state (not only by comparison with the reference).

use std::collections::BTreeSet;

use a2_store_api::pause::Hold;
use a2_store_api::work::WorkSummary;
use a2_store_api::{
    log, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult, Cursor, CursorKind, Head,
    CLEAR_EVENT_TYPE,
};

use crate::call::{Call, Outcome, Projection};
use crate::model::Model;
use crate::snapshot::{SessionState, StoreState};
use crate::vocab::{SESSIONS, WORK_CONSUMERS};

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
    work_listing_matches_heads(after)?;
    claims_respect_leases(call, outcome, before, after, now)?;
    work_claims_keep_their_word(call, outcome, after, now)
}

/// How the pause a cursor reports holds its head at `now`.
fn hold(cursor: &Cursor, now: i64) -> Hold {
    match &cursor.pause {
        Some(pause) if pause.in_force(now) => match pause.until_ms {
            Some(until) => Hold::Until(until),
            None => Hold::Indefinite,
        },
        _ => Hold::Free,
    }
}

/// What the unfinished heads of `consumers` in one session add up to at
/// `now`: as `list_work` counts them (`paused: false`, whatever pauses
/// hold them), or as claims see them (`paused: true`: heads paused until
/// resumed left out, heads paused until a time busy until then).
fn summary(state: &SessionState, consumers: &[String], now: i64, paused: bool) -> WorkSummary {
    let mut summary = WorkSummary::default();
    for cursor in state.cursors() {
        if cursor.head.is_some()
            && !cursor.dispatch.is_dead_lettered()
            && consumers.contains(&cursor.consumer)
        {
            let held = if paused {
                hold(cursor, now)
            } else {
                Hold::Free
            };
            if held.hides() {
                continue;
            }
            let mut dispatch = cursor.dispatch.clone();
            dispatch.claim_expires_at = cursor.dispatch.busy_until_held(now, held);
            summary.add(&dispatch, now);
        }
    }
    summary.dead_lettered = state
        .dead_letters()
        .iter()
        .filter(|letter| consumers.contains(&letter.consumer))
        .count() as u64;
    summary
}

/// `list_work` of every consumer lists exactly the sessions with an
/// unfinished head, in id order, with the counts and earliest expiry of
/// their heads, and a `ready_since` (not in the future) exactly while
/// something is claimable.
fn work_listing_matches_heads(after: &StoreState) -> Result<(), String> {
    let Ok(listed) = &after.work else {
        return Ok(());
    };
    let now = after.captured_at;
    let consumers: Vec<String> = WORK_CONSUMERS.iter().map(|c| (*c).to_owned()).collect();
    let mut expected = Vec::new();
    for (index, state) in after.sessions.iter().enumerate() {
        let work = summary(state, &consumers, now, false);
        if work.has_work() {
            let name = SESSIONS.get(index).copied().unwrap_or("?");
            expected.push(work.session_work(name, None));
        }
    }
    let got: Vec<_> = listed
        .iter()
        .map(|work| {
            let mut work = work.clone();
            work.ready_since = None;
            work
        })
        .collect();
    if got != expected {
        return Err(format!(
            "list_work of every consumer returned {listed:#?}\nbut the sessions' heads at {now} add up to {expected:#?}"
        ));
    }
    for work in listed {
        let claimable = work.claimable > 0;
        if work.ready_since.is_some() != claimable
            || work.ready_since.is_some_and(|since| since > now)
        {
            return Err(format!(
                "list_work lists {work:?} at {now}: ready_since must be given, and not after now, exactly while something is claimable"
            ));
        }
    }
    Ok(())
}

/// The logical sessions a cross-session claim serves.
fn served_sessions(request: &ClaimWorkRequest) -> Vec<usize> {
    (0..SESSIONS.len())
        .filter(|index| {
            SESSIONS
                .get(*index)
                .is_some_and(|name| request.serves_session(name))
        })
        .collect()
}

/// A cross-session claim claims only in the sessions and for the
/// consumers it serves, within its limits, each session once with its
/// heads in `(index, consumer, lane)` order; `Busy` leaves nothing served
/// claimable and names a time no later than the first busy head's
/// expiry; `Settled` leaves no served head claimable or busy.
fn work_claims_keep_their_word(
    call: &Call,
    outcome: &Projection,
    after: &StoreState,
    now: i64,
) -> Result<(), String> {
    let (Call::ClaimWork(request), Ok(Outcome::ClaimWork(result))) = (call, outcome) else {
        return Ok(());
    };
    let names = request.consumer_names();
    match result {
        ClaimWorkResult::Claimed { sessions } => {
            let heads: usize = sessions.iter().map(|s| s.heads.len()).sum();
            if heads > request.head_limit() || sessions.len() > request.session_limit() {
                return Err(format!(
                    "claim_work claimed {heads} heads in {} sessions, beyond limit {:?} / session_limit {:?}",
                    sessions.len(),
                    request.limit,
                    request.session_limit
                ));
            }
            let mut seen: Vec<&str> = Vec::new();
            for claim in sessions {
                let id = claim.session_id.as_str();
                if seen.contains(&id) || !request.serves_session(id) {
                    return Err(format!(
                        "claim_work served {id} again or without being asked (sessions {:?})",
                        request.sessions
                    ));
                }
                seen.push(id);
                if claim.heads.is_empty() && claim.dead_lettered.is_empty() {
                    return Err(format!("claim_work lists {id} with nothing claimed"));
                }
                if claim.heads.len() > request.per_session_limit() {
                    return Err(format!(
                        "claim_work claimed {} heads in {id}, beyond per_session_limit {:?}",
                        claim.heads.len(),
                        request.per_session_limit
                    ));
                }
                let order: Vec<_> = claim
                    .heads
                    .iter()
                    .map(|h| (h.event.index, h.consumer.clone(), h.lane.clone()))
                    .collect();
                if order.windows(2).any(|pair| pair[0] >= pair[1]) {
                    return Err(format!(
                        "claim_work's heads in {id} are not in (index, consumer, lane) order: {order:?}"
                    ));
                }
                if let Some(head) = claim
                    .heads
                    .iter()
                    .chain(&claim.dead_lettered)
                    .find(|h| !names.contains(&h.consumer))
                {
                    return Err(format!(
                        "claim_work handed out {:?} in {id}, of a consumer it does not serve ({names:?})",
                        head.cursor_ref()
                    ));
                }
            }
        }
        ClaimWorkResult::Busy { retry_at } => {
            let mut earliest: Option<i64> = None;
            for index in served_sessions(request) {
                let Some(state) = after.session(index) else {
                    continue;
                };
                let work = summary(state, &names, now, true);
                if work.claimable > 0 {
                    return Err(format!(
                        "claim_work answered Busy {{ retry_at: {retry_at} }} at {now}, but {} has {} claimable heads of {names:?}",
                        SESSIONS[index], work.claimable
                    ));
                }
                earliest = match (earliest, work.next_expiry) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            match earliest {
                Some(expiry) if *retry_at <= expiry => {}
                _ => {
                    return Err(format!(
                        "claim_work answered Busy {{ retry_at: {retry_at} }} at {now}, but the first served busy head is claimable at {earliest:?}"
                    ))
                }
            }
        }
        ClaimWorkResult::Settled => {
            for index in served_sessions(request) {
                let Some(state) = after.session(index) else {
                    continue;
                };
                let work = summary(state, &names, now, true);
                if work.claimable + work.busy > 0 {
                    return Err(format!(
                        "claim_work answered Settled at {now}, but {} has {} claimable and {} busy heads of {names:?}",
                        SESSIONS[index], work.claimable, work.busy
                    ));
                }
            }
        }
        other => {
            return Err(format!(
                "claim_work answered {other:?}, an outcome the model does not know"
            ))
        }
    }
    Ok(())
}

/// Read returns exactly the rows `reclaimed_through + 1 ..= head`.
fn contiguous(name: &str, state: &SessionState) -> Result<(), String> {
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
fn unique_holders(name: &str, state: &SessionState) -> Result<(), String> {
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
    state: &SessionState,
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
    state: &SessionState,
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
fn nothing_below_clear(name: &str, state: &SessionState) -> Result<(), String> {
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
/// clear, and every claimed head is then held by the claimer (claims of one
/// session and claims across sessions alike).
fn claims_respect_leases(
    call: &Call,
    outcome: &Projection,
    before: &StoreState,
    after: &StoreState,
    now: i64,
) -> Result<(), String> {
    match (call, outcome) {
        (
            Call::Claim(ClaimRequest {
                session_id, holder, ..
            }),
            Ok(Outcome::Claim(ClaimResult::Claimed { heads, .. })),
        ) => session_claim_respects_leases(session_id, holder, heads, before, after, now),
        (
            Call::ClaimWork(request),
            Ok(Outcome::ClaimWork(ClaimWorkResult::Claimed { sessions })),
        ) => {
            for claim in sessions {
                session_claim_respects_leases(
                    &claim.session_id,
                    &request.holder,
                    &claim.heads,
                    before,
                    after,
                    now,
                )?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// [`claims_respect_leases`] for the heads claimed in one session.
fn session_claim_respects_leases(
    session_id: &str,
    holder: &str,
    heads: &[Head],
    before: &StoreState,
    after: &StoreState,
    now: i64,
) -> Result<(), String> {
    let index = SESSIONS.iter().position(|s| *s == session_id).unwrap_or(0);
    let (Some(was), Some(is)) = (before.session(index), after.session(index)) else {
        return Ok(());
    };
    for head in heads {
        let cursor_ref = head.cursor_ref();
        if head.event.index <= is.clear_index() {
            return Err(format!(
                "claimed {cursor_ref:?} in {session_id} at or below the clear {}",
                is.clear_index()
            ));
        }
        let was_cursor = was
            .cursors()
            .iter()
            .find(|c| c.head_ref().as_ref() == Some(&cursor_ref));
        if let Some(cursor) = was_cursor {
            if cursor.dispatch.busy_until(now).is_some() {
                return Err(format!(
                    "claimed {cursor_ref:?} in {session_id} for {holder} while it was busy (held by {:?}, or scheduled or delayed) until {:?} (now {now})",
                    cursor.dispatch.claim_holder, cursor.dispatch.claim_expires_at
                ));
            }
            if hold(cursor, now).is_held() {
                return Err(format!(
                    "claimed {cursor_ref:?} in {session_id} for {holder} while its consumer was paused ({:?}, now {now})",
                    cursor.pause
                ));
            }
        }
        let holder_now = is
            .cursors()
            .iter()
            .find(|c| c.head_ref().as_ref() == Some(&cursor_ref))
            .and_then(|c| c.dispatch.claim_holder.clone());
        if holder_now.as_deref() != Some(holder) {
            return Err(format!(
                "claimed {cursor_ref:?} in {session_id} for {holder} but the cursor's holder is {holder_now:?}"
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

    fn row(index: u64, event_type: &str) -> StoredEvent {
        StoredEvent::new(
            "s0".to_owned(),
            index,
            format!("e{index}"),
            event_type.to_owned(),
            json!(null),
            0,
        )
    }

    fn cursor(kind: CursorKind, consumer: &str, lane: Option<&str>, head: Option<u64>) -> Cursor {
        Cursor::new(
            consumer.to_owned(),
            lane.map(str::to_owned),
            kind,
            head.map_or(0, |h| h - 1),
        )
        .with_head(head)
    }

    fn state(rows: Vec<StoredEvent>, cursors: Vec<Cursor>, clear: u64) -> StoreState {
        let head = rows.last().map_or(0, |r| r.index);
        let session = SessionState {
            rows: Ok(rows),
            cursors: Ok(cursors),
            dead_letters: Ok(Vec::new()),
            presence: Ok(Vec::new()),
            states: Vec::new(),
            info: Some(SessionInfo::new("s0".to_owned(), head, clear, 0)),
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
            sessions: vec![session, empty.clone(), empty],
            listing: Ok(Vec::new()),
            work: Err(a2_store_api::ErrorCode::Backend),
            pauses: Ok(Vec::new()),
            captured_at: 0,
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
            vec![{
                let mut cursor = cursor(CursorKind::Log, "audit", Some("log"), Some(2));
                cursor.position = 0;
                cursor
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
            heads: vec![Head::new(
                row(1, "msg"),
                "agent".to_owned(),
                None,
                taken.dispatch,
            )],
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

    fn claim_of(cursor: &Cursor, holder: &str) -> (Call, Projection) {
        let call = Call::Claim(ClaimRequest {
            session_id: "s0".to_owned(),
            holder: holder.to_owned(),
            ttl_ms: Some(10),
            ..ClaimRequest::default()
        });
        let outcome = Ok(Outcome::Claim(ClaimResult::Claimed {
            heads: vec![Head::new(
                row(1, "msg"),
                cursor.consumer.clone(),
                cursor.lane.clone(),
                cursor.dispatch.clone(),
            )],
            dead_lettered: Vec::new(),
            head: 1,
        }));
        (call, outcome)
    }

    #[test]
    fn claiming_a_scheduled_or_paused_head_is_caught() {
        let mut scheduled = cursor(CursorKind::Lane, "agent", Some("L1"), Some(1));
        scheduled.dispatch = Dispatch::scheduled(Some(100));
        let before = state(vec![row(1, "msg")], vec![scheduled.clone()], 0);
        let mut taken = scheduled.clone();
        taken.dispatch.claim_holder = Some("w0".to_owned());
        let after = state(vec![row(1, "msg")], vec![taken.clone()], 0);
        let mut model = Model::default();
        model
            .lanes
            .entry((0, "agent".to_owned(), "L1".to_owned()))
            .or_default()
            .queued
            .insert(1);
        let (call, outcome) = claim_of(&taken, "w0");
        let message = check(&model, &call, &outcome, &before, &after, 50).unwrap_err();
        assert!(message.contains("scheduled"), "{message}");
        assert_eq!(check(&model, &call, &outcome, &before, &after, 100), Ok(()));

        let mut paused = cursor(CursorKind::Lane, "agent", Some("L1"), Some(1));
        paused.pause = Some(a2_store_api::Pause::new(
            "agent".to_owned(),
            None,
            Some(80),
            0,
        ));
        let before = state(vec![row(1, "msg")], vec![paused], 0);
        let message = check(&model, &call, &outcome, &before, &after, 50).unwrap_err();
        assert!(message.contains("paused"), "{message}");
        // The pause has ended by itself at 80.
        assert_eq!(check(&model, &call, &outcome, &before, &after, 80), Ok(()));
    }
}
