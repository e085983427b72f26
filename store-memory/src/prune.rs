//! `prune`: deleting the idle sessions that have nothing left to do, a page
//! at a time, oldest activity first. The session map keeps the existing
//! sessions by last activity, so a page costs in proportion to its size;
//! [`a2_store_api::retention::prunable`] decides which idle session goes.

use a2_store_api::{retention, PruneFrom, PruneRequest, PruneResult, Result};

use crate::store::{lock, MemoryStore};

impl MemoryStore {
    /// [`Store::prune`](a2_store_api::Store::prune) of a validated request.
    ///
    /// Each session is decided and erased under its own lock, so a session
    /// that became busy (or active) after the page was read is kept. Expired
    /// presence fields of the examined sessions are dropped; snapshot
    /// checkpoints never outlive their pins here, so none is left to sweep.
    pub(crate) fn prune_idle(&self, request: &PruneRequest) -> Result<PruneResult> {
        let now = self.shared.clock.now_ms();
        let cutoff = retention::idle_cutoff(now, request.idle_for_ms);
        let page = request.page_size();
        let from = request
            .after
            .as_ref()
            .map(|from| (from.last_activity_ms, from.session_id.as_str()));
        let candidates = lock(&self.shared.sessions, "sessions map")?.idle(from, cutoff, page);
        let examined = candidates.len();
        let next = match candidates.last() {
            Some((activity, id, _)) if examined == page => Some(PruneFrom {
                last_activity_ms: *activity,
                session_id: String::from(&**id),
            }),
            _ => None,
        };
        let mut pruned = Vec::new();
        let mut expired = 0;
        for (_, id, cell) in candidates {
            let pauses = self.pauses_covering(&id)?;
            let mut session = lock(&cell, "session")?;
            let idle = session
                .last_activity
                .is_some_and(|activity| activity < cutoff);
            if session.deleted || !idle {
                continue;
            }
            let cursors = session.list_cursors(&pauses, now);
            if !retention::prunable(&cursors, request.include_dead_letters) {
                if !request.dry_run {
                    expired += session.presence.drop_expired(now);
                }
                continue;
            }
            if !request.dry_run {
                self.erase(&mut session)?;
            }
            pruned.push(String::from(&*id));
        }
        Ok(PruneResult::new(pruned, examined, next).with_swept(expired, 0))
    }
}
