//! `fork`: copying a session's log after its clear into a new session.
//! [`ForkRequest::plan`] decides what is copied and what the new session
//! looks like; this module locks both sessions, copies the rows and
//! notifies the new session's subscribers.

use std::sync::{Arc, Mutex};

use a2_store_api::{ForkPlan, ForkRequest, ForkResult, Result, StoredEvent};

use crate::event_log::{to_stored, Row};
use crate::session::Session;
use crate::store::{lock, MemoryStore};

impl MemoryStore {
    /// [`Store::fork`](a2_store_api::Store::fork) of a validated request:
    /// both sessions are locked (in session-id order, as every call locking
    /// several sessions does), the plan is made from the source as it is
    /// then, and the rows are copied in one step.
    pub(crate) fn fork_session(&self, request: &ForkRequest) -> Result<ForkResult> {
        if request.into == request.session_id {
            // The plan refuses a fork into itself before it reads anything;
            // the session is not locked twice.
            return Err(match request.plan(None, 0) {
                Err(err) => err,
                Ok(_) => self.fork_inconsistent(&request.into),
            });
        }
        loop {
            if let Some(forked) = self.try_fork(request)? {
                return Ok(forked);
            }
        }
    }

    /// One try of [`Self::fork_session`]: `None` when one of the two
    /// sessions was deleted between its lookup and its lock (the caller
    /// looks them up again).
    fn try_fork(&self, request: &ForkRequest) -> Result<Option<ForkResult>> {
        let (source, into) = {
            let mut sessions = lock(&self.shared.sessions, "sessions map")?;
            let source = sessions.get(&request.session_id).cloned();
            let into = sessions.get_or_create(&request.into);
            (source, into)
        };
        // A source never written to is planned as the empty session it is
        // (the plan refuses it); it is not created.
        let source =
            source.unwrap_or_else(|| Arc::new(Mutex::new(Session::new(&request.session_id))));
        let (source_guard, mut into_guard) = if request.session_id < request.into {
            let source_guard = lock(&source, "session")?;
            (source_guard, lock(&into, "session")?)
        } else {
            let into_guard = lock(&into, "session")?;
            (lock(&source, "session")?, into_guard)
        };
        if source_guard.deleted || into_guard.deleted {
            return Ok(None);
        }
        let plan = request.plan(source_guard.info().as_ref(), into_guard.log.head())?;
        let rows = copied_rows(&source_guard, &plan)?;
        drop(source_guard);
        let before = into_guard.last_activity;
        let stored = into_guard.take_fork(&plan, rows, self.shared.clock.now_ms());
        into_guard.subscribers.notify(&stored);
        self.index_activity(&into_guard, before)?;
        let copied = plan.rows();
        let session = plan.session.with_incarnation(into_guard.incarnation);
        Ok(Some(ForkResult::new(session, copied)))
    }

    fn fork_inconsistent(&self, into: &str) -> a2_store_api::StoreError {
        a2_store_api::StoreError::Backend {
            message: format!("fork into '{into}': the plan accepted a fork it must refuse"),
            source: None,
        }
    }
}

/// The source's rows `plan.first ..= plan.through`, all of them or an error.
fn copied_rows(source: &Session, plan: &ForkPlan) -> Result<Vec<Row>> {
    (plan.first..=plan.through)
        .map(|index| {
            source
                .log
                .row(index)
                .cloned()
                .ok_or_else(|| source.corrupt(index))
        })
        .collect()
}

impl Session {
    /// Makes this session (never written to) the fork `plan` describes:
    /// `rows` stored from `plan.first` on, the source's clear index, nothing
    /// below it, and its origin. Returns the rows as stored.
    fn take_fork(&mut self, plan: &ForkPlan, rows: Vec<Row>, now: i64) -> Vec<StoredEvent> {
        self.mark_active(now, false);
        self.log.start_after(plan.first.saturating_sub(1));
        let mut stored = Vec::with_capacity(rows.len());
        for row in rows {
            let index = self.log.head() + 1;
            stored.push(to_stored(&self.id, index, &row));
            self.log.push(row);
        }
        self.log.set_clear_index(plan.session.clear_index);
        self.forked_from = plan.session.forked_from.clone();
        stored
    }
}
