//! `clear` and `reclaim`: ending a session's current work and freeing the
//! rows below the clear marker.

use a2_store_api::{
    ClearRequest, ClearResult, NewEvent, Payload, ReclaimResult, Result, StoreError,
    CLEAR_EVENT_TYPE, RECLAIM_BATCH,
};

use crate::session::{Env, Session};

impl Session {
    /// Appends the `a2.cleared` marker (fenced by `cause`, conditional on
    /// `if_last_index`), drops event and lane cursors and every completion
    /// record, parks log cursors at the marker and releases every pin.
    pub fn clear(&mut self, env: Env<'_>, request: ClearRequest) -> Result<ClearResult> {
        if let Some(cause) = &request.cause {
            self.fence(cause)?;
        }
        let head = self.log.head();
        if request
            .if_last_index
            .is_some_and(|expected| expected != head)
        {
            return Ok(ClearResult::NotCleared { head });
        }
        let marker = NewEvent {
            id: None,
            event_type: CLEAR_EVENT_TYPE.to_owned(),
            payload: Payload::default(),
            cause: None,
            targets: Vec::new(),
        };
        let mut stored = self.insert_batch(env, &[marker], None, None)?;
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
            return ReclaimResult {
                reclaimed: 0,
                done: true,
            };
        }
        let reclaimed = self.log.reclaim(RECLAIM_BATCH);
        let done = !self.log.has_reclaimable();
        if done {
            self.snapshots.drop_below(clear);
        }
        ReclaimResult { reclaimed, done }
    }
}
