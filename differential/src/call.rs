//! Concrete store calls, as run on every store, and their comparable outcomes.

use std::collections::BTreeMap;

use a2_store_api::{
    AppendOptions, AppendResult, BulkRedrive, BulkRedriveResult, ClaimRequest, ClaimResult,
    ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, ErrorCode, FailRequest, FailResult, ForkRequest, ForkResult, ListWork,
    ManualClock, NewEvent, Pause, PauseRequest, PresenceMeta, PresenceResult, ReadOptions,
    ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult, RenewRequest, RenewResult,
    RescheduleRequest, RescheduleResult, ResumeRequest, ResumeResult, SessionInfo, SessionWork,
    StateRead, StateWrite, Store, StoredEvent, WakeLogResult,
};
use a2_store_api::{DeleteSessionRequest, DeleteSessionResult, PruneRequest, PruneResult};
use serde_json::Value;

/// One concrete call, with logical session names (the runner prefixes them).
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `append(session, events, options)`.
    Append {
        /// Logical session.
        session: String,
        /// The batch.
        events: Vec<NewEvent>,
        /// Options.
        options: AppendOptions,
    },
    /// `claim_available`.
    Claim(ClaimRequest),
    /// `renew_claims`.
    Renew(RenewRequest),
    /// `complete_attempt`.
    Complete(CompleteRequest),
    /// `fail_attempt`.
    Fail(FailRequest),
    /// `redrive`.
    Redrive(RedriveRequest),
    /// `clear`.
    Clear(ClearRequest),
    /// `reclaim(session)`.
    Reclaim(String),
    /// `read(session, options)`.
    Read(String, ReadOptions),
    /// `wake_log(session, consumer)`.
    WakeLog(String, ConsumerDeclaration),
    /// `write_state(session, reducer, writes)`.
    WriteState(String, String, Vec<StateWrite>),
    /// `read_state(session, reducer, options)`.
    ReadState(String, String, ReadStateOptions),
    /// `set_presence(session, participant, values, meta)`.
    SetPresence(String, String, BTreeMap<String, Value>, PresenceMeta),
    /// `claim_work`, with logical session names in its list.
    ClaimWork(ClaimWorkRequest),
    /// `list_work`, with a logical session name as `after`.
    ListWork(ListWork),
    /// `reschedule`.
    Reschedule(RescheduleRequest),
    /// `pause`.
    Pause(PauseRequest),
    /// `resume`.
    Resume(ResumeRequest),
    /// `redrive_all`, with a logical session name as its filter.
    RedriveAll(BulkRedrive),
    /// `fork`, with logical session names.
    Fork(ForkRequest),
    /// `delete_session`.
    DeleteSession(DeleteSessionRequest),
    /// `prune`.
    Prune(PruneRequest),
    /// Advance every store's manual clock by this many ms.
    Advance(i64),
}

impl Call {
    /// The logical session the call touches, if it touches exactly one
    /// (`claim_work` may touch any, `list_work` reads across sessions).
    pub fn session(&self) -> Option<&str> {
        match self {
            Self::Append { session, .. } => Some(session),
            Self::Claim(r) => Some(&r.session_id),
            Self::Renew(r) => Some(&r.session_id),
            Self::Complete(r) => Some(&r.session_id),
            Self::Fail(r) => Some(&r.session_id),
            Self::Redrive(r) => Some(&r.session_id),
            Self::Clear(r) => Some(&r.session_id),
            Self::Reschedule(r) => Some(&r.session_id),
            Self::Pause(r) => r.session_id.as_deref(),
            Self::Resume(r) => r.session_id.as_deref(),
            Self::Fork(r) => Some(&r.into),
            Self::DeleteSession(r) => Some(&r.session_id),
            Self::Reclaim(s)
            | Self::Read(s, _)
            | Self::WakeLog(s, _)
            | Self::WriteState(s, _, _)
            | Self::ReadState(s, _, _)
            | Self::SetPresence(s, _, _, _) => Some(s),
            Self::ClaimWork(_)
            | Self::ListWork(_)
            | Self::RedriveAll(_)
            | Self::Prune(_)
            | Self::Advance(_) => None,
        }
    }
}

/// The successful result of a call, comparable across backends.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Of `append`.
    Append(AppendResult),
    /// Of `claim_available`.
    Claim(ClaimResult),
    /// Of `renew_claims`.
    Renew(RenewResult),
    /// Of `complete_attempt`.
    Complete(CompleteResult),
    /// Of `fail_attempt`.
    Fail(FailResult),
    /// Of `redrive`.
    Redrive(RedriveResult),
    /// Of `clear`.
    Clear(ClearResult),
    /// Of `reclaim`.
    Reclaim(ReclaimResult),
    /// Of `read`.
    Read(Vec<StoredEvent>),
    /// Of `wake_log`.
    WakeLog(WakeLogResult),
    /// Of `write_state`.
    WriteState,
    /// Of `read_state`.
    ReadState(StateRead),
    /// Of `set_presence`.
    Presence(PresenceResult),
    /// Of `claim_work`, with logical session ids in its session claims.
    ClaimWork(ClaimWorkResult),
    /// Of `list_work`, with logical session ids.
    ListWork(Vec<SessionWork>),
    /// Of `reschedule`.
    Reschedule(RescheduleResult),
    /// Of `pause`, with a logical session id.
    Pause(Pause),
    /// Of `resume`.
    Resume(ResumeResult),
    /// Of `redrive_all`, with logical session ids.
    RedriveAll(BulkRedriveResult),
    /// Of `fork`, with logical session ids.
    Fork(ForkResult),
    /// `delete_session`'s result.
    DeleteSession(DeleteSessionResult),
    /// `prune`'s result, this run's sessions only, by their logical ids,
    /// with the sweep counts (each backend's own) left at 0.
    Prune(PruneResult),
    /// The clock now reads this.
    Advanced(i64),
}

/// A call's result with the error projected to its code (messages may differ).
pub type Projection = Result<Outcome, ErrorCode>;

/// Renames a logical session to the physical one of this run.
pub fn physical(prefix: &str, session: &str) -> String {
    format!("{prefix}{session}")
}

/// The logical name of a physical session id (`None`: not this run's).
pub fn logical<'a>(prefix: &str, session: &'a str) -> Option<&'a str> {
    session.strip_prefix(prefix)
}

/// `info` with logical session ids (its own and its fork origin's).
pub fn logical_info(prefix: &str, mut info: SessionInfo) -> SessionInfo {
    if let Some(name) = logical(prefix, &info.session_id) {
        info.session_id = name.to_owned();
    }
    if let Some(origin) = info.forked_from.as_mut() {
        if let Some(name) = logical(prefix, &origin.session_id) {
            origin.session_id = name.to_owned();
        }
    }
    info
}

/// `pause` with a logical session id.
pub fn logical_pause(prefix: &str, mut pause: Pause) -> Pause {
    if let Some(name) = pause.session_id.as_deref().and_then(|s| logical(prefix, s)) {
        pause.session_id = Some(name.to_owned());
    }
    pause
}

/// `list_work` restricted to this run's sessions, with the prefix removed:
/// the page starts after `prefix` + `request.after` (this run's ids sort
/// together) and ends at the first id of another run, so it is what a
/// store holding only this run's sessions returns.
pub async fn list_work(
    store: &dyn Store,
    prefix: &str,
    mut request: ListWork,
) -> a2_store_api::Result<Vec<SessionWork>> {
    request.after = Some(physical(prefix, request.after.as_deref().unwrap_or("")));
    let page = store.list_work(request).await?;
    Ok(page
        .into_iter()
        .map_while(|mut work| {
            work.session_id = logical(prefix, &work.session_id)?.to_owned();
            Some(work)
        })
        .collect())
}

/// Runs `call` on `store` (sessions prefixed with `prefix`), advancing `clock` for [`Call::Advance`].
pub async fn execute(
    store: &dyn Store,
    clock: &ManualClock,
    prefix: &str,
    call: &Call,
) -> Projection {
    let result = match call.clone() {
        Call::Append {
            session,
            events,
            options,
        } => store
            .append(&physical(prefix, &session), events, options)
            .await
            .map(Outcome::Append),
        Call::Claim(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.claim_available(r).await.map(Outcome::Claim)
        }
        Call::Renew(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.renew_claims(r).await.map(Outcome::Renew)
        }
        Call::Complete(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.complete_attempt(r).await.map(Outcome::Complete)
        }
        Call::Fail(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.fail_attempt(r).await.map(Outcome::Fail)
        }
        Call::Redrive(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.redrive(r).await.map(Outcome::Redrive)
        }
        Call::Clear(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.clear(r).await.map(Outcome::Clear)
        }
        Call::Reclaim(session) => store
            .reclaim(&physical(prefix, &session))
            .await
            .map(Outcome::Reclaim),
        Call::Read(session, options) => store
            .read(&physical(prefix, &session), options)
            .await
            .map(Outcome::Read),
        Call::WakeLog(session, consumer) => store
            .wake_log(&physical(prefix, &session), &consumer)
            .await
            .map(Outcome::WakeLog),
        Call::WriteState(session, reducer, writes) => store
            .write_state(&physical(prefix, &session), &reducer, writes)
            .await
            .map(|()| Outcome::WriteState),
        Call::ReadState(session, reducer, options) => store
            .read_state(&physical(prefix, &session), &reducer, options)
            .await
            .map(Outcome::ReadState),
        Call::SetPresence(session, participant, values, meta) => store
            .set_presence(&physical(prefix, &session), &participant, values, meta)
            .await
            .map(Outcome::Presence),
        Call::ClaimWork(mut r) => {
            if let Some(sessions) = r.sessions.as_mut() {
                for session in sessions.iter_mut() {
                    *session = physical(prefix, session);
                }
            }
            store.claim_work(r).await.map(|mut result| {
                if let ClaimWorkResult::Claimed { sessions } = &mut result {
                    for claim in sessions.iter_mut() {
                        if let Some(name) = logical(prefix, &claim.session_id) {
                            claim.session_id = name.to_owned();
                        }
                    }
                }
                Outcome::ClaimWork(result)
            })
        }
        Call::ListWork(r) => list_work(store, prefix, r).await.map(Outcome::ListWork),
        Call::Reschedule(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.reschedule(r).await.map(Outcome::Reschedule)
        }
        Call::Pause(mut r) => {
            r.session_id = r.session_id.map(|s| physical(prefix, &s));
            store
                .pause(r)
                .await
                .map(|pause| Outcome::Pause(logical_pause(prefix, pause)))
        }
        Call::Resume(mut r) => {
            r.session_id = r.session_id.map(|s| physical(prefix, &s));
            store.resume(r).await.map(Outcome::Resume)
        }
        Call::RedriveAll(mut r) => {
            r.session_id = r.session_id.map(|s| physical(prefix, &s));
            store.redrive_all(r).await.map(|mut result| {
                for head in &mut result.redriven {
                    if let Some(name) = logical(prefix, &head.session_id) {
                        head.session_id = name.to_owned();
                    }
                }
                Outcome::RedriveAll(result)
            })
        }
        Call::Fork(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            r.into = physical(prefix, &r.into);
            store.fork(r).await.map(|mut result| {
                result.session = logical_info(prefix, result.session);
                Outcome::Fork(result)
            })
        }
        Call::DeleteSession(mut r) => {
            r.session_id = physical(prefix, &r.session_id);
            store.delete_session(r).await.map(Outcome::DeleteSession)
        }
        Call::Prune(r) => store.prune(r).await.map(|mut result| {
            // A store of its own per case holds no other sessions; any
            // other's would not compare anyway.
            result.sessions = result
                .sessions
                .iter()
                .filter_map(|s| logical(prefix, s).map(str::to_owned))
                .collect();
            if let Some(next) = result.next.as_mut() {
                if let Some(name) = logical(prefix, &next.session_id) {
                    next.session_id = name.to_owned();
                }
            }
            // How many expired presence fields and checkpoints a prune
            // sweeps is each backend's own (CONTRACT, retention): not compared.
            Outcome::Prune(result.with_swept(0, 0))
        }),
        Call::Advance(ms) => Ok(Outcome::Advanced(clock.advance(ms))),
    };
    result.map_err(|error| error.code())
}
