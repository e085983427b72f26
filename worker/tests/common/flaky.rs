//! A store wrapper whose chosen calls fail after the inner store applied
//! them, as a connection lost at commit would.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use a2_store_api::{
    AppendOptions, AppendResult, ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult,
    ClearRequest, ClearResult, CompleteRequest, CompleteResult, ConsumerDeclaration, Cursor,
    EventStream, FailRequest, FailResult, Head, ListSessions, ListWork, NewEvent, PresenceMeta,
    PresenceResult, PresenceRow, ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest,
    RedriveResult, RenewRequest, RenewResult, Result, SessionInfo, SessionWork, StateRead,
    StateWrite, Store, StoreError, StoredEvent, WakeLogResult,
};
use async_trait::async_trait;
use serde_json::Value;

/// Forwards every call; the first `n` appends, completions and prunes
/// (each counted on its own) are applied, then answered with a `Backend` error.
pub struct LostAtCommit {
    pub inner: Arc<dyn Store>,
    pub appends_to_lose: AtomicU32,
    pub completions_to_lose: AtomicU32,
    pub prunes_to_lose: AtomicU32,
}

impl LostAtCommit {
    /// Wraps `inner`, losing nothing until a counter is set.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            appends_to_lose: AtomicU32::new(0),
            completions_to_lose: AtomicU32::new(0),
            prunes_to_lose: AtomicU32::new(0),
        }
    }
}

fn lost() -> StoreError {
    StoreError::Backend {
        message: "connection lost at commit".into(),
        source: None,
    }
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[async_trait]
impl Store for LostAtCommit {
    async fn append(&self, s: &str, e: Vec<NewEvent>, o: AppendOptions) -> Result<AppendResult> {
        let result = self.inner.append(s, e, o).await?;
        if take(&self.appends_to_lose) {
            return Err(lost());
        }
        Ok(result)
    }
    async fn claim_available(&self, r: ClaimRequest) -> Result<ClaimResult> {
        self.inner.claim_available(r).await
    }
    async fn renew_claims(&self, r: RenewRequest) -> Result<RenewResult> {
        self.inner.renew_claims(r).await
    }
    async fn complete_attempt(&self, r: CompleteRequest) -> Result<CompleteResult> {
        let result = self.inner.complete_attempt(r).await?;
        if take(&self.completions_to_lose) {
            return Err(lost());
        }
        Ok(result)
    }
    async fn fail_attempt(&self, r: FailRequest) -> Result<FailResult> {
        self.inner.fail_attempt(r).await
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
    async fn claim_work(&self, r: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        self.inner.claim_work(r).await
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
        let result = self.inner.prune(request).await?;
        if take(&self.prunes_to_lose) {
            return Err(lost());
        }
        Ok(result)
    }

    async fn rewrite_payloads(
        &self,
        request: a2_store_api::RewritePayloadsRequest,
    ) -> Result<a2_store_api::RewritePayloadsResult> {
        self.inner.rewrite_payloads(request).await
    }
}
