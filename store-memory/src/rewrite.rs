//! `rewrite_payloads`: compare-and-set rewrites of stored payloads.
//! [`a2_store_api::rewrite::verdict`] decides whether the call applies from
//! what this module looks up under the session's lock; the payloads are
//! then replaced in place, with nothing else of their rows touched.

use a2_store_api::rewrite::{self, Found, FoundState};
use a2_store_api::{Result, RewritePayloadsRequest, RewritePayloadsResult};

use crate::session::Session;

impl Session {
    /// Applies an already validated rewrite at store time `now`, all items
    /// or none. Subscribers are sent nothing.
    pub fn rewrite_payloads(
        &mut self,
        request: &RewritePayloadsRequest,
        now: i64,
    ) -> Result<RewritePayloadsResult> {
        let plan = {
            let found = Found {
                incarnation: self.exists().then_some(self.incarnation),
                clear_index: self.log.clear_index(),
                now_ms: now,
                events: request
                    .events
                    .iter()
                    .map(|item| {
                        self.log
                            .row(item.index)
                            .map(|row| (&*row.event_type, row.payload.as_value()))
                    })
                    .collect(),
                states: request
                    .states
                    .iter()
                    .map(|item| {
                        let (head, checkpoint) = self.snapshots.at(&item.reducer, item.index);
                        FoundState { head, checkpoint }
                    })
                    .collect(),
                presence: request
                    .presence
                    .iter()
                    .map(|item| self.presence.stored(&item.participant, &item.field))
                    .collect(),
            };
            rewrite::verdict(request, &found)?
        };
        for item in &request.events {
            if !self.log.set_payload(item.index, item.new.clone()) {
                return Err(self.corrupt(item.index));
            }
        }
        for (item, copies) in request.states.iter().zip(&plan.states) {
            self.snapshots.rewrite(
                &item.reducer,
                item.index,
                copies.head,
                copies.checkpoint,
                &item.new,
            );
        }
        for item in &request.presence {
            self.presence
                .rewrite(&item.participant, &item.field, &item.new);
        }
        Ok(RewritePayloadsResult::of(request))
    }
}
