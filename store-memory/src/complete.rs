//! `complete_attempt`: finishing the current head with its returned
//! events, or replaying a completion already recorded.

use a2_store_api::{
    dispatch, replay, CompleteRequest, CompleteResult, CompleteVerdict, Result, StoreError,
};

use crate::cursor::Completion;
use crate::cursor_table::Lookup;
use crate::session::{Env, Session};

impl Session {
    /// Completes the current head of an already validated request
    /// (appending the returned events with the attempt as cause and
    /// advancing the cursor), replays a recorded completion, or reports
    /// `Superseded`, as [`Dispatch::complete_verdict`] decides.
    ///
    /// [`Dispatch::complete_verdict`]: a2_store_api::Dispatch::complete_verdict
    pub fn complete(&mut self, env: Env<'_>, request: CompleteRequest) -> Result<CompleteResult> {
        let consumers = request.consumers.as_deref();
        if !self.incarnation_current(request.incarnation) {
            return Ok(CompleteResult::Superseded);
        }
        if dispatch::cleared(request.index, self.log.clear_index()) {
            self.refresh_log_types(consumers);
            return Ok(CompleteResult::Superseded);
        }
        let lane = request.lane.as_deref();
        let id = match self.cursors.lookup(&request.consumer, lane, request.index) {
            Lookup::Missing => {
                let exists = self.log.row(request.index).is_some();
                dispatch::without_cursor(&self.id, request.index, exists)?;
                self.refresh_log_types(consumers);
                return Ok(CompleteResult::Superseded);
            }
            Lookup::Finished(record) => {
                let record = record.cloned();
                let result = self.replay(&request, record.as_ref())?;
                self.refresh_log_types(consumers);
                return Ok(result);
            }
            Lookup::Live(id, cursor) => {
                let on_head = cursor.head == Some(request.index);
                match cursor.dispatch.complete_verdict(on_head, request.attempt) {
                    CompleteVerdict::Apply => id,
                    CompleteVerdict::Replay => {
                        let record = cursor.completions.get(request.index).cloned();
                        let result = self.replay(&request, record.as_ref())?;
                        self.refresh_log_types(consumers);
                        return Ok(result);
                    }
                    CompleteVerdict::Superseded => {
                        self.refresh_log_types(consumers);
                        return Ok(CompleteResult::Superseded);
                    }
                }
            }
        };
        if !self.owners(&request.events).is_empty() {
            return Err(StoreError::returned_ids_stored());
        }
        self.check_lane_conflicts(&request.events, consumers)?;
        // With nothing returned there is nothing to insert (and declared log
        // cursors' types are refreshed below), so the cause is not built.
        let stored = if request.events.is_empty() {
            Vec::new()
        } else {
            self.insert_batch(env, &request.events, Some(&request.cause()), consumers)?
        };
        self.refresh_log_types(consumers);
        let completion = Completion {
            attempt: request.attempt,
            returned_ids: request
                .events
                .iter()
                .map(|event| event.id.clone())
                .collect(),
        };
        self.advance(id, Some(completion));
        Ok(CompleteResult::Completed { events: stored })
    }

    /// A repeated completion of a head the cursor moved past, judged by
    /// [`replay::completion_record`] on `record` and then
    /// [`replay::completed_events`] on the rows owning the returned ids.
    fn replay(
        &self,
        request: &CompleteRequest,
        record: Option<&Completion>,
    ) -> Result<CompleteResult> {
        let record = record.map(|record| (record.attempt, record.returned_ids.as_slice()));
        if !replay::completion_record(request, record)? {
            return Ok(CompleteResult::Superseded);
        }
        let rows = self.rows(&self.owners(&request.events))?;
        let events = replay::completed_events(request, rows)?;
        Ok(CompleteResult::Completed { events })
    }
}
