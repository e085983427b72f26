//! [`Store::rewrite_payloads`] through the offload layer.
//!
//! The caller's payloads are the ones it reads through the layer. An
//! `expected` payload whose row holds a reference is matched by content:
//! when its JSON hashes to the reference, the store below is handed the
//! reference as the expected value, so its own compare-and-set decides
//! (nothing is fetched). A `new` payload above the threshold is written to
//! the object store first, like an append's. Presence values are never
//! offloaded and pass through. The objects the old payloads referenced
//! stay until [`OffloadStore::sweep`] or the session's deletion removes
//! them.

use a2_store_api::{
    validate, EventRewrite, Payload, Result, RewritePayloadsRequest, RewritePayloadsResult,
    StateRewrite, StoreError,
};
use serde_json::Value;

use super::reference::{self, Reference};
use super::{OffloadStore, Written};
use crate::layer::rows::{events_at, state_at};

impl OffloadStore {
    /// `rewrite_payloads` through the layer (see the module docs).
    pub(super) async fn rewrite(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult> {
        validate::rewrite_payloads(&request)?;
        let session = request.session_id.as_str();
        let rows = events_at(
            self.inner.as_ref(),
            session,
            request.events.iter().map(|item| item.index),
        )
        .await?;
        let mut stored = RewritePayloadsRequest::new(session);
        stored.incarnation = request.incarnation;
        stored.presence = request.presence.clone();
        let mut written = Written::new();
        for item in &request.events {
            let expected = match rows.get(&item.index) {
                Some(row) => stored_form(&row.payload, &item.expected)?,
                None => None,
            };
            let new = self
                .objects
                .offload_event(session, item.new.clone(), &mut written)
                .await;
            stored.events.push(EventRewrite {
                index: item.index,
                expected: expected.map_or_else(|| item.expected.clone(), Payload::new),
                new: self.count_offload(new)?,
            });
        }
        for item in &request.states {
            let held = state_at(self.inner.as_ref(), session, &item.reducer, item.index).await?;
            let expected = match held {
                Some(state) => stored_form(&state, &item.expected)?,
                None => None,
            };
            let new = self.objects.offload_state(session, item.new.clone()).await;
            let new = self.count_offload(new.map(Payload::new))?.into_value();
            stored.states.push(StateRewrite {
                reducer: item.reducer.clone(),
                index: item.index,
                expected: expected.unwrap_or_else(|| item.expected.clone()),
                new,
            });
        }
        self.inner.rewrite_payloads(stored).await
    }
}

/// The row's reference when `stored` is one and `expected` is its content;
/// `None` when the row holds the payload inline or another object (the
/// store below then compares `expected` itself).
fn stored_form(stored: &Value, expected: &Value) -> Result<Option<Value>> {
    let Some(Ok(held)) = Reference::parse(stored) else {
        return Ok(None);
    };
    let (_, of_expected): (Vec<u8>, Reference) =
        reference::serialize(expected).map_err(|error| {
            StoreError::invalid_input(format!(
                "an expected payload does not serialize as JSON: {error}"
            ))
        })?;
    Ok((held.sha256 == of_expected.sha256 && held.len == of_expected.len).then(|| stored.clone()))
}
