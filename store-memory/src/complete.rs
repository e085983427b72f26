//! Outcomes of attempts: `complete_attempt`, `fail_attempt`, and the
//! dead-letter operations `dead_letters` and `redrive`.

use std::sync::Arc;

use a2_store_api::{
    replay, Cause, CompleteRequest, CompleteResult, CompleteVerdict, FailOutcome, FailRequest,
    FailResult, Head, RedriveAction, RedriveRequest, RedriveResult, Result, StoreError,
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
        if request.index <= self.log.clear_index() {
            self.refresh_log_types(consumers);
            return Ok(CompleteResult::Superseded);
        }
        let lane = request.lane.as_deref();
        let id = match self.cursors.lookup(&request.consumer, lane, request.index) {
            Lookup::Missing => {
                if self.log.row(request.index).is_none() {
                    return Err(StoreError::no_such_event(&self.id, request.index));
                }
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
            let cause = Cause {
                consumer: request.consumer.clone(),
                lane: request.lane.clone(),
                index: request.index,
                attempt: request.attempt,
            };
            self.insert_batch(env, &request.events, Some(&cause), consumers)?
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

    /// Records a failed attempt; repeating the same failure is idempotent.
    pub fn fail(&mut self, env: Env<'_>, request: FailRequest) -> Result<FailResult> {
        let superseded = |failure_count| FailResult {
            outcome: FailOutcome::Superseded,
            failure_count,
        };
        if request.index <= self.log.clear_index() {
            return Ok(superseded(0));
        }
        let id =
            match self
                .cursors
                .lookup(&request.consumer, request.lane.as_deref(), request.index)
            {
                Lookup::Missing => {
                    return match self.log.row(request.index) {
                        Some(_) => Ok(superseded(0)),
                        None => Err(StoreError::no_such_event(&self.id, request.index)),
                    };
                }
                Lookup::Finished(_) => return Ok(superseded(0)),
                Lookup::Live(id, cursor) => {
                    let on_head = cursor.head == Some(request.index);
                    if let Some(result) = cursor.dispatch.fail_verdict(on_head, request.attempt) {
                        return Ok(result);
                    }
                    id
                }
            };
        let now = env.clock.now_ms();
        let recorded = self
            .cursors
            .modify(id, |cursor| cursor.dispatch.record_failure(&request, now));
        let Some(result) = recorded else {
            return Err(self.inconsistent("the failed cursor vanished"));
        };
        if result.outcome == FailOutcome::DeadLettered {
            self.snapshots.release((id, request.index));
        }
        Ok(result)
    }

    /// Dead-lettered heads above the clear, by `(index, consumer, lane)`.
    pub fn dead_letters(&self) -> Result<Vec<Head>> {
        self.cursors
            .heads()
            .dead
            .iter()
            .map(|(.., id)| {
                let cursor = self
                    .cursors
                    .get(*id)
                    .ok_or_else(|| self.inconsistent("an indexed cursor is missing"))?;
                self.head_view(cursor)
            })
            .collect()
    }

    /// Retries or skips `consumer`'s dead-lettered head at `index` (the
    /// first such head in `(lane)` order, laneless first).
    pub fn redrive(&mut self, request: RedriveRequest) -> Result<RedriveResult> {
        let consumers = request.consumers.as_deref();
        let found = if request.index <= self.log.clear_index() {
            None
        } else {
            let start = (
                request.index,
                Arc::<str>::from(request.consumer.as_str()),
                None,
                0,
            );
            self.cursors
                .heads()
                .dead
                .range(start..)
                .next()
                .filter(|(index, consumer, ..)| {
                    *index == request.index && **consumer == *request.consumer
                })
                .map(|(.., id)| *id)
        };
        self.refresh_log_types(consumers);
        let Some(id) = found else {
            return Ok(RedriveResult {
                redriven: false,
                has_pending: self.has_pending(consumers),
            });
        };
        match request.action {
            RedriveAction::Skip => self.advance(id, None),
            RedriveAction::Retry => {
                self.cursors.modify(id, |cursor| cursor.dispatch.retry());
            }
        }
        Ok(RedriveResult {
            redriven: true,
            has_pending: self.has_pending(consumers),
        })
    }
}
