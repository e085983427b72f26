//! Outcomes of attempts: `complete_attempt`, `fail_attempt`, and the
//! dead-letter operations `dead_letters` and `redrive`.

use std::sync::Arc;

use a2_store_api::{
    codec, Cause, CompleteRequest, CompleteResult, FailOutcome, FailRequest, FailResult, Head,
    RedriveAction, RedriveRequest, RedriveResult, Result, StoreError,
};

use crate::cursor::Completion;
use crate::cursor_table::Lookup;
use crate::session::{Env, Session};

impl Session {
    /// Completes the current head (appending the returned events with the
    /// attempt as cause and advancing the cursor), replays a recorded
    /// completion, or reports `Superseded`.
    pub fn complete(&mut self, env: Env<'_>, request: CompleteRequest) -> Result<CompleteResult> {
        codec::validate_name("consumer name", &request.consumer)?;
        codec::validate_new_events(&request.events)?;
        let consumers = request.consumers.as_deref();
        codec::validate_consumers(consumers, &request.events)?;
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
                if cursor.head != Some(request.index) {
                    let record = cursor.completions.get(request.index).cloned();
                    let result = self.replay(&request, record.as_ref())?;
                    self.refresh_log_types(consumers);
                    return Ok(result);
                }
                let dispatch = &cursor.dispatch;
                if dispatch.attempt_count != request.attempt
                    || dispatch.failed_at.is_some()
                    || dispatch.claim_holder.is_none()
                {
                    self.refresh_log_types(consumers);
                    return Ok(CompleteResult::Superseded);
                }
                id
            }
        };
        if !self.owners(&request.events).is_empty() {
            return Err(StoreError::partial_duplicate(
                "returned event batch contains already-appended ids",
            ));
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

    /// A repeated completion of a head the cursor moved past: `Completed`
    /// with the stored rows when `record` is this attempt's and the ids and
    /// causes match; `PartialDuplicateBatch` when they do not; else `Superseded`.
    fn replay(
        &self,
        request: &CompleteRequest,
        record: Option<&Completion>,
    ) -> Result<CompleteResult> {
        let Some(record) = record.filter(|record| record.attempt == request.attempt) else {
            return Ok(CompleteResult::Superseded);
        };
        let mismatch = || {
            StoreError::partial_duplicate(
                "completed attempt does not match the returned event batch",
            )
        };
        let same_ids = record.returned_ids.len() == request.events.len()
            && record
                .returned_ids
                .iter()
                .zip(&request.events)
                .all(|(recorded, event)| *recorded == event.id);
        if !same_ids {
            return Err(mismatch());
        }
        let owners = self.owners(&request.events);
        if owners.len() != request.events.len() {
            return Err(mismatch());
        }
        let rows = self.rows(&owners)?;
        let caused = rows.iter().all(|row| {
            row.cause.as_ref().is_some_and(|cause| {
                cause.consumer == request.consumer
                    && cause.lane == request.lane
                    && cause.index == request.index
                    && cause.attempt == request.attempt
            })
        });
        if !caused {
            return Err(mismatch());
        }
        let events = if request.events.is_empty() {
            Vec::new()
        } else {
            codec::idempotent_replay(&request.events, rows)?
        };
        Ok(CompleteResult::Completed { events })
    }

    /// Records a failed attempt; repeating the same failure is idempotent.
    pub fn fail(&mut self, env: Env<'_>, request: FailRequest) -> Result<FailResult> {
        codec::validate_name("consumer name", &request.consumer)?;
        codec::validate_retry_after(request.retry_after_ms)?;
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
                    if let Some(result) =
                        codec::fail_verdict(&cursor.dispatch, on_head, request.attempt)
                    {
                        return Ok(result);
                    }
                    id
                }
            };
        let now = env.clock.now_ms();
        let recorded = self.cursors.modify(id, |cursor| {
            codec::record_failure(&mut cursor.dispatch, &request, now)
        });
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
        codec::validate_name("consumer name", &request.consumer)?;
        let consumers = request.consumers.as_deref();
        codec::validate_consumers(consumers, &[])?;
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
                self.cursors.modify(id, |cursor| {
                    cursor.dispatch.failed_at = None;
                    cursor.dispatch.failure_count = 0;
                });
            }
        }
        Ok(RedriveResult {
            redriven: true,
            has_pending: self.has_pending(consumers),
        })
    }
}
