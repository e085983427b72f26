//! `redrive_all`: redriving every dead letter matching a filter, across
//! sessions, in one atomic step.
//!
//! Only the sessions the work index records as holding dead letters are
//! visited, and in each only its dead-lettered heads, so a call costs in
//! proportion to the dead letters, not to the sessions or cursors. The
//! sessions redriven are locked together, in session-id order (the order
//! every call locking several sessions takes), before anything changes.

use std::sync::{Arc, Mutex, MutexGuard};

use a2_store_api::{order, BulkRedrive, BulkRedriveResult, CursorRef, RedrivenHead, Result};

use crate::ids::CursorId;
use crate::session::Session;
use crate::store::{lock, MemoryStore};
use crate::work::Touch;

/// A dead-lettered head found for redriving: its cursor and how it is reported.
type Picked = (CursorId, RedrivenHead);

/// A locked session and the heads picked in it.
type Locked<'a> = (MutexGuard<'a, Session>, Vec<Picked>);

impl MemoryStore {
    /// [`Store::redrive_all`](a2_store_api::Store::redrive_all) of a
    /// validated request: the first `page_size` matching dead letters by
    /// `(session_id, index, consumer, lane)`, each redriven as a lane-exact
    /// `redrive` would, and whether more match.
    pub(crate) fn redrive_matching(&self, request: &BulkRedrive) -> Result<BulkRedriveResult> {
        let candidates: Vec<String> = match &request.session_id {
            Some(session) => vec![session.clone()],
            None => lock(&self.shared.work, "work index")?.dead_sessions(),
        };
        let sessions: Vec<Arc<Mutex<Session>>> = {
            let map = lock(&self.shared.sessions, "sessions map")?;
            candidates
                .iter()
                .filter_map(|id| map.get(id).cloned())
                .collect()
        };
        let limit = request.page_size();
        let mut picked: Vec<Locked<'_>> = Vec::new();
        let mut taken = 0;
        let mut more = false;
        for session in &sessions {
            let guard = lock(session, "session")?;
            let mut matching = guard.matching_dead_letters(request);
            if matching.is_empty() {
                continue;
            }
            let room = limit - taken;
            if matching.len() > room {
                more = true;
                matching.truncate(room);
            }
            if !matching.is_empty() {
                taken += matching.len();
                picked.push((guard, matching));
            }
            if more {
                break;
            }
        }
        // Every session is locked and every head found: now apply.
        let mut redriven = Vec::with_capacity(taken);
        for (mut guard, heads) in picked {
            for (id, head) in heads {
                guard.redrive_head(id, request.action);
                redriven.push(head);
            }
            self.sync_work(&guard, Touch::All)?;
        }
        redriven.sort_by(order::compare_redriven);
        Ok(BulkRedriveResult::new(redriven, more))
    }
}

impl Session {
    /// The dead-lettered heads above the clear matching `request`'s filters
    /// ([`BulkRedrive::matches`]), by `(index, consumer, lane)`, with their
    /// cursors.
    fn matching_dead_letters(&self, request: &BulkRedrive) -> Vec<Picked> {
        let clear = self.log.clear_index();
        self.cursors
            .heads()
            .dead
            .iter()
            .filter(|(index, ..)| *index > clear)
            .filter_map(|(index, consumer, lane, id)| {
                let failed_at = self.cursors.get(*id)?.dispatch.failed_at?;
                request
                    .matches(&self.id, consumer, lane.as_deref(), failed_at)
                    .then(|| {
                        let cursor = CursorRef::new(&**consumer, lane.as_deref(), *index);
                        let head = RedrivenHead::new(self.id.clone(), cursor, failed_at);
                        (*id, head)
                    })
            })
            .collect()
    }
}
