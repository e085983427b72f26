//! A store wrapper that watches a worker's claims: what each asked for,
//! how many were in flight at once, and whether the heads claimed and not
//! yet settled plus the heads the claims in flight ask for ever exceeded a
//! bound (the worker's free slots).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use a2_store_api::{
    AppendOptions, AppendResult, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult,
    ClearRequest, ClearResult, CompleteRequest, CompleteResult, ConsumerDeclaration, Cursor,
    EventStream, FailRequest, FailResult, Head, ListSessions, ListWork, NewEvent, PresenceMeta,
    PresenceResult, PresenceRow, ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest,
    RedriveResult, RenewRequest, RenewResult, Result, SessionInfo, SessionWork, StateRead,
    StateWrite, Store, StoredEvent, WakeLogResult,
};
use async_trait::async_trait;
use serde_json::Value;

/// What [`Watched`] saw of the claims made through it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimLog {
    /// The limit of each claim, in the order they were made.
    pub asked: Vec<usize>,
    /// Whether each claim waited for work (had a `wait_ms`), in that order.
    pub waited: Vec<bool>,
    /// The most claims in flight at once.
    pub most_in_flight: usize,
    /// The most claims that wait for work in flight at once.
    pub most_waiting: usize,
    /// The most of (heads claimed and not yet completed or failed, plus the
    /// heads asked for by the claims in flight) at any time.
    pub most_committed: usize,
    /// Heads claimed and not yet settled now.
    pub outstanding: usize,
    in_flight: usize,
    waiting: usize,
    asking: usize,
}

/// Forwards every call to `inner` and records the claims in a [`ClaimLog`].
pub struct Watched {
    pub inner: Arc<dyn Store>,
    log: Mutex<ClaimLog>,
}

impl Watched {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            log: Mutex::new(ClaimLog::default()),
        })
    }

    /// What it saw so far.
    pub fn log(&self) -> ClaimLog {
        self.log.lock().unwrap().clone()
    }

    fn claim_started(&self, asked: usize, waits: bool) {
        let mut log = self.log.lock().unwrap();
        log.asked.push(asked);
        log.waited.push(waits);
        log.in_flight += 1;
        log.most_in_flight = log.most_in_flight.max(log.in_flight);
        if waits {
            log.waiting += 1;
            log.most_waiting = log.most_waiting.max(log.waiting);
        }
        log.asking += asked;
        log.most_committed = log.most_committed.max(log.outstanding + log.asking);
    }

    fn claim_ended(&self, asked: usize, waits: bool, got: usize) {
        let mut log = self.log.lock().unwrap();
        log.in_flight -= 1;
        if waits {
            log.waiting -= 1;
        }
        log.asking -= asked;
        log.outstanding += got;
        log.most_committed = log.most_committed.max(log.outstanding + log.asking);
    }

    fn settled(&self) {
        let mut log = self.log.lock().unwrap();
        log.outstanding = log.outstanding.saturating_sub(1);
    }
}

#[async_trait]
impl Store for Watched {
    async fn append(&self, s: &str, e: Vec<NewEvent>, o: AppendOptions) -> Result<AppendResult> {
        self.inner.append(s, e, o).await
    }
    async fn claim_available(&self, r: ClaimRequest) -> Result<ClaimResult> {
        self.inner.claim_available(r).await
    }
    async fn renew_claims(&self, r: RenewRequest) -> Result<RenewResult> {
        self.inner.renew_claims(r).await
    }
    async fn complete_attempt(&self, r: CompleteRequest) -> Result<CompleteResult> {
        let result = self.inner.complete_attempt(r).await?;
        self.settled();
        Ok(result)
    }
    async fn fail_attempt(&self, r: FailRequest) -> Result<FailResult> {
        let result = self.inner.fail_attempt(r).await?;
        self.settled();
        Ok(result)
    }
    async fn dead_letters(&self, s: &str) -> Result<Vec<Head>> {
        self.inner.dead_letters(s).await
    }
    async fn redrive(&self, r: RedriveRequest) -> Result<RedriveResult> {
        self.inner.redrive(r).await
    }
    async fn clear(&self, r: ClearRequest) -> Result<ClearResult> {
        self.inner.clear(r).await
    }
    async fn reclaim(&self, s: &str) -> Result<ReclaimResult> {
        self.inner.reclaim(s).await
    }
    async fn read(&self, s: &str, o: ReadOptions) -> Result<Vec<StoredEvent>> {
        self.inner.read(s, o).await
    }
    async fn wake_log(&self, s: &str, c: &ConsumerDeclaration) -> Result<WakeLogResult> {
        self.inner.wake_log(s, c).await
    }
    async fn cursors(&self, s: &str) -> Result<Vec<Cursor>> {
        self.inner.cursors(s).await
    }
    async fn subscribe(&self, s: &str, after: u64) -> Result<EventStream> {
        self.inner.subscribe(s, after).await
    }
    async fn write_state(&self, s: &str, r: &str, w: Vec<StateWrite>) -> Result<()> {
        self.inner.write_state(s, r, w).await
    }
    async fn read_state(&self, s: &str, r: &str, o: ReadStateOptions) -> Result<StateRead> {
        self.inner.read_state(s, r, o).await
    }
    async fn set_presence(
        &self,
        s: &str,
        p: &str,
        v: BTreeMap<String, Value>,
        m: PresenceMeta,
    ) -> Result<PresenceResult> {
        self.inner.set_presence(s, p, v, m).await
    }
    async fn read_presence(&self, s: &str) -> Result<Vec<PresenceRow>> {
        self.inner.read_presence(s).await
    }
    async fn sessions(&self, o: ListSessions) -> Result<Vec<SessionInfo>> {
        self.inner.sessions(o).await
    }
    fn claims_in_one_step(&self) -> bool {
        self.inner.claims_in_one_step()
    }

    async fn claim_work(&self, r: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        let asked = r.head_limit();
        let waits = r.wait_ms.is_some();
        self.claim_started(asked, waits);
        let result = self.inner.claim_work(r).await;
        let got = match &result {
            Ok(claimed) => claimed.heads().count(),
            Err(_) => 0,
        };
        self.claim_ended(asked, waits, got);
        result
    }
    async fn list_work(&self, r: ListWork) -> Result<Vec<SessionWork>> {
        self.inner.list_work(r).await
    }
    async fn reschedule(
        &self,
        request: a2_store_api::RescheduleRequest,
    ) -> Result<a2_store_api::RescheduleResult> {
        self.inner.reschedule(request).await
    }

    async fn pause(&self, request: a2_store_api::PauseRequest) -> Result<a2_store_api::Pause> {
        self.inner.pause(request).await
    }

    async fn resume(
        &self,
        request: a2_store_api::ResumeRequest,
    ) -> Result<a2_store_api::ResumeResult> {
        self.inner.resume(request).await
    }

    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<a2_store_api::Pause>> {
        self.inner.pauses(session_id).await
    }

    async fn redrive_all(
        &self,
        request: a2_store_api::BulkRedrive,
    ) -> Result<a2_store_api::BulkRedriveResult> {
        self.inner.redrive_all(request).await
    }

    async fn fork(&self, request: a2_store_api::ForkRequest) -> Result<a2_store_api::ForkResult> {
        self.inner.fork(request).await
    }

    async fn delete_session(
        &self,
        request: a2_store_api::DeleteSessionRequest,
    ) -> Result<a2_store_api::DeleteSessionResult> {
        self.inner.delete_session(request).await
    }

    async fn prune(
        &self,
        request: a2_store_api::PruneRequest,
    ) -> Result<a2_store_api::PruneResult> {
        self.inner.prune(request).await
    }

    async fn rewrite_payloads(
        &self,
        request: a2_store_api::RewritePayloadsRequest,
    ) -> Result<a2_store_api::RewritePayloadsResult> {
        self.inner.rewrite_payloads(request).await
    }
}
