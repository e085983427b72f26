//! `clear` and `reclaim`: ending a session's current work and freeing the
//! rows below the clear marker.

use a2_store_api::{
    ClearRequest, ClearResult, NewEvent, ReclaimResult, Result, StoreError, RECLAIM_BATCH,
};

use crate::session::{Env, Session};

impl Session {
    /// Appends the `a2.cleared` marker (fenced by `cause`, conditional on
    /// `if_last_index` as [`ClearRequest::unmet_condition`] decides), drops event and lane cursors and every completion
    /// record, parks log cursors at the marker and releases every pin.
    pub fn clear(&mut self, env: Env<'_>, request: ClearRequest) -> Result<ClearResult> {
        self.fence_incarnation(request.incarnation)?;
        if let Some(cause) = &request.cause {
            self.fence(cause)?;
        }
        if let Some(not_cleared) = request.unmet_condition(self.log.head()) {
            return Ok(not_cleared);
        }
        let mut stored = self.insert_batch(env, &[NewEvent::clear_marker()], None, None)?;
        let marker = stored.pop().ok_or_else(|| StoreError::Backend {
            message: format!("clearing session '{}' stored no marker", self.id),
            source: None,
        })?;
        self.log.set_clear_index(marker.index);
        self.cursors.clear_at(marker.index);
        self.snapshots.release_all();
        Ok(ClearResult::Cleared { marker })
    }

    /// Deletes up to [`RECLAIM_BATCH`] rows below the clear marker; once none
    /// remain, drops snapshots below the clear too.
    pub fn reclaim(&mut self) -> ReclaimResult {
        let clear = self.log.clear_index();
        if clear == 0 {
            return ReclaimResult::nothing_left();
        }
        let reclaimed = self.log.reclaim(RECLAIM_BATCH);
        let done = !self.log.has_reclaimable();
        if done {
            self.snapshots.drop_below(clear);
        }
        ReclaimResult::new(reclaimed, done)
    }
}
