//! Redriving dead letters: the lane-exact pick of
//! [`Store::redrive`](crate::Store::redrive) and the filters and order of
//! [`Store::redrive_all`](crate::Store::redrive_all).
//!
//! A redrive names `(consumer, index)` and optionally the lane. With a lane
//! it takes exactly that cursor's dead-lettered head; without one it takes
//! the first dead-lettered head of the consumer at the index in `(lane)`
//! order, the event cursor first ([`RedriveRequest::picks`]).
//!
//! A bulk redrive takes the dead-lettered heads matching every filter it
//! sets ([`BulkRedrive::matches`]), by `(session_id, index, consumer,
//! lane)` ([`crate::order::compare_redriven`]), at most
//! [`page_size`](BulkRedrive::page_size) of them, and redrives each exactly
//! as a lane-exact `redrive` would, in one atomic step. `more` says matching
//! heads are left: call again to take the next page.

use crate::types::{BulkRedrive, RedriveRequest};

impl RedriveRequest {
    /// Whether the dead-lettered head of `consumer` on `lane` at `index`
    /// is one this request may take (the first of those in `(lane)` order,
    /// event cursor first, is taken when the request names no lane).
    pub fn picks(&self, consumer: &str, lane: Option<&str>, index: u64) -> bool {
        self.index == index
            && self.consumer == consumer
            && self
                .lane
                .as_deref()
                .is_none_or(|wanted| lane == Some(wanted))
    }
}

impl BulkRedrive {
    /// Whether the dead-lettered head of `consumer` on `lane` in
    /// `session_id`, dead-lettered at `failed_at`, matches every filter set.
    pub fn matches(
        &self,
        session_id: &str,
        consumer: &str,
        lane: Option<&str>,
        failed_at: i64,
    ) -> bool {
        self.session_id.as_deref().is_none_or(|s| s == session_id)
            && self.consumer.as_deref().is_none_or(|c| c == consumer)
            && self.lane.as_deref().is_none_or(|l| lane == Some(l))
            && self.dead_since_ms.is_none_or(|since| failed_at >= since)
            && self.dead_before_ms.is_none_or(|before| failed_at < before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RedriveAction;

    #[test]
    fn filters_narrow_and_lanes_pick_exactly() {
        let mut bulk = BulkRedrive::new(RedriveAction::Retry);
        assert!(bulk.matches("s", "c", None, 5));
        bulk.lane = Some("L".into());
        bulk.dead_since_ms = Some(5);
        bulk.dead_before_ms = Some(9);
        assert!(bulk.matches("s", "c", Some("L"), 5));
        assert!(!bulk.matches("s", "c", None, 5));
        assert!(!bulk.matches("s", "c", Some("L"), 9));
        assert!(!bulk.matches("s", "c", Some("L"), 4));
        let request = RedriveRequest {
            incarnation: None,
            session_id: "s".into(),
            consumer: "c".into(),
            index: 3,
            action: RedriveAction::Retry,
            lane: Some("B".into()),
            consumers: None,
        };
        assert!(request.picks("c", Some("B"), 3));
        assert!(!request.picks("c", Some("A"), 3));
        assert!(!request.picks("c", None, 3));
        let any = RedriveRequest {
            lane: None,
            ..request
        };
        assert!(any.picks("c", None, 3) && any.picks("c", Some("A"), 3));
    }
}
