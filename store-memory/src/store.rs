//! [`MemoryStore`]: the sessions map, per-session locks, and the
//! [`Store`] trait implementation: each method validates its input with the
//! matching [`a2_store_api::validate`] function, then runs the operation on
//! its session under the session's lock.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use a2_store_api::{
    validate, AppendOptions, AppendResult, BulkRedrive, BulkRedriveResult, ClaimRequest,
    ClaimResult, ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, Clock,
    CompleteRequest, CompleteResult, ConsumerDeclaration, Cursor, DeleteSessionRequest,
    DeleteSessionResult, EventStream, FailRequest, FailResult, ForkRequest, ForkResult, Head,
    IdGenerator, ListSessions, ListWork, NewEvent, Pause, PauseRequest, PresenceMeta,
    PresenceResult, PresenceRow, PruneRequest, PruneResult, RandomIds, ReadOptions,
    ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult, RenewRequest, RenewResult,
    RescheduleRequest, RescheduleResult, Result, ResumeRequest, ResumeResult,
    RewritePayloadsRequest, RewritePayloadsResult, SessionInfo, SessionWork, StateRead, StateWrite,
    Store, StoreError, StoredEvent, SystemClock, WakeLogResult, WorkSignal,
};
use async_trait::async_trait;
use serde_json::Value;

use crate::pause::PauseTable;
use crate::session::{Env, Session};
use crate::session_map::SessionMap;
use crate::work::{Touch, WorkIndex};

/// What a [`MemoryStore`] runs on: its clock and id generator.
#[derive(Debug, Clone)]
pub struct MemoryOptions {
    /// The only source of time (leases, retry delays, presence TTLs, `created_at`).
    pub clock: Arc<dyn Clock>,
    /// The only source of generated event ids.
    pub ids: Arc<dyn IdGenerator>,
}

impl Default for MemoryOptions {
    /// The system clock and time-ordered random UUIDs.
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
        }
    }
}

/// The in-memory reference backend of the session store.
///
/// Cloning is cheap and clones share the same sessions. `Send + Sync`: each
/// session has its own lock, so calls on different sessions run in parallel
/// and calls on one session are serialised (each call is one atomic step).
/// Nothing survives the last clone being dropped; live subscriptions end then.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    /// Every session by id (see [`crate::session_map`]).
    pub(crate) sessions: Mutex<SessionMap>,
    /// The work rows of every session (see [`crate::work`]).
    pub(crate) work: Mutex<WorkIndex>,
    /// Wakes claimers waiting for work.
    pub(crate) signal: WorkSignal,
    /// The paused consumers of every session (see [`crate::pause`]).
    pub(crate) pauses: Mutex<PauseTable>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("clock", &self.clock)
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

/// A lock poisoned by a panic while it was held: the state behind it may
/// be half-changed, so the store refuses to use it.
#[derive(Debug)]
struct LockPoisoned(&'static str);

impl fmt::Display for LockPoisoned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} lock was poisoned by a panic", self.0)
    }
}

impl std::error::Error for LockPoisoned {}

pub(crate) fn lock<'a, T>(mutex: &'a Mutex<T>, what: &'static str) -> Result<MutexGuard<'a, T>> {
    mutex
        .lock()
        .map_err(|_| StoreError::backend(format!("{what} state unusable"), LockPoisoned(what)))
}

impl Default for MemoryStore {
    /// Same as [`MemoryStore::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock and random UUID ids.
    pub fn new() -> Self {
        Self::with_options(MemoryOptions::default())
    }

    /// An empty store on the given clock and id generator.
    pub fn with_options(options: MemoryOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                clock: options.clock,
                ids: options.ids,
                sessions: Mutex::new(SessionMap::default()),
                work: Mutex::new(WorkIndex::default()),
                signal: WorkSignal::new(),
                pauses: Mutex::new(PauseTable::default()),
            }),
        }
    }

    /// One session's claim of a validated request, rewriting the work rows
    /// of the consumers it served.
    pub(crate) fn claim_in_session(&self, mut request: ClaimRequest) -> Result<ClaimResult> {
        // Sessions name themselves by their own id: the request's copy is
        // taken, not cloned.
        let session_id = std::mem::take(&mut request.session_id);
        let served: Option<Vec<String>> = request
            .consumers
            .as_ref()
            .map(|consumers| consumers.iter().map(|c| c.name.clone()).collect());
        let pauses = self.pauses_covering(&session_id)?;
        self.with_session(&session_id, |session, env| {
            let claimed = session.claim(env, request, &pauses)?;
            self.sync_work(session, Touch::Served(served.as_deref()))?;
            Ok(claimed)
        })
    }

    fn env(&self) -> Env<'_> {
        Env {
            clock: self.shared.clock.as_ref(),
            ids: self.shared.ids.as_ref(),
        }
    }

    /// Runs `op` on session `session_id` under its lock, creating the
    /// session (a session deleted while this call waited for its lock is
    /// looked up again: the call runs on the id's new session). Keeps the
    /// activity order when `op` stored something.
    fn with_session<R>(
        &self,
        session_id: &str,
        op: impl FnOnce(&mut Session, Env<'_>) -> Result<R>,
    ) -> Result<R> {
        let mut op = Some(op);
        loop {
            let session = lock(&self.shared.sessions, "sessions map")?.get_or_create(session_id);
            let mut guard = lock(&session, "session")?;
            if guard.deleted {
                continue;
            }
            let Some(op) = op.take() else {
                return Err(guard.inconsistent("a call ran twice"));
            };
            let before = guard.last_activity;
            let result = op(&mut guard, self.env());
            self.index_activity(&guard, before)?;
            return result;
        }
    }

    /// Moves `session` in the activity order when its last activity is no
    /// longer `before`. Runs under the session's lock.
    pub(crate) fn index_activity(&self, session: &Session, before: Option<i64>) -> Result<()> {
        match session.last_activity {
            Some(after) if Some(after) != before => {
                lock(&self.shared.sessions, "sessions map")?.touch(&session.id, before, after);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Runs `op` on session `session_id` under its lock; a session never
    /// written to is seen as a fresh empty one (and is not created).
    pub(crate) fn with_existing<R>(
        &self,
        session_id: &str,
        op: impl FnOnce(&mut Session, Env<'_>) -> Result<R>,
    ) -> Result<R> {
        loop {
            let session = lock(&self.shared.sessions, "sessions map")?
                .get(session_id)
                .cloned();
            let Some(session) = session else {
                return op(&mut Session::new(session_id), self.env());
            };
            let mut guard = lock(&session, "session")?;
            if !guard.deleted {
                return op(&mut guard, self.env());
            }
        }
    }

    /// Runs `check_invariants` on every session (tests only).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        let sessions: Vec<_> = lock(&self.shared.sessions, "sessions map")
            .map_err(|err| err.to_string())?
            .values()
            .cloned()
            .collect();
        for session in sessions {
            let guard = lock(&session, "session").map_err(|err| err.to_string())?;
            guard
                .check_invariants()
                .map_err(|err| format!("session '{}': {err}", guard.id))?;
        }
        Ok(())
    }

    /// Runs `op` on the state of session `session_id` (tests only).
    #[cfg(test)]
    pub(crate) fn inspect<R>(&self, session_id: &str, op: impl FnOnce(&Session) -> R) -> R {
        self.with_existing(session_id, |session, _| Ok(op(session)))
            .unwrap_or_else(|err| panic!("{err}"))
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn append(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult> {
        validate::append(session_id, &events, &options)?;
        let pauses = self.pauses_covering(session_id)?;
        self.with_session(session_id, |session, env| {
            let appended = session.append(env, events, options, &pauses)?;
            self.sync_work(session, Touch::All)?;
            Ok(appended)
        })
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult> {
        validate::claim_available(&request)?;
        self.claim_in_session(request)
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult> {
        validate::renew_claims(&request)?;
        let session_id = request.session_id.clone();
        self.with_session(&session_id, |session, env| {
            let renewed = session.renew(env, request)?;
            if !renewed.renewed.is_empty() {
                self.sync_work(session, Touch::All)?;
            }
            Ok(renewed)
        })
    }

    async fn complete_attempt(&self, mut request: CompleteRequest) -> Result<CompleteResult> {
        validate::complete_attempt(&request)?;
        // Sessions name themselves by their own id: the request's copy is
        // taken, not cloned.
        let session_id = std::mem::take(&mut request.session_id);
        self.with_session(&session_id, |session, env| {
            let completed = session.complete(env, request)?;
            self.sync_work(session, Touch::All)?;
            Ok(completed)
        })
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult> {
        validate::fail_attempt(&request)?;
        let session_id = request.session_id.clone();
        self.with_session(&session_id, |session, env| {
            let failed = session.fail(env, request)?;
            self.sync_work(session, Touch::All)?;
            Ok(failed)
        })
    }

    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>> {
        validate::dead_letters(session_id)?;
        self.with_existing(session_id, |session, _| session.dead_letters())
    }

    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult> {
        validate::redrive(&request)?;
        let session_id = request.session_id.clone();
        let pauses = self.pauses_covering(&session_id)?;
        self.with_session(&session_id, |session, env| {
            let redriven = session.redrive(request, &pauses, env.clock.now_ms())?;
            self.sync_work(session, Touch::All)?;
            Ok(redriven)
        })
    }

    async fn clear(&self, request: ClearRequest) -> Result<ClearResult> {
        validate::clear(&request)?;
        let session_id = request.session_id.clone();
        self.with_session(&session_id, |session, env| {
            let cleared = session.clear(env, request)?;
            self.sync_work(session, Touch::All)?;
            Ok(cleared)
        })
    }

    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult> {
        validate::reclaim(session_id)?;
        self.with_existing(session_id, |session, _| Ok(session.reclaim()))
    }

    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>> {
        validate::read(session_id, &options)?;
        self.with_existing(session_id, |session, _| session.read(&options))
    }

    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult> {
        let log = validate::wake_log(session_id, consumer)?;
        self.with_session(session_id, |session, _| {
            let woken = session.wake_log(consumer, log)?;
            self.sync_work(session, Touch::All)?;
            Ok(woken)
        })
    }

    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>> {
        validate::cursors(session_id)?;
        let pauses = self.pauses_covering(session_id)?;
        self.with_existing(session_id, |session, env| {
            Ok(session.list_cursors(&pauses, env.clock.now_ms()))
        })
    }

    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream> {
        validate::subscribe(session_id)?;
        self.with_session(session_id, |session, _| {
            let backlog = session
                .log
                .read(&session.id, after, session.log.head(), None);
            Ok(session.subscribers.subscribe(backlog, after))
        })
    }

    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<()> {
        validate::write_state(session_id, reducer, &writes)?;
        self.with_session(session_id, |session, _| {
            session.write_state(reducer, writes);
            Ok(())
        })
    }

    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead> {
        validate::read_state(session_id, reducer)?;
        self.with_existing(session_id, |session, _| {
            Ok(session.read_state(reducer, options))
        })
    }

    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult> {
        validate::set_presence(session_id, participant, &values, &meta)?;
        self.with_session(session_id, |session, env| {
            let now = env.clock.now_ms();
            let written = session.presence.set(participant, values, meta, now);
            if written.applied_count > 0 {
                session.mark_active(now, true);
            }
            Ok(written)
        })
    }

    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>> {
        validate::read_presence(session_id)?;
        self.with_existing(session_id, |session, env| {
            Ok(session.presence.read(env.clock.now_ms()))
        })
    }

    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>> {
        // Chunks of the page's size, so a page costs its size (plus the
        // empty sessions it steps over), not the number of sessions after it.
        let limit = options.limit.unwrap_or(usize::MAX);
        let chunk = limit.clamp(1, 1_000);
        let mut listed = Vec::new();
        let mut after: Option<Arc<str>> = options.after.as_deref().map(Arc::from);
        while listed.len() < limit {
            let candidates: Vec<(Arc<str>, Arc<Mutex<Session>>)> =
                lock(&self.shared.sessions, "sessions map")?.page_after(after.as_deref(), chunk);
            let Some((last, _)) = candidates.last() else {
                break;
            };
            after = Some(last.clone());
            for (_, session) in candidates {
                if listed.len() >= limit {
                    break;
                }
                if let Some(info) = lock(&session, "session")?.info() {
                    listed.push(info);
                }
            }
        }
        Ok(listed)
    }

    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        validate::claim_work(&request)?;
        a2_store_api::work::claim_work(self, &request).await
    }

    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>> {
        validate::list_work(&request)?;
        self.list(&request)
    }

    async fn reschedule(&self, request: RescheduleRequest) -> Result<RescheduleResult> {
        validate::reschedule(&request)?;
        let session_id = request.session_id.clone();
        self.with_existing(&session_id, |session, env| {
            let step = session.reschedule(env, &request)?;
            if step.changes() {
                self.sync_work(session, Touch::All)?;
            }
            Ok(step.result())
        })
    }

    async fn pause(&self, request: PauseRequest) -> Result<Pause> {
        self.pause_consumer(request)
    }

    async fn resume(&self, request: ResumeRequest) -> Result<ResumeResult> {
        self.resume_consumer(request)
    }

    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>> {
        self.list_pauses(session_id)
    }

    async fn redrive_all(&self, request: BulkRedrive) -> Result<BulkRedriveResult> {
        validate::redrive_all(&request)?;
        self.redrive_matching(&request)
    }

    async fn fork(&self, request: ForkRequest) -> Result<ForkResult> {
        validate::fork(&request)?;
        self.fork_session(&request)
    }

    async fn delete_session(&self, request: DeleteSessionRequest) -> Result<DeleteSessionResult> {
        validate::delete_session(&request)?;
        self.delete(&request)
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneResult> {
        validate::prune(&request)?;
        self.prune_idle(&request)
    }

    async fn rewrite_payloads(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult> {
        validate::rewrite_payloads(&request)?;
        self.with_existing(&request.session_id, |session, env| {
            session.rewrite_payloads(&request, env.clock.now_ms())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::ErrorCode;

    #[tokio::test]
    async fn a_poisoned_session_lock_is_a_backend_error_not_a_panic() {
        let store = MemoryStore::new();
        store
            .append(
                "s",
                vec![NewEvent::new("msg", Value::Null)],
                AppendOptions::default(),
            )
            .await
            .unwrap();
        let session = lock(&store.shared.sessions, "sessions map")
            .unwrap()
            .get("s")
            .cloned()
            .unwrap();
        let poisoner = std::thread::spawn(move || {
            let _guard = session.lock();
            panic!("poison the session lock");
        });
        assert!(poisoner.join().is_err());
        let err = store.read("s", ReadOptions::default()).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Backend);
        assert!(std::error::Error::source(&err).is_some());
        let err = store
            .append(
                "s",
                vec![NewEvent::new("msg", Value::Null)],
                AppendOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Backend);
        // Other sessions are unaffected.
        store
            .append(
                "t",
                vec![NewEvent::new("msg", Value::Null)],
                AppendOptions::default(),
            )
            .await
            .unwrap();
    }
}
