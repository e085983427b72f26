//! Rewriting stored payloads in place ([`Store::rewrite_payloads`](crate::Store::rewrite_payloads)):
//! the one way to change the bytes of a row already stored, made for
//! re-encrypting old payloads under a new key (issue 40) and other payload
//! migrations, a bounded page at a time.
//!
//! A request names one session and up to [`MAX_REWRITE_ITEMS`]
//! compare-and-set items: event payloads by index, reducer snapshot states
//! by `(reducer, index)` and presence values by `(participant, field)`.
//! Each item holds the payload the caller read (`expected`) and the one to
//! store (`new`). The call applies every item, or none:
//!
//! - an item whose stored payload is not `expected` refuses the whole call
//!   with [`ErrorCode::PayloadMismatch`](crate::ErrorCode::PayloadMismatch)
//!   naming it (read it again and retry);
//! - an event that is not stored above the clear is
//!   [`ErrorCode::NoSuchEvent`](crate::ErrorCode::NoSuchEvent); a snapshot
//!   or presence field that is not stored (or not readable: below the clear,
//!   expired, deleted) is [`ErrorCode::NotFound`](crate::ErrorCode::NotFound);
//! - a request naming an incarnation other than the session's is
//!   [`ErrorCode::SessionDeleted`](crate::ErrorCode::SessionDeleted).
//!
//! Items are judged in the request's order, events first, then states,
//! then presence; the first that fails names the error.
//!
//! Only the payload bytes change: ids, types, indexes, causes, targets,
//! `created_at`, cursors, leases, completion records, pins and presence
//! `at`/`seen`/`expires_at` stay as they are. Live subscribers are sent
//! nothing (a stream already open has yielded, or will yield, the rows as
//! they were when it read them); streams opened later, reads, claims and
//! replays see the new payloads. A completion or append repeated after a
//! rewrite is compared with the rewritten rows, as every replay compares
//! what is stored: the new payload replays, the old one is
//! `IdempotencyConflict`.
//!
//! A backend looks up what is stored for each item (in one query per kind,
//! under the locks that keep them from changing until it commits), asks
//! [`verdict`] whether the call applies and which snapshot copies to
//! write, and stores the new payloads.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::payload::Payload;
use crate::types::CLEAR_EVENT_TYPE;

/// The most items (events, states and presence values together) one
/// [`Store::rewrite_payloads`](crate::Store::rewrite_payloads) may name; more
/// is `InvalidInput`.
pub const MAX_REWRITE_ITEMS: usize = 1_000;

/// Request of [`Store::rewrite_payloads`](crate::Store::rewrite_payloads):
/// compare-and-set rewrites of stored payloads of one session, applied all
/// together or not at all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RewritePayloadsRequest {
    /// The session.
    pub session_id: String,
    /// The session's incarnation as it was read
    /// ([`SessionInfo::incarnation`](crate::SessionInfo::incarnation)); a
    /// session deleted since (and perhaps created again) refuses the call
    /// with [`ErrorCode::SessionDeleted`](crate::ErrorCode::SessionDeleted).
    /// `None` is not fenced.
    #[serde(default)]
    pub incarnation: Option<u64>,
    /// Event payloads to rewrite, by index.
    #[serde(default)]
    pub events: Vec<EventRewrite>,
    /// Reducer snapshot states to rewrite, by reducer and index.
    #[serde(default)]
    pub states: Vec<StateRewrite>,
    /// Presence values to rewrite, by participant and field.
    #[serde(default)]
    pub presence: Vec<PresenceRewrite>,
}

/// Rewrite the payload of the event at `index` from `expected` to `new`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventRewrite {
    /// The event's index (above the session's clear).
    pub index: u64,
    /// The payload stored now, as read.
    pub expected: Payload,
    /// The payload to store.
    pub new: Payload,
}

/// Rewrite the state of `reducer`'s snapshot at `index` from `expected` to
/// `new`: the reducer's head snapshot and the pinned checkpoint at that
/// index, each that holds `expected`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateRewrite {
    /// The reducer.
    pub reducer: String,
    /// The index the snapshot was folded through (at or above the clear).
    pub index: u64,
    /// The state stored now, as read.
    pub expected: Value,
    /// The state to store.
    pub new: Value,
}

/// Rewrite `participant`'s live presence `field` from `expected` to `new`
/// (neither may be `null`: `set_presence` deletes fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PresenceRewrite {
    /// The participant.
    pub participant: String,
    /// The field.
    pub field: String,
    /// The value stored now, as read.
    pub expected: Value,
    /// The value to store.
    pub new: Value,
}

/// Result of [`Store::rewrite_payloads`](crate::Store::rewrite_payloads):
/// how many items of each kind were rewritten (every item, since a call
/// applies all of them or fails).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RewritePayloadsResult {
    /// Event payloads rewritten.
    pub events: u64,
    /// Snapshot states rewritten (an item counts once, whether it held a
    /// head snapshot, a checkpoint or both).
    pub states: u64,
    /// Presence values rewritten.
    pub presence: u64,
}

impl RewritePayloadsResult {
    /// A call that rewrote `events` events, `states` states and `presence`
    /// presence values.
    pub fn new(events: u64, states: u64, presence: u64) -> Self {
        Self {
            events,
            states,
            presence,
        }
    }

    /// The answer of `request` applied whole.
    pub fn of(request: &RewritePayloadsRequest) -> Self {
        Self::new(
            request.events.len() as u64,
            request.states.len() as u64,
            request.presence.len() as u64,
        )
    }
}

impl RewritePayloadsRequest {
    /// An empty rewrite of `session_id` (a valid no-op until items are added).
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            ..Self::default()
        }
    }

    /// Refused with `SessionDeleted` unless the session is incarnation `incarnation`.
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = Some(incarnation);
        self
    }

    /// Adds the rewrite of event `index` from `expected` to `new`.
    pub fn event(
        mut self,
        index: u64,
        expected: impl Into<Payload>,
        new: impl Into<Payload>,
    ) -> Self {
        self.events.push(EventRewrite {
            index,
            expected: expected.into(),
            new: new.into(),
        });
        self
    }

    /// Adds the rewrite of `reducer`'s snapshot at `index` from `expected` to `new`.
    pub fn state(
        mut self,
        reducer: impl Into<String>,
        index: u64,
        expected: Value,
        new: Value,
    ) -> Self {
        self.states.push(StateRewrite {
            reducer: reducer.into(),
            index,
            expected,
            new,
        });
        self
    }

    /// Adds the rewrite of `participant`'s presence `field` from `expected` to `new`.
    pub fn presence(
        mut self,
        participant: impl Into<String>,
        field: impl Into<String>,
        expected: Value,
        new: Value,
    ) -> Self {
        self.presence.push(PresenceRewrite {
            participant: participant.into(),
            field: field.into(),
            expected,
            new,
        });
        self
    }

    /// How many items the request names, of every kind.
    pub fn len(&self) -> usize {
        self.events.len() + self.states.len() + self.presence.len()
    }

    /// Whether the request names no item (a valid no-op).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a backend found stored for one event item: its type and payload.
pub type FoundEvent<'a> = Option<(&'a str, &'a Value)>;

/// What a backend found stored for one state item: the reducer's head
/// snapshot state when the head snapshot is at the item's index, and the
/// checkpoint's state at that index when one is stored.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FoundState<'a> {
    /// The head snapshot's state, when its index is the item's.
    pub head: Option<&'a Value>,
    /// The checkpoint's state at the item's index, when stored.
    pub checkpoint: Option<&'a Value>,
}

/// What a backend found stored for one presence item: its value (`null`
/// for a tombstone) and when it expires, ms.
pub type FoundPresence<'a> = Option<(&'a Value, i64)>;

/// What a backend found for every item of a request, in the request's
/// order (one entry per item of each kind), and the session's state.
#[derive(Debug, Clone, Default)]
pub struct Found<'a> {
    /// The session's incarnation; `None` when the session does not exist.
    pub incarnation: Option<u64>,
    /// The session's clear index (0 when never cleared).
    pub clear_index: u64,
    /// The store's time, ms (presence expiry).
    pub now_ms: i64,
    /// One entry per [`RewritePayloadsRequest::events`] item.
    pub events: Vec<FoundEvent<'a>>,
    /// One entry per [`RewritePayloadsRequest::states`] item.
    pub states: Vec<FoundState<'a>>,
    /// One entry per [`RewritePayloadsRequest::presence`] item.
    pub presence: Vec<FoundPresence<'a>>,
}

/// Which stored copies of a snapshot a state item rewrites.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateCopies {
    /// The reducer's head snapshot (at the item's index).
    pub head: bool,
    /// The checkpoint at the item's index.
    pub checkpoint: bool,
}

/// What a call applies, once [`verdict`] accepted it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewritePlan {
    /// One entry per state item, in the request's order: the copies to write.
    pub states: Vec<StateCopies>,
}

/// Whether `request` applies, given what is `found` stored for its items:
/// the incarnation fence, then each item in order (events, states,
/// presence): an event not stored above the clear is `NoSuchEvent`, the
/// clear marker is `InvalidInput` (the store writes its payload), a state
/// or presence value not stored or not readable is `NotFound`, a stored
/// payload other than `expected` is `PayloadMismatch`. The first failing
/// item names the error; nothing may be changed then. On success, the
/// snapshot copies each state item rewrites: those holding `expected`.
pub fn verdict(request: &RewritePayloadsRequest, found: &Found<'_>) -> Result<RewritePlan> {
    let session_id = request.session_id.as_str();
    crate::retention::fence_incarnation(session_id, request.incarnation, found.incarnation)?;
    if found.events.len() != request.events.len()
        || found.states.len() != request.states.len()
        || found.presence.len() != request.presence.len()
    {
        return Err(StoreError::corrupt_value(
            "rewrite lookup (a backend looked up a different number of items than asked)",
        ));
    }
    for (item, stored) in request.events.iter().zip(&found.events) {
        check_event(session_id, item, found.clear_index, *stored)?;
    }
    let mut plan = RewritePlan::default();
    for (item, stored) in request.states.iter().zip(&found.states) {
        plan.states
            .push(check_state(session_id, item, found.clear_index, *stored)?);
    }
    for (item, stored) in request.presence.iter().zip(&found.presence) {
        check_presence(session_id, item, *stored, found.now_ms)?;
    }
    Ok(plan)
}

/// One event item: stored above the clear, not the clear marker, holding
/// `expected`.
fn check_event(
    session_id: &str,
    item: &EventRewrite,
    clear_index: u64,
    stored: FoundEvent<'_>,
) -> Result<()> {
    if item.index < clear_index {
        return Err(StoreError::no_such_event(session_id, item.index));
    }
    let Some((event_type, payload)) = stored else {
        return Err(StoreError::no_such_event(session_id, item.index));
    };
    if event_type == CLEAR_EVENT_TYPE {
        return Err(StoreError::marker_not_rewritten(session_id, item.index));
    }
    if item.expected.as_value() != payload {
        return Err(StoreError::payload_mismatch(&format!(
            "the payload of event {} in session '{session_id}'",
            item.index
        )));
    }
    Ok(())
}

/// One state item: a snapshot at or above the clear holding `expected`
/// (in its head copy, its checkpoint or both).
fn check_state(
    session_id: &str,
    item: &StateRewrite,
    clear_index: u64,
    stored: FoundState<'_>,
) -> Result<StateCopies> {
    let what = format!(
        "the state of reducer '{}' at index {} in session '{session_id}'",
        item.reducer, item.index
    );
    if item.index < clear_index || (stored.head.is_none() && stored.checkpoint.is_none()) {
        return Err(StoreError::not_found(&what));
    }
    let copies = StateCopies {
        head: stored.head == Some(&item.expected),
        checkpoint: stored.checkpoint == Some(&item.expected),
    };
    if !copies.head && !copies.checkpoint {
        return Err(StoreError::payload_mismatch(&what));
    }
    Ok(copies)
}

/// One presence item: a live field (not a tombstone, not expired at
/// `now_ms`) holding `expected`.
fn check_presence(
    session_id: &str,
    item: &PresenceRewrite,
    stored: FoundPresence<'_>,
    now_ms: i64,
) -> Result<()> {
    let what = format!(
        "the presence field '{}' of participant '{}' in session '{session_id}'",
        item.field, item.participant
    );
    match stored {
        Some((value, expires_at)) if !value.is_null() && expires_at > now_ms => {
            if *value == item.expected {
                Ok(())
            } else {
                Err(StoreError::payload_mismatch(&what))
            }
        }
        _ => Err(StoreError::not_found(&what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;
    use serde_json::json;

    fn code<T: std::fmt::Debug>(result: Result<T>) -> ErrorCode {
        result.map(|_| ()).unwrap_err().code()
    }

    #[test]
    fn every_item_must_hold_what_was_read() {
        let request = RewritePayloadsRequest::new("s")
            .event(2, json!("old"), json!("new"))
            .state("r", 3, json!(1), json!(2))
            .presence("p", "f", json!("a"), json!("b"));
        let (stored, one, a) = (json!("old"), json!(1), json!("a"));
        let found = Found {
            incarnation: Some(1),
            clear_index: 0,
            now_ms: 10,
            events: vec![Some(("msg", &stored))],
            states: vec![FoundState {
                head: Some(&one),
                checkpoint: None,
            }],
            presence: vec![Some((&a, 11))],
        };
        let plan = verdict(&request, &found).unwrap();
        assert_eq!(
            plan.states,
            [StateCopies {
                head: true,
                checkpoint: false
            }]
        );
        let other = json!("other");
        let mut stale = found.clone();
        stale.events = vec![Some(("msg", &other))];
        let err = verdict(&request, &stale).unwrap_err();
        assert_eq!(err.code(), ErrorCode::PayloadMismatch);
        assert!(err.to_string().contains("event 2"), "{err}");
        let mut expired = found.clone();
        expired.presence = vec![Some((&a, 10))];
        assert_eq!(code(verdict(&request, &expired)), ErrorCode::NotFound);
    }

    #[test]
    fn gone_rows_and_the_marker_are_refused() {
        let request = RewritePayloadsRequest::new("s").event(2, json!(null), json!(1));
        let null = json!(null);
        let mut found = Found {
            incarnation: Some(1),
            clear_index: 3,
            events: vec![Some(("msg", &null))],
            ..Found::default()
        };
        assert_eq!(code(verdict(&request, &found)), ErrorCode::NoSuchEvent);
        found.clear_index = 2;
        found.events = vec![Some((CLEAR_EVENT_TYPE, &null))];
        assert_eq!(code(verdict(&request, &found)), ErrorCode::InvalidInput);
        found.events = vec![None];
        assert_eq!(code(verdict(&request, &found)), ErrorCode::NoSuchEvent);
        let fenced = request.clone().with_incarnation(7);
        assert_eq!(code(verdict(&fenced, &found)), ErrorCode::SessionDeleted);
        let states = RewritePayloadsRequest::new("s").state("r", 1, json!(1), json!(2));
        let found = Found {
            clear_index: 2,
            states: vec![FoundState {
                head: Some(&null),
                checkpoint: None,
            }],
            ..Found::default()
        };
        assert_eq!(code(verdict(&states, &found)), ErrorCode::NotFound);
    }

    #[test]
    fn a_state_item_rewrites_the_copies_that_hold_expected() {
        let request = RewritePayloadsRequest::new("s").state("r", 3, json!(1), json!(2));
        let (one, other) = (json!(1), json!(9));
        let found = Found {
            states: vec![FoundState {
                head: Some(&other),
                checkpoint: Some(&one),
            }],
            ..Found::default()
        };
        let plan = verdict(&request, &found).unwrap();
        assert_eq!(
            plan.states,
            [StateCopies {
                head: false,
                checkpoint: true
            }]
        );
        assert_eq!(RewritePayloadsResult::of(&request).states, 1);
    }
}
