//! The suite catches broken backends: wrappers around the memory store that
//! each break one rule must fail the cases named for that rule, and a
//! panicking backend must yield a report, not a crash.

use std::collections::BTreeMap;
use std::sync::Arc;

use a2_conformance::{run, run_case, run_matching, Capabilities, Outcome, Report, StoreFactory};
use a2_store_api::{
    AppendOptions, AppendResult, ClaimRequest, ClaimResult, ClearRequest, ClearResult, Clock,
    CompleteRequest, CompleteResult, ConsumerDeclaration, Cursor, EventStream, FailRequest,
    FailResult, Head, IdGenerator, ListSessions, NewEvent, PresenceMeta, PresenceResult,
    PresenceRow, ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult,
    RenewRequest, RenewResult, Result, SessionInfo, StateRead, StateWrite, Store, StoredEvent,
    WakeLogResult,
};
use a2_store_memory::{MemoryOptions, MemoryStore};
use async_trait::async_trait;
use serde_json::Value;

/// The one rule a [`Broken`] store breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// Drops every cause before appending or clearing: attempts are never fenced.
    ForgetsFencing,
    /// Ignores `exclude` on claims.
    IgnoresExclude,
    /// Hands busy (claimed, unexpired) heads out again instead of `Busy`,
    /// so a lane has two claims at once.
    HandsOutBusyHeads,
    /// Panics in `reclaim`.
    PanicsOnReclaim,
    /// Drops the incarnation of completions, failures and renewals: a
    /// worker's attempt from before a delete reaches the new session.
    ForgetsIncarnations,
}

struct Broken {
    inner: MemoryStore,
    flaw: Flaw,
}

#[async_trait]
impl Store for Broken {
    async fn append(
        &self,
        session_id: &str,
        mut events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult> {
        if self.flaw == Flaw::ForgetsFencing {
            for event in &mut events {
                event.cause = None;
            }
        }
        self.inner.append(session_id, events, options).await
    }

    async fn claim_available(&self, mut request: ClaimRequest) -> Result<ClaimResult> {
        if self.flaw == Flaw::IgnoresExclude {
            request.exclude.clear();
        }
        let result = self.inner.claim_available(request.clone()).await?;
        if self.flaw != Flaw::HandsOutBusyHeads {
            return Ok(result);
        }
        // Busy lanes are "claimed" anyway: report the busy heads as claimed.
        match result {
            ClaimResult::Busy { .. } => {
                let heads: Vec<Head> = self
                    .inner
                    .cursors(&request.session_id)
                    .await?
                    .into_iter()
                    .filter(|cursor| cursor.dispatch.claim_holder.is_some())
                    .filter_map(|cursor| {
                        let index = cursor.head?;
                        Some(Head::new(
                            StoredEvent::new(
                                request.session_id.clone(),
                                index,
                                format!("early-{index}"),
                                "msg",
                                Value::Null,
                                0,
                            ),
                            cursor.consumer,
                            cursor.lane,
                            cursor.dispatch,
                        ))
                    })
                    .collect();
                Ok(ClaimResult::Claimed {
                    heads,
                    dead_lettered: vec![],
                    head: 0,
                })
            }
            other => Ok(other),
        }
    }

    async fn renew_claims(&self, mut request: RenewRequest) -> Result<RenewResult> {
        if self.flaw == Flaw::ForgetsIncarnations {
            request.incarnation = None;
        }
        self.inner.renew_claims(request).await
    }

    async fn complete_attempt(&self, mut request: CompleteRequest) -> Result<CompleteResult> {
        if self.flaw == Flaw::ForgetsIncarnations {
            request.incarnation = None;
        }
        self.inner.complete_attempt(request).await
    }

    async fn fail_attempt(&self, mut request: FailRequest) -> Result<FailResult> {
        if self.flaw == Flaw::ForgetsIncarnations {
            request.incarnation = None;
        }
        self.inner.fail_attempt(request).await
    }

    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>> {
        self.inner.dead_letters(session_id).await
    }

    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult> {
        self.inner.redrive(request).await
    }

    async fn clear(&self, mut request: ClearRequest) -> Result<ClearResult> {
        if self.flaw == Flaw::ForgetsFencing {
            request.cause = None;
        }
        self.inner.clear(request).await
    }

    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult> {
        if self.flaw == Flaw::PanicsOnReclaim {
            panic!("reclaim is broken on purpose");
        }
        self.inner.reclaim(session_id).await
    }

    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>> {
        self.inner.read(session_id, options).await
    }

    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult> {
        self.inner.wake_log(session_id, consumer).await
    }

    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>> {
        self.inner.cursors(session_id).await
    }

    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream> {
        self.inner.subscribe(session_id, after).await
    }

    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<()> {
        self.inner.write_state(session_id, reducer, writes).await
    }

    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead> {
        self.inner.read_state(session_id, reducer, options).await
    }

    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult> {
        self.inner
            .set_presence(session_id, participant, values, meta)
            .await
    }

    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>> {
        self.inner.read_presence(session_id).await
    }

    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>> {
        self.inner.sessions(options).await
    }

    async fn claim_work(
        &self,
        request: a2_store_api::ClaimWorkRequest,
    ) -> Result<a2_store_api::ClaimWorkResult> {
        self.inner.claim_work(request).await
    }

    async fn list_work(
        &self,
        request: a2_store_api::ListWork,
    ) -> Result<Vec<a2_store_api::SessionWork>> {
        self.inner.list_work(request).await
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

/// Memory stores, optionally wrapped with a flaw, with the given capabilities.
struct Factory {
    flaw: Option<Flaw>,
    capabilities: Capabilities,
}

#[async_trait]
impl StoreFactory for Factory {
    fn name(&self) -> &str {
        match self.flaw {
            None => "memory",
            Some(_) => "broken",
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    async fn create(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        let inner = MemoryStore::with_options(MemoryOptions { clock, ids });
        Ok(match self.flaw {
            None => Arc::new(inner),
            Some(flaw) => Arc::new(Broken { inner, flaw }),
        })
    }

    async fn create_pair(
        &self,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
    ) -> Result<Option<[Arc<dyn Store>; 2]>> {
        let store = MemoryStore::with_options(MemoryOptions { clock, ids });
        Ok(Some([Arc::new(store.clone()), Arc::new(store)]))
    }
}

fn broken(flaw: Flaw) -> Factory {
    Factory {
        flaw: Some(flaw),
        capabilities: Capabilities::ALL,
    }
}

fn failed(report: &Report) -> Vec<&str> {
    report.failures().map(|case| case.name.as_str()).collect()
}

fn assert_fails(report: &Report, expected: &[&str]) {
    let failed = failed(report);
    for name in expected {
        assert!(
            failed.contains(name),
            "{name} should fail against {}; failed: {failed:?}\n{report}",
            report.backend
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_forgets_incarnations_fails_the_incarnation_cases() {
    let report = run(&broken(Flaw::ForgetsIncarnations)).await;
    assert_fails(&report, &["attempts_from_before_a_delete_are_superseded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_forgets_fencing_fails_the_fencing_cases() {
    let report = run(&broken(Flaw::ForgetsFencing)).await;
    assert_fails(
        &report,
        &[
            "append_with_stale_attempt_cause_is_superseded",
            "append_with_dead_lettered_cause_is_superseded",
            "append_with_completed_cause_is_superseded",
            "append_with_cause_below_clear_is_superseded",
            "append_with_unknown_cause_is_superseded",
            "append_fenced_batch_is_atomic",
            "append_with_current_cause_is_accepted",
            "clear_fenced_by_stale_cause_is_superseded",
            "attempts_below_clear_are_superseded",
        ],
    );
    // Cases about other rules still pass.
    for name in [
        "lane_cursor_hands_out_one_head_at_a_time",
        "presence_later_at_wins",
    ] {
        assert_eq!(
            report.case(name).map(|c| &c.outcome),
            Some(&Outcome::Passed)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_ignores_exclude_fails_the_exclude_cases() {
    let report = run_matching(&broken(Flaw::IgnoresExclude), |name| {
        name.starts_with("claim_")
    })
    .await;
    assert_fails(
        &report,
        &[
            "claim_excludes_event_cursor_by_index",
            "claim_excludes_lane_cursor_whatever_its_head",
            "claim_excludes_log_cursor_whatever_its_head",
        ],
    );
    assert_eq!(report.failed(), 3, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_hands_out_busy_heads_fails_the_lane_and_busy_cases() {
    let report = run(&broken(Flaw::HandsOutBusyHeads)).await;
    assert_fails(
        &report,
        &[
            "lane_cursor_hands_out_one_head_at_a_time",
            "claim_never_hands_busy_head_to_anyone",
            "claim_on_busy_heads_is_busy_with_earliest_expiry",
            "spec_worked_example",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_backend_yields_a_failed_row_not_a_crash() {
    let factory = broken(Flaw::PanicsOnReclaim);
    let case = run_case(&factory, "reclaim_without_clear_is_done")
        .await
        .expect("the case exists");
    match &case.outcome {
        Outcome::Failed { reason } => assert!(
            reason.contains("panicked") && reason.contains("broken on purpose"),
            "{reason}"
        ),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(run_case(&factory, "no_such_case").await.is_none());
}

/// A factory that panics while creating stores.
struct PanickingFactory;

#[async_trait]
impl StoreFactory for PanickingFactory {
    fn name(&self) -> &str {
        "panicking"
    }

    async fn create(
        &self,
        _clock: Arc<dyn Clock>,
        _ids: Arc<dyn IdGenerator>,
    ) -> Result<Arc<dyn Store>> {
        panic!("no database today");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_factory_yields_failed_rows() {
    let report = run_matching(&PanickingFactory, |name| name.starts_with("read_")).await;
    assert!(report.cases.len() >= 5, "{report}");
    assert_eq!(report.failed(), report.cases.len(), "{report}");
    for case in &report.cases {
        match &case.outcome {
            Outcome::Failed { reason } => assert!(reason.contains("no database today"), "{reason}"),
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_capabilities_skip_cases_and_count_them_as_skipped() {
    let factory = Factory {
        flaw: None,
        capabilities: Capabilities::NONE,
    };
    let report = run(&factory).await;
    assert!(report.is_success(), "{report}");
    // Every two-instance case (area `multi`) is skipped, and only those.
    let pair_cases = report.cases.iter().filter(|c| c.area == "multi").count();
    assert!(pair_cases >= 12, "{report}");
    assert_eq!(report.skipped(), pair_cases, "{report}");
    assert_eq!(
        report.passed() + report.failed() + report.skipped(),
        report.cases.len()
    );
    let skipped = report
        .case("subscribe_sees_appends_from_other_instance")
        .expect("listed");
    assert!(matches!(skipped.outcome, Outcome::Skipped { .. }));
    assert!(report
        .to_string()
        .contains("skipped: the backend does not declare"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_backend_passes_every_case() {
    let report = run(&Factory {
        flaw: None,
        capabilities: Capabilities::ALL,
    })
    .await;
    assert!(report.cases.len() > 150, "{report}");
    assert_eq!(report.passed(), report.cases.len(), "{report}");
    assert_eq!(a2_conformance::case_names().count(), report.cases.len());
}
