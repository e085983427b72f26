//! `read` and `sessions`: the stored rows of a session, and what a
//! session listing reports of it.

use a2_store_api::{log, ReadOptions, Result, SessionInfo, StoredEvent};

use crate::session::Session;

impl Session {
    /// The remaining rows within the validated `options`, clamped to the head.
    pub fn read(&self, options: &ReadOptions) -> Result<Vec<StoredEvent>> {
        let (after, through) = log::read_bounds(options, self.log.head())?;
        Ok(self.log.read(&self.id, after, through, options.limit))
    }

    /// The session as `sessions` lists it; `None` for a session never
    /// appended to, which is not listed.
    pub fn info(&self) -> Option<SessionInfo> {
        (!self.log.is_empty()).then(|| {
            SessionInfo::new(
                self.id.clone(),
                self.log.head(),
                self.log.clear_index(),
                self.log.reclaimed_through(),
            )
            .with_forked_from(self.forked_from.clone())
            .with_incarnation(self.incarnation)
        })
    }
}
