//! `delete_session`: removing one session whole. [`a2_store_api::retention`]
//! decides what blocks the delete and what it ends; this module finds the
//! session, erases its rows from every table of the store (the session map,
//! the activity order, the work index, its pauses), ends its subscribers,
//! and marks the old session deleted so a call that waited for its lock
//! looks the id up again.

use a2_store_api::{
    retention, DeleteSessionRequest, DeleteSessionResult, Removed, Result, StoreError,
};

use crate::session::Session;
use crate::store::{lock, MemoryStore};
use crate::work::Touch;

impl MemoryStore {
    /// [`Store::delete_session`](a2_store_api::Store::delete_session) of a
    /// validated request.
    pub(crate) fn delete(&self, request: &DeleteSessionRequest) -> Result<DeleteSessionResult> {
        let id = request.session_id.as_str();
        loop {
            let pauses = self.pauses_covering(id)?;
            let Some(cell) = lock(&self.shared.sessions, "sessions map")?
                .get(id)
                .cloned()
            else {
                return Ok(DeleteSessionResult::NotFound);
            };
            let mut session = lock(&cell, "session")?;
            if session.deleted {
                continue;
            }
            if !session.exists() {
                return Ok(DeleteSessionResult::NotFound);
            }
            if let Some(answer) = request.unmet_condition(session.log.head()) {
                return Ok(answer);
            }
            let now = self.shared.clock.now_ms();
            let cursors = session.list_cursors(&pauses, now);
            let ended = if request.force {
                retention::heads_ended(&cursors)
            } else {
                if let Some(refused) = retention::delete_blocker(id, &cursors, now) {
                    return Err(refused);
                }
                0
            };
            let removed = Removed::new(
                session.incarnation,
                session.log.head(),
                session.log.head() - session.log.reclaimed_through(),
                cursors.len() as u64,
                ended,
            );
            self.erase(&mut session)?;
            return Ok(DeleteSessionResult::Deleted { removed });
        }
    }

    /// Erases `session` (locked) from the store: every row it held, its
    /// work rows and pauses, its place in the map and the activity order;
    /// its subscribers end with [`StoreError::session_deleted`].
    pub(crate) fn erase(&self, session: &mut Session) -> Result<()> {
        let id = session.id.clone();
        let activity = session.last_activity;
        let mut subscribers = std::mem::take(&mut session.subscribers);
        *session = Session::new(&id);
        self.sync_work(session, Touch::All)?;
        lock(&self.shared.pauses, "pause table")?.remove_session(&id);
        lock(&self.shared.sessions, "sessions map")?.remove(&id, activity);
        session.deleted = true;
        subscribers.end(|| StoreError::session_deleted(&id));
        Ok(())
    }
}
