//! `reschedule`: moving or cancelling a head, or a queued lane index, that
//! has never been claimed. [`RescheduleRequest::verdict`] decides; this
//! module finds where the index waits and stores the answer.

use a2_store_api::{CursorKind, Dispatch, RescheduleRequest, RescheduleStep, Result, ScheduledAt};

use crate::cursor_table::Lookup;
use crate::ids::CursorId;
use crate::session::{Env, Session};

/// Where a reschedule found its index: the cursor, and whether the index is
/// its head or its place in the lane's queue.
enum Found {
    /// The cursor's head.
    Head(CursorId),
    /// Queued on the lane cursor at this position.
    Queued(CursorId, usize),
    /// Nowhere to change.
    Nothing,
}

impl Session {
    /// Applies a validated reschedule: fences its cause, asks
    /// [`RescheduleRequest::verdict`] what to do with the index where it was
    /// found, and stores that. Returns the step taken (the caller rewrites
    /// the work rows when it [changes](RescheduleStep::changes) anything).
    pub fn reschedule(
        &mut self,
        env: Env<'_>,
        request: &RescheduleRequest,
    ) -> Result<RescheduleStep> {
        self.fence_incarnation(request.incarnation)?;
        if let Some(cause) = &request.cause {
            self.fence(cause)?;
        }
        let now = env.clock.now_ms();
        let index = request.index;
        let lane = request.lane.as_deref();
        let no_cursor = ScheduledAt::NoCursor {
            event_exists: self.log.row(index).is_some(),
        };
        let (at, found) = match self.cursors.lookup(&request.consumer, lane, index) {
            Lookup::Live(id, cursor) if cursor.head == Some(index) => (
                ScheduledAt::Head(cursor.kind, &cursor.dispatch),
                Found::Head(id),
            ),
            Lookup::Live(id, cursor) => match cursor.queued(index) {
                Some(position) if cursor.kind == CursorKind::Lane => {
                    (ScheduledAt::Queued, Found::Queued(id, position))
                }
                _ => (ScheduledAt::Elsewhere(cursor.kind), Found::Nothing),
            },
            Lookup::Finished(_) => (ScheduledAt::Elsewhere(CursorKind::Event), Found::Nothing),
            Lookup::Missing => (no_cursor, Found::Nothing),
        };
        let step = request.verdict(self.log.clear_index(), at, now)?;
        match (step, found) {
            (RescheduleStep::MoveHead(not_before), Found::Head(id)) => {
                self.cursors.modify(id, |cursor| {
                    cursor.dispatch = Dispatch::scheduled(not_before);
                });
            }
            (RescheduleStep::CancelHead, Found::Head(id)) => self.advance(id, None),
            (RescheduleStep::MoveQueued(not_before), Found::Queued(id, position)) => {
                self.cursors.modify(id, |cursor| {
                    if let Some(queued) = cursor.queue.get_mut(position) {
                        queued.not_before = not_before;
                    }
                });
            }
            (RescheduleStep::CancelQueued, Found::Queued(id, position)) => {
                self.cursors
                    .modify(id, |cursor| cursor.queue.remove(position));
            }
            (RescheduleStep::Answer(_), _) => {}
            _ => return Err(self.inconsistent("a reschedule step does not fit its index")),
        }
        Ok(step)
    }
}
