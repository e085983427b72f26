//! Deterministic ids for the events an attempt writes.
//!
//! An event a handler returns or appends without an id gets one derived
//! from the attempt that wrote it, so writing it again (a completion retried
//! after a timeout, an append retried after a connection error at commit)
//! names the same ids and the store answers with a replay instead of
//! storing it twice or refusing a half-known batch.
//!
//! # The scheme
//!
//! The id is the UUID v5 ([RFC 9562]) in the namespace [`ID_NAMESPACE`] of
//! the name built from, in this order, each part as its byte length in
//! decimal, `:` and its UTF-8 bytes:
//!
//! `a2-worker/1`, the session id, the consumer, the lane (`-` with no
//! length when the head has no lane), the head's index and the attempt in
//! decimal, the kind (`returned` or `appended`) and the event's position
//! among the attempt's events of that kind (0-based, in decimal).
//!
//! The length prefixes make the name unambiguous whatever characters the
//! session, consumer or lane hold. Two attempts never share an id (the
//! attempt is part of the name), so a newer attempt of the same head writes
//! fresh events rather than colliding with a superseded attempt's.
//!
//! [RFC 9562]: https://www.rfc-editor.org/rfc/rfc9562

use std::fmt::Write as _;

use a2_store_api::{Cause, NewEvent};
use uuid::Uuid;

/// The UUID namespace of every id this crate derives.
pub const ID_NAMESPACE: Uuid = Uuid::from_u128(0x6a2b_1c0e_57d4_4f3a_9e21_8c5b_d04f_a713);

/// Which events of an attempt an id is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// Events the handler returned, stored by the completion.
    Returned,
    /// Events appended through the job's context while the handler ran.
    Appended,
}

impl OutputKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Returned => "returned",
            Self::Appended => "appended",
        }
    }
}

fn push_part(name: &mut String, part: &str) {
    // Writing to a String cannot fail.
    let _ = write!(name, "{}:{part}", part.len());
}

/// The id of the event at `position` among the `kind` events written by
/// the attempt `cause` of a head in `session_id`; see the module docs.
pub fn output_id(session_id: &str, cause: &Cause, kind: OutputKind, position: u64) -> String {
    let mut name = String::with_capacity(64 + session_id.len() + cause.consumer.len());
    push_part(&mut name, "a2-worker/1");
    push_part(&mut name, session_id);
    push_part(&mut name, &cause.consumer);
    match &cause.lane {
        Some(lane) => push_part(&mut name, lane),
        None => name.push('-'),
    }
    push_part(&mut name, &cause.index.to_string());
    push_part(&mut name, &cause.attempt.to_string());
    push_part(&mut name, kind.as_str());
    push_part(&mut name, &position.to_string());
    Uuid::new_v5(&ID_NAMESPACE, name.as_bytes()).to_string()
}

/// Gives every event of `events` without an id the derived id of its
/// position `first + i`; events with an id keep it.
pub(crate) fn assign_ids(
    events: &mut [NewEvent],
    session_id: &str,
    cause: &Cause,
    kind: OutputKind,
    first: u64,
) {
    for (position, event) in (first..).zip(events.iter_mut()) {
        if event.id.is_none() {
            event.id = Some(output_id(session_id, cause, kind, position));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn cause(lane: Option<&str>, index: u64, attempt: u32) -> Cause {
        Cause {
            consumer: "agent".into(),
            lane: lane.map(str::to_owned),
            index,
            attempt,
        }
    }

    #[test]
    fn ids_are_stable_and_differ_by_every_part() {
        let base = output_id("s", &cause(Some("L"), 3, 1), OutputKind::Returned, 0);
        assert_eq!(
            base,
            output_id("s", &cause(Some("L"), 3, 1), OutputKind::Returned, 0)
        );
        let others = [
            output_id("t", &cause(Some("L"), 3, 1), OutputKind::Returned, 0),
            output_id("s", &cause(None, 3, 1), OutputKind::Returned, 0),
            output_id("s", &cause(Some("M"), 3, 1), OutputKind::Returned, 0),
            output_id("s", &cause(Some("L"), 4, 1), OutputKind::Returned, 0),
            output_id("s", &cause(Some("L"), 3, 2), OutputKind::Returned, 0),
            output_id("s", &cause(Some("L"), 3, 1), OutputKind::Appended, 0),
            output_id("s", &cause(Some("L"), 3, 1), OutputKind::Returned, 1),
        ];
        let mut seen: HashSet<&str> = HashSet::from([base.as_str()]);
        for other in &others {
            assert!(seen.insert(other), "{other} repeats");
        }
    }

    #[test]
    fn length_prefixes_keep_names_unambiguous() {
        // "a:b" + "c" and "a" + "b:c" would join to the same text without lengths.
        let one = output_id("a:b", &cause(Some("c"), 1, 1), OutputKind::Returned, 0);
        let two = output_id("a", &cause(Some("b:c"), 1, 1), OutputKind::Returned, 0);
        assert_ne!(one, two);
        // A lane named "-" differs from no lane.
        let dash = output_id("s", &cause(Some("-"), 1, 1), OutputKind::Returned, 0);
        let none = output_id("s", &cause(None, 1, 1), OutputKind::Returned, 0);
        assert_ne!(dash, none);
    }

    #[test]
    fn assign_keeps_supplied_ids_and_numbers_the_rest() {
        let c = cause(None, 2, 1);
        let mut events = vec![
            NewEvent::new("a", serde_json::json!(1)),
            NewEvent::new("b", serde_json::json!(2)).with_id("mine"),
            NewEvent::new("c", serde_json::json!(3)),
        ];
        assign_ids(&mut events, "s", &c, OutputKind::Appended, 5);
        assert_eq!(
            events[0].id.as_deref(),
            Some(output_id("s", &c, OutputKind::Appended, 5).as_str())
        );
        assert_eq!(events[1].id.as_deref(), Some("mine"));
        assert_eq!(
            events[2].id.as_deref(),
            Some(output_id("s", &c, OutputKind::Appended, 7).as_str())
        );
    }
}
