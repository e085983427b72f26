//! `fail_attempt`, `dead_letters` and `redrive`: failed attempts, the
//! heads they dead-letter, and putting those heads back to work.

use std::sync::Arc;

use a2_store_api::{
    dispatch, FailOutcome, FailRequest, FailResult, Head, Pause, RedriveAction, RedriveRequest,
    RedriveResult, Result,
};

use crate::cursor_table::Lookup;
use crate::ids::CursorId;
use crate::session::{Env, Session};

impl Session {
    /// Records a failed attempt as [`Dispatch::fail_verdict`] and
    /// [`Dispatch::record_failure`] decide; repeating the same failure is
    /// idempotent.
    ///
    /// [`Dispatch::fail_verdict`]: a2_store_api::Dispatch::fail_verdict
    /// [`Dispatch::record_failure`]: a2_store_api::Dispatch::record_failure
    pub fn fail(&mut self, env: Env<'_>, request: FailRequest) -> Result<FailResult> {
        if !self.incarnation_current(request.incarnation) {
            return Ok(FailResult::superseded());
        }
        if dispatch::cleared(request.index, self.log.clear_index()) {
            return Ok(FailResult::superseded());
        }
        let id =
            match self
                .cursors
                .lookup(&request.consumer, request.lane.as_deref(), request.index)
            {
                Lookup::Missing => {
                    let exists = self.log.row(request.index).is_some();
                    dispatch::without_cursor(&self.id, request.index, exists)?;
                    return Ok(FailResult::superseded());
                }
                Lookup::Finished(_) => return Ok(FailResult::superseded()),
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

    /// Retries or skips `consumer`'s dead-lettered head at `index`: the one
    /// on the request's lane, or without a lane the first in `(lane)`
    /// order, laneless first ([`RedriveRequest::picks`]). `has_pending`
    /// leaves out the heads `pauses` hold at `now`.
    pub fn redrive(
        &mut self,
        request: RedriveRequest,
        pauses: &[Pause],
        now: i64,
    ) -> Result<RedriveResult> {
        self.fence_incarnation(request.incarnation)?;
        let consumers = request.consumers.as_deref();
        let found = if dispatch::cleared(request.index, self.log.clear_index()) {
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
                .take_while(|(index, consumer, ..)| {
                    *index == request.index && **consumer == *request.consumer
                })
                .find(|(index, consumer, lane, _)| request.picks(consumer, lane.as_deref(), *index))
                .map(|(.., id)| *id)
        };
        self.refresh_log_types(consumers);
        let Some(id) = found else {
            return Ok(RedriveResult::new(
                false,
                self.has_pending(consumers, pauses, now),
            ));
        };
        self.redrive_head(id, request.action);
        Ok(RedriveResult::new(
            true,
            self.has_pending(consumers, pauses, now),
        ))
    }

    /// Retries or skips the dead-lettered head of cursor `id`: a retry makes
    /// it claimable again ([`Dispatch::retry`]), a skip moves the cursor past
    /// it without a completion record.
    ///
    /// [`Dispatch::retry`]: a2_store_api::Dispatch::retry
    pub fn redrive_head(&mut self, id: CursorId, action: RedriveAction) {
        match action {
            RedriveAction::Skip => self.advance(id, None),
            RedriveAction::Retry => {
                self.cursors.modify(id, |cursor| cursor.dispatch.retry());
            }
        }
    }
}
