//! `append`: writing a batch atomically, or replaying one already stored.

use a2_store_api::{replay, AppendOptions, AppendResult, NewEvent, Pause, Result, StoreError};

use crate::session::{Env, Session};

impl Session {
    /// Appends an already validated batch atomically, or replays it when
    /// every id is stored. Precedence: empty batch, replay / partial
    /// duplicate, `origin_index` at or below the clear, fencing, lane
    /// conflicts, insert. `has_pending` leaves out the heads `pauses` hold.
    pub fn append(
        &mut self,
        env: Env<'_>,
        events: Vec<NewEvent>,
        options: AppendOptions,
        pauses: &[Pause],
    ) -> Result<AppendResult> {
        let consumers = options.consumers.as_deref();
        let now = env.clock.now_ms();
        if events.is_empty() {
            self.refresh_log_types(consumers);
            return Ok(AppendResult::new(
                Vec::new(),
                self.has_pending(consumers, pauses, now),
            ));
        }
        let owners = self.owners(&events);
        if !owners.is_empty() {
            if owners.len() != events.len() {
                return Err(StoreError::mixed_batch(
                    owners.len(),
                    events.len() - owners.len(),
                ));
            }
            let stored = replay::append(&events, self.rows(&owners)?)?;
            self.refresh_log_types(consumers);
            return Ok(AppendResult::new(
                stored,
                self.has_pending(consumers, pauses, now),
            ));
        }
        options.check_origin(&self.id, self.log.clear_index())?;
        for cause in events.iter().filter_map(|event| event.cause.as_ref()) {
            self.fence(cause)?;
        }
        self.check_lane_conflicts(&events, consumers)?;
        let stored = self.insert_batch(env, &events, None, consumers)?;
        Ok(AppendResult::new(
            stored,
            self.has_pending(consumers, pauses, now),
        ))
    }
}
