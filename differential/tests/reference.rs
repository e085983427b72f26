//! The runner against the memory backend itself (it must agree with itself),
//! and against a deliberately broken wrapper (the runner must catch the bug
//! and shrink it to a short reproduction).

use std::collections::BTreeMap;
use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_differential::{run_differential, Avoid, Config, DivergenceKind};
use a2_store_api::*;
use a2_store_memory::{MemoryOptions, MemoryStore};
use serde_json::Value;

struct Memory;

#[async_trait::async_trait]
impl StoreFactory for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(MemoryStore::with_options(MemoryOptions {
            clock,
            ids,
        })))
    }
}

/// Nothing open in the shared store-api rules.
const OPEN: Avoid = Avoid {
    log_type_changes: false,
    target_lane_conflicts: false,
    ambiguous_redrives: false,
    unlisted_work_claims: false,
};

#[tokio::test]
async fn memory_agrees_with_itself() {
    let config = Config {
        avoid: OPEN,
        ..Config::from_env(128, 40)
    };
    let summary = run_differential(&Memory, config)
        .await
        .unwrap_or_else(|divergence| panic!("{divergence}"));
    println!("{summary}");
    assert_eq!(summary.cases, config.cases);
    for exercised in [
        "complete:Completed+events",
        "claim_work:Busy",
        "claim_work:Settled",
        "claim_work:INVALID_INPUT",
        "list_work:listed=1",
        "append:INVALID_INPUT",
        "reschedule:Rescheduled(later=true)",
        "reschedule:Cancelled",
        "reschedule:Started",
        "pause:session",
        "pause:everywhere+until",
        "resume:resumed=true",
        "redrive_all:redriven>0=false,more=false",
        "fork:forked(cleared=false)",
        "fork:INVALID_INPUT",
        "delete_session:Deleted(ended>0=false)",
        "delete_session:Deleted(ended>0=true)",
        "delete_session:SESSION_IN_USE",
        "delete_session:NotFound",
        "prune:INVALID_INPUT",
    ] {
        // Prunes that delete, not only ones that find nothing idle.
        assert!(
            summary
                .outcomes
                .iter()
                .any(|(name, count)| name.starts_with("prune:pruned>0=true") && *count > 0),
            "no prune deleted anything: {summary}"
        );
        assert!(
            summary.outcomes.get(exercised).copied().unwrap_or(0) > 0,
            "{exercised} never happened: {summary}"
        );
    }
    assert!(
        summary
            .outcomes
            .keys()
            .any(|outcome| outcome.starts_with("claim_work:Claimed(sessions=2")),
        "no claim_work served two sessions: {summary}"
    );
}

/// A bug planted in the memory store.
#[derive(Clone, Copy)]
enum Bug {
    /// `claim_available` ignores `limit`.
    ClaimLimit,
    /// `claim_work` ignores its session list and serves every session.
    WorkSessionList,
}

/// The memory store with one bug.
struct Bugged(MemoryStore, Bug);

#[async_trait::async_trait]
impl Store for Bugged {
    async fn append(&self, s: &str, e: Vec<NewEvent>, o: AppendOptions) -> Result<AppendResult> {
        self.0.append(s, e, o).await
    }
    async fn claim_available(&self, mut request: ClaimRequest) -> Result<ClaimResult> {
        if matches!(self.1, Bug::ClaimLimit) {
            request.limit = None;
        }
        self.0.claim_available(request).await
    }
    async fn renew_claims(&self, r: RenewRequest) -> Result<RenewResult> {
        self.0.renew_claims(r).await
    }
    async fn complete_attempt(&self, r: CompleteRequest) -> Result<CompleteResult> {
        self.0.complete_attempt(r).await
    }
    async fn fail_attempt(&self, r: FailRequest) -> Result<FailResult> {
        self.0.fail_attempt(r).await
    }
    async fn dead_letters(&self, s: &str) -> Result<Vec<Head>> {
        self.0.dead_letters(s).await
    }
    async fn redrive(&self, r: RedriveRequest) -> Result<RedriveResult> {
        self.0.redrive(r).await
    }
    async fn clear(&self, r: ClearRequest) -> Result<ClearResult> {
        self.0.clear(r).await
    }
    async fn reclaim(&self, s: &str) -> Result<ReclaimResult> {
        self.0.reclaim(s).await
    }
    async fn read(&self, s: &str, o: ReadOptions) -> Result<Vec<StoredEvent>> {
        self.0.read(s, o).await
    }
    async fn wake_log(&self, s: &str, c: &ConsumerDeclaration) -> Result<WakeLogResult> {
        self.0.wake_log(s, c).await
    }
    async fn cursors(&self, s: &str) -> Result<Vec<Cursor>> {
        self.0.cursors(s).await
    }
    async fn subscribe(&self, s: &str, after: u64) -> Result<EventStream> {
        self.0.subscribe(s, after).await
    }
    async fn write_state(&self, s: &str, r: &str, w: Vec<StateWrite>) -> Result<()> {
        self.0.write_state(s, r, w).await
    }
    async fn read_state(&self, s: &str, r: &str, o: ReadStateOptions) -> Result<StateRead> {
        self.0.read_state(s, r, o).await
    }
    async fn set_presence(
        &self,
        s: &str,
        p: &str,
        v: BTreeMap<String, Value>,
        m: PresenceMeta,
    ) -> Result<PresenceResult> {
        self.0.set_presence(s, p, v, m).await
    }
    async fn read_presence(&self, s: &str) -> Result<Vec<PresenceRow>> {
        self.0.read_presence(s).await
    }
    async fn sessions(&self, o: ListSessions) -> Result<Vec<SessionInfo>> {
        self.0.sessions(o).await
    }

    async fn claim_work(&self, mut request: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        if matches!(self.1, Bug::WorkSessionList) && request.sessions.is_some() {
            request.sessions = None;
        }
        self.0.claim_work(request).await
    }

    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>> {
        self.0.list_work(request).await
    }
    async fn reschedule(
        &self,
        request: a2_store_api::RescheduleRequest,
    ) -> Result<a2_store_api::RescheduleResult> {
        self.0.reschedule(request).await
    }

    async fn pause(&self, request: a2_store_api::PauseRequest) -> Result<a2_store_api::Pause> {
        self.0.pause(request).await
    }

    async fn resume(
        &self,
        request: a2_store_api::ResumeRequest,
    ) -> Result<a2_store_api::ResumeResult> {
        self.0.resume(request).await
    }

    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<a2_store_api::Pause>> {
        self.0.pauses(session_id).await
    }

    async fn redrive_all(
        &self,
        request: a2_store_api::BulkRedrive,
    ) -> Result<a2_store_api::BulkRedriveResult> {
        self.0.redrive_all(request).await
    }

    async fn fork(&self, request: a2_store_api::ForkRequest) -> Result<a2_store_api::ForkResult> {
        self.0.fork(request).await
    }

    async fn delete_session(
        &self,
        request: a2_store_api::DeleteSessionRequest,
    ) -> Result<a2_store_api::DeleteSessionResult> {
        self.0.delete_session(request).await
    }

    async fn prune(
        &self,
        request: a2_store_api::PruneRequest,
    ) -> Result<a2_store_api::PruneResult> {
        self.0.prune(request).await
    }

    async fn rewrite_payloads(
        &self,
        request: a2_store_api::RewritePayloadsRequest,
    ) -> Result<a2_store_api::RewritePayloadsResult> {
        self.0.rewrite_payloads(request).await
    }
}

struct Broken(Bug);

#[async_trait::async_trait]
impl StoreFactory for Broken {
    fn name(&self) -> &str {
        match self.0 {
            Bug::ClaimLimit => "memory-ignoring-limit",
            Bug::WorkSessionList => "memory-ignoring-work-sessions",
        }
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(Bugged(
            MemoryStore::with_options(MemoryOptions { clock, ids }),
            self.0,
        )))
    }
}

#[tokio::test]
async fn a_broken_backend_is_caught_and_shrunk_to_a_short_rust_reproduction() {
    let divergence = run_differential(&Broken(Bug::ClaimLimit), Config::from_env(256, 40))
        .await
        .expect_err("ignoring the claim limit must be caught");
    let program = divergence.program();
    println!("{divergence}");
    assert!(
        matches!(divergence.kind, DivergenceKind::Result { .. }),
        "{divergence}"
    );
    // Minimal: one append of two targeted events, one claim with a limit.
    assert!(divergence.calls.len() <= 3, "not shrunk: {divergence}");
    let last = program
        .lines()
        .find(|line| line.starts_with("let result = "))
        .unwrap_or_default();
    assert!(
        last.contains("claim_available(") && last.contains("limit: Some(1)"),
        "{program}"
    );
    assert!(program.contains("ManualClock::new(") && program.contains("CounterIds::new(\"id-\")"));
}

#[tokio::test]
async fn a_work_claim_outside_its_sessions_is_caught_and_shrunk() {
    let config = Config {
        avoid: OPEN,
        ..Config::from_env(256, 40)
    };
    let divergence = run_differential(&Broken(Bug::WorkSessionList), config)
        .await
        .expect_err("claiming outside the session list must be caught");
    let program = divergence.program();
    println!("{divergence}");
    assert!(
        matches!(divergence.kind, DivergenceKind::Result { .. }),
        "{divergence}"
    );
    // Minimal: one append of targeted work, one claim naming another session.
    assert!(divergence.calls.len() <= 3, "not shrunk: {divergence}");
    let last = program
        .lines()
        .find(|line| line.starts_with("let result = "))
        .unwrap_or_default();
    assert!(
        last.contains("claim_work(") && last.contains("sessions: Some(vec!["),
        "{program}"
    );
}
