//! Work across sessions: the work index every backend keeps, the fairness
//! order of [`Store::claim_work`](crate::Store::claim_work), and the one
//! claim-and-wait loop every backend runs it with.
//!
//! # The work index
//!
//! A backend keeps one *work row* per `(session, consumer)` pair that has an
//! unfinished head (claimable, busy or dead-lettered), written in the same
//! step as the cursor change that calls for it. A row is a [`WorkRow`]:
//! `Ready(ready_at)` while the pair has a head that is not dead-lettered,
//! `DeadLettersOnly` when only dead letters are left. The invariant:
//!
//! > a head of consumer `c` in session `s` claimable at time `t` ⇒ row
//! > `(s, c)` is `Ready(ready_at)` with `ready_at <= t`; a dead-lettered head
//! > ⇒ row `(s, c)` exists.
//!
//! A row may be *early* (ready before anything is claimable): a claim that
//! finds nothing corrects it. How each operation keeps the rows:
//!
//! - appends (targets, declared log consumers) and `wake_log` only make work
//!   sooner: they move the rows of the consumers they give heads to earlier
//!   ([`sooner`]), one upsert each, no scan;
//! - `complete_attempt`, `fail_attempt`, `redrive` and `renew_claims` (when
//!   it renews something) rewrite the row of each consumer they act on from
//!   its heads ([`WorkSummary::touched_row`]), so finished work leaves no
//!   row, `claim_work` answers `Settled`, and a lease a renewal shortened or
//!   lengthened is found exactly when it ends; the events a completion
//!   returns move their consumers' rows earlier;
//! - every claim of a session (either claim operation) rewrites the rows of
//!   the consumers it served ([`WorkSummary::served_row`]; `consumers: None`
//!   serves every consumer with a row);
//! - a clear rewrites all the session's rows ([`WorkSummary::touched_row`]).
//!
//! Under these rules a row is exact after every operation: its `ready_at`
//! is when the pair's work became claimable (or a claim last served it), or
//! its earliest lease or retry-delay end. So `Busy.retry_at`,
//! `SessionWork::ready_since` and the fairness order are the same on every
//! backend, and the differential test compares them exactly.
//!
//! # Fairness
//!
//! Ready rows are served in `(ready_at, session_id, consumer)` order
//! ([`crate::order::compare_work`]), one session at a time, at most
//! [`per_session_limit`](crate::ClaimWorkRequest::per_session_limit) heads
//! each. A session still claimable after it was served gets `ready_at =
//! now`: it goes behind every session that was waiting, so a session with a
//! long backlog is served once per round, beside every other session with
//! work, and the session whose work has waited longest is served first.
//!
//! # Waiting
//!
//! [`claim_work`] claims; with a wait it sleeps until the backend's
//! [`WorkSignal`] fires (something may have become claimable), the earliest
//! `retry_at` arrives (on the store's clock: a [`ManualClock`](crate::ManualClock)
//! wakes it when set, without real sleeping), a fallback poll interval
//! passes, or the wait ends. Dropping the future ends the wait.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::Result;
use crate::types::{
    ClaimRequest, ClaimResult, ClaimWorkRequest, ClaimWorkResult, Dispatch, SessionClaim,
    SessionWork,
};

/// A stored work row of one `(session, consumer)` pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkRow {
    /// The pair has a head that is not dead-lettered; a claim may find it
    /// claimable from `ready_at` (ms) on.
    Ready(i64),
    /// Only dead-lettered heads are left (listed, never claimed).
    DeadLettersOnly,
}

impl WorkRow {
    /// The ready time to store, `None` for [`DeadLettersOnly`](Self::DeadLettersOnly)
    /// (SQL backends store it as `NULL`).
    pub fn ready_at(self) -> Option<i64> {
        match self {
            Self::Ready(at) => Some(at),
            Self::DeadLettersOnly => None,
        }
    }

    /// The row stored as `ready_at` (`NULL`: dead letters only).
    pub fn from_ready_at(ready_at: Option<i64>) -> Self {
        ready_at.map_or(Self::DeadLettersOnly, Self::Ready)
    }
}

/// The row after a change that may make the pair's work claimable at `at`
/// (`old`: the stored row, if any): ready no later than `at`, and no later
/// than it already was.
pub fn sooner(old: Option<WorkRow>, at: i64) -> WorkRow {
    match old {
        Some(WorkRow::Ready(ready_at)) => WorkRow::Ready(ready_at.min(at)),
        _ => WorkRow::Ready(at),
    }
}

impl Dispatch {
    /// When a claim can act on this head, at `now_ms`: now when it is
    /// claimable, the end of its lease or retry delay when busy, `None`
    /// when dead-lettered.
    pub fn ready_at(&self, now_ms: i64) -> Option<i64> {
        if self.is_dead_lettered() {
            None
        } else {
            Some(self.busy_until(now_ms).unwrap_or(now_ms))
        }
    }
}

/// What the unfinished heads of one `(session, consumer)` pair, or of a
/// session's served consumers, add up to at a time: the counts
/// [`Store::list_work`](crate::Store::list_work) reports and the row a
/// backend stores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkSummary {
    /// Heads claimable now.
    pub claimable: u64,
    /// Heads whose lease or retry delay has not ended.
    pub busy: u64,
    /// Dead-lettered heads.
    pub dead_lettered: u64,
    /// The earliest end of a busy head's lease or retry delay.
    pub next_expiry: Option<i64>,
}

impl WorkSummary {
    /// Counts one head with bookkeeping `dispatch`, at `now_ms`.
    pub fn add(&mut self, dispatch: &Dispatch, now_ms: i64) {
        if dispatch.is_dead_lettered() {
            self.dead_lettered += 1;
        } else if let Some(expiry) = dispatch.busy_until(now_ms) {
            self.busy += 1;
            self.next_expiry = Some(self.next_expiry.map_or(expiry, |at| at.min(expiry)));
        } else {
            self.claimable += 1;
        }
    }

    /// Both summaries together.
    pub fn merge(&mut self, other: &WorkSummary) {
        self.claimable += other.claimable;
        self.busy += other.busy;
        self.dead_lettered += other.dead_lettered;
        self.next_expiry = match (self.next_expiry, other.next_expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Whether any head is left (claimable, busy or dead-lettered).
    pub fn has_work(&self) -> bool {
        self.claimable + self.busy + self.dead_lettered > 0
    }

    /// The row of a pair a claim just served, at `now_ms`: still claimable
    /// goes behind every waiting session (`now`); busy waits for its
    /// earliest expiry; dead letters only; nothing left deletes the row
    /// (`None`).
    pub fn served_row(&self, now_ms: i64) -> Option<WorkRow> {
        if self.claimable > 0 {
            Some(WorkRow::Ready(now_ms))
        } else {
            self.rest()
        }
    }

    /// The row of a pair after any other change (`old`: the stored row):
    /// still claimable keeps how long it has waited (no later than now);
    /// otherwise as [`served_row`](Self::served_row).
    pub fn touched_row(&self, old: Option<WorkRow>, now_ms: i64) -> Option<WorkRow> {
        if self.claimable > 0 {
            Some(sooner(old, now_ms))
        } else {
            self.rest()
        }
    }

    fn rest(&self) -> Option<WorkRow> {
        match self.next_expiry {
            Some(expiry) => Some(WorkRow::Ready(expiry)),
            None if self.dead_lettered > 0 => Some(WorkRow::DeadLettersOnly),
            None => None,
        }
    }

    /// The listing of session `session_id` whose earliest ready row is
    /// `ready_at` (`None` when it has none): `ready_since` is reported only
    /// while something is claimable.
    pub fn session_work(&self, session_id: &str, ready_at: Option<i64>) -> SessionWork {
        SessionWork {
            session_id: session_id.to_owned(),
            claimable: self.claimable,
            busy: self.busy,
            dead_lettered: self.dead_lettered,
            ready_since: ready_at.filter(|_| self.claimable > 0),
            next_expiry: self.next_expiry,
        }
    }
}

/// The store-wide wake-up of waiting claimers: a backend fires it after
/// every change that may make work claimable sooner (in process, or when it
/// learns of one made by another process). Cheap to clone; clones share it.
#[derive(Debug, Clone)]
pub struct WorkSignal {
    sender: std::sync::Arc<watch::Sender<u64>>,
}

impl Default for WorkSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkSignal {
    /// A signal nobody waits on yet.
    pub fn new() -> Self {
        Self {
            sender: std::sync::Arc::new(watch::Sender::new(0)),
        }
    }

    /// Wakes every waiter (a no-op when nobody waits).
    pub fn notify(&self) {
        self.sender
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// How many claimers wait on it now.
    pub fn waiters(&self) -> usize {
        self.sender.receiver_count()
    }

    /// A receiver that sees every later [`notify`](Self::notify).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.sender.subscribe()
    }
}

/// What [`WorkSource::ready_or_earliest`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyWork {
    /// Ready sessions in fairness order, at least one.
    Sessions(Vec<String>),
    /// No session ready: the earliest `ready_at` among the rows served
    /// (what [`WorkSource::earliest_ready`] answers), `None` when there is
    /// none.
    Earliest(Option<i64>),
}

/// What [`WorkSource::claim_next`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NextClaim {
    /// The source has no one-step claim for this request: [`claim_work`]
    /// reads ready sessions ([`WorkSource::ready_or_earliest`]) and claims
    /// each ([`WorkSource::claim_session`]) for the rest of the call.
    Unsupported,
    /// The first ready session in fairness order that no other claimer
    /// held and that is not in `skip`, with what its claim answered
    /// (exactly [`WorkSource::claim_session`]'s answer for it).
    Session {
        /// The session claimed.
        session_id: String,
        /// Its claim's answer.
        result: ClaimResult,
    },
    /// No ready session was free: every one not in `skip` was held by
    /// another claimer at `retry_at` (the claim's time), which may leave
    /// work claimable when it commits.
    Contended {
        /// The claim's time.
        retry_at: i64,
    },
    /// No session not in `skip` was ready: the earliest `ready_at` as
    /// [`WorkSource::earliest_ready`] answers it (`None`: no row with a
    /// time).
    Earliest(Option<i64>),
    /// Only in [`WorkSource::claim_next_many`]'s answer, after the sessions
    /// it claimed: its pick found fewer free ready sessions (none of
    /// `skip`) than were wanted, so another step now would most likely find
    /// none. [`claim_work`] answers with what it claimed; when that is
    /// nothing, it steps again to learn `Contended` or `Earliest`.
    Exhausted,
}

/// How many candidate sessions beyond those still wanted a claim asks for
/// in one round by default ([`WorkSource::candidate_slack`]), so a few
/// sessions taken by other claimers do not cost a round each.
pub const CANDIDATE_SLACK: usize = 8;

/// A real-time pause before claiming again when a claim answered `Busy`
/// with a time already reached (another claimer was on that work).
pub const CONTENDED_RETRY: Duration = Duration::from_millis(5);

/// What a backend gives [`claim_work`]: its work index, its per-session
/// claim, its clock and its wake-up.
#[async_trait]
pub trait WorkSource: Send + Sync {
    /// Up to `limit` sessions served by `request` (consumers, session list)
    /// having a `Ready` row with `ready_at <= now_ms`, in fairness order
    /// (by each session's earliest such row, see
    /// [`order::compare_work`](crate::order::compare_work)), leaving out
    /// the sessions in `skip`.
    async fn ready_sessions(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        limit: usize,
    ) -> Result<Vec<String>>;

    /// [`ready_sessions`](Self::ready_sessions), and when it finds none,
    /// [`earliest_ready`](Self::earliest_ready): what an empty claim
    /// answers. A backend that can read both in one step overrides this
    /// (the default makes the two calls).
    async fn ready_or_earliest(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        limit: usize,
    ) -> Result<ReadyWork> {
        let sessions = self.ready_sessions(request, now_ms, skip, limit).await?;
        if sessions.is_empty() {
            return Ok(ReadyWork::Earliest(self.earliest_ready(request).await?));
        }
        Ok(ReadyWork::Sessions(sessions))
    }

    /// One session's claim (a validated request): exactly
    /// [`Store::claim_available`](crate::Store::claim_available), rows of
    /// the served consumers rewritten as [`WorkSummary::served_row`] says.
    /// A backend whose session is held by another claimer may skip it by
    /// answering `Busy { retry_at }` with the claim's time (the holder may
    /// leave work claimable: [`claim_work`] answers `Busy` at once and a
    /// waiter claims again after [`CONTENDED_RETRY`]), and one whose served
    /// rows are none of them ready by the claim's time may answer `Settled`
    /// (by the work index's invariant nothing is claimable then, and the
    /// rows are what the claim would leave).
    async fn claim_session(&self, request: ClaimRequest) -> Result<ClaimResult>;

    /// The earliest `ready_at` among `Ready` rows served by `request`.
    async fn earliest_ready(&self, request: &ClaimWorkRequest) -> Result<Option<i64>>;

    /// Finds the first ready session in fairness order (at `now_ms`, none
    /// of `skip`) that no other claimer holds and claims up to `head_limit`
    /// of its heads (capped by the per-session limit), in one step: what
    /// [`ready_sessions`](Self::ready_sessions) then
    /// [`claim_session`](Self::claim_session) do, without reading sessions
    /// that another claimer holds. A backend whose ready read is a round
    /// trip of its own overrides it where it can pick and lock a session in
    /// the claim's first round trip: claimers woken together then pass each
    /// other's sessions instead of each reading the same ready session and
    /// finding it held. The default answers [`NextClaim::Unsupported`].
    async fn claim_next(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        head_limit: usize,
    ) -> Result<NextClaim> {
        let _ = (request, now_ms, skip, head_limit);
        Ok(NextClaim::Unsupported)
    }

    /// [`claim_next`](Self::claim_next) of up to `sessions_wanted` sessions
    /// in one step: the first free ready sessions in fairness order (none of
    /// `skip`), each claimed as [`claim_session`](Self::claim_session)
    /// claims it, with up to `head_limit` heads in all, taken in that order
    /// (each session's share capped by the per-session limit and by what the
    /// sessions before it left: [`ClaimWorkRequest::session_request`]).
    ///
    /// The answer: a [`NextClaim::Session`] per session claimed, in
    /// fairness order, then [`NextClaim::Exhausted`] when the step found
    /// fewer sessions than wanted; or, when it claimed none, exactly one of
    /// `Contended`, `Earliest` or `Unsupported`, as [`claim_next`](Self::claim_next)
    /// answers them. A backend never claims a session it does not report.
    ///
    /// A backend whose claim is a transaction of its own overrides it to
    /// claim the sessions in one transaction of set-based statements. The
    /// default is one [`claim_next`](Self::claim_next) (one session), so
    /// [`claim_work`] steps as many times as it did before.
    async fn claim_next_many(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        sessions_wanted: usize,
        head_limit: usize,
    ) -> Result<Vec<NextClaim>> {
        let _ = sessions_wanted;
        Ok(vec![
            self.claim_next(request, now_ms, skip, head_limit).await?,
        ])
    }

    /// The store's clock.
    fn clock(&self) -> &dyn Clock;

    /// The store's wake-up.
    fn signal(&self) -> &WorkSignal;

    /// How often a waiter claims again without a wake-up (for changes the
    /// signal may miss, such as another process's), `None`: never.
    fn fallback_poll(&self) -> Option<Duration>;

    /// How many candidate sessions beyond those still wanted one ready read
    /// asks for: a cost knob, never an answer's. A backend whose ready read
    /// is a round trip reads a few spares ([`CANDIDATE_SLACK`]), so
    /// sessions lost to other claimers cost no round each; one whose ready
    /// read is an in-process lookup reads none and reads again when it
    /// loses one.
    fn candidate_slack(&self) -> usize {
        CANDIDATE_SLACK
    }
}

/// [`Store::claim_work`](crate::Store::claim_work) of a validated request
/// on `source`: claims across sessions in fairness order and, with
/// `wait_ms`, waits for work until the wait ends.
pub async fn claim_work<S: WorkSource + ?Sized>(
    source: &S,
    request: &ClaimWorkRequest,
) -> Result<ClaimWorkResult> {
    let Some(wait_ms) = request.wait_ms else {
        return claim_once(source, request).await;
    };
    let deadline = Instant::now() + Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
    let mut wake = source.signal().subscribe();
    let mut clock_changes = source.clock().changes();
    loop {
        wake.borrow_and_update();
        if let Some(changes) = clock_changes.as_mut() {
            changes.borrow_and_update();
        }
        let result = claim_once(source, request).await?;
        let started = Instant::now();
        if matches!(result, ClaimWorkResult::Claimed { .. }) || started >= deadline {
            return Ok(result);
        }
        let mut until = deadline;
        if let Some(poll) = source.fallback_poll() {
            until = until.min(started + poll);
        }
        if let ClaimWorkResult::Busy { retry_at } = result {
            let ahead = retry_at.saturating_sub(source.clock().now_ms());
            if ahead <= 0 {
                until = until.min(started + CONTENDED_RETRY);
            } else if clock_changes.is_none() {
                let ahead = Duration::from_millis(u64::try_from(ahead).unwrap_or(u64::MAX));
                until = until.min(started + ahead);
            }
        }
        tokio::select! {
            _ = changed(&mut wake) => {}
            _ = clock_changed(&mut clock_changes) => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

/// Resolves when the signal fires; never when its sender is gone.
async fn changed(receiver: &mut watch::Receiver<u64>) {
    if receiver.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves when a manual clock is set; never for a real-time clock.
async fn clock_changed(receiver: &mut Option<watch::Receiver<i64>>) {
    let moved = match receiver {
        Some(receiver) => receiver.changed().await.is_ok(),
        None => false,
    };
    if !moved {
        std::future::pending::<()>().await;
    }
}

/// What one pass of [`claim_once`] has taken so far.
#[derive(Default)]
struct Taken {
    served: Vec<SessionClaim>,
    claimed: usize,
    /// The earliest `retry_at` at or before the time its claim answered: a
    /// session that another claimer held.
    contended: Option<i64>,
}

impl Taken {
    /// Adds what the claim of `session_id` answered, `now_ms` read after
    /// it; whether the head or session limit is reached.
    fn add(
        &mut self,
        session_id: String,
        result: ClaimResult,
        now_ms: i64,
        request: &ClaimWorkRequest,
    ) -> bool {
        match result {
            ClaimResult::Claimed {
                heads,
                dead_lettered,
                head,
            } => {
                self.claimed += heads.len();
                self.served.push(SessionClaim {
                    session_id,
                    heads,
                    dead_lettered,
                    head,
                });
                self.claimed >= request.head_limit() || self.served.len() >= request.session_limit()
            }
            // Compared with the clock after the claim: a backend's claim
            // reads the time itself, later than the pass's `now`.
            ClaimResult::Busy { retry_at } if retry_at <= now_ms => {
                self.contend(retry_at);
                false
            }
            _ => false,
        }
    }

    /// A session held by another claimer at `retry_at`.
    fn contend(&mut self, retry_at: i64) {
        self.contended = Some(self.contended.map_or(retry_at, |at| at.min(retry_at)));
    }
}

/// How many sessions one step of [`claim_once`] asks
/// [`WorkSource::claim_next_many`] for, when `left` heads may still be
/// claimed and `served` sessions were: enough for `left` heads at the
/// per-session limit each, within the session limit, at least one.
fn sessions_wanted(request: &ClaimWorkRequest, left: usize, served: usize) -> usize {
    let per_session = request.per_session_limit().max(1);
    left.div_ceil(per_session)
        .min(request.session_limit().saturating_sub(served))
        .max(1)
}

/// One pass: ready sessions in fairness order, each claimed in turn until
/// the head or session limit is reached or no ready session is left; by
/// [`WorkSource::claim_next_many`] (the sessions the limits still want, in
/// one step) where the source can, else by a ready read and a claim of
/// each session it lists.
async fn claim_once<S: WorkSource + ?Sized>(
    source: &S,
    request: &ClaimWorkRequest,
) -> Result<ClaimWorkResult> {
    let head_limit = request.head_limit();
    let session_limit = request.session_limit();
    let mut visited: Vec<String> = Vec::new();
    let mut taken = Taken::default();
    // The earliest answer read with the last round's (empty) ready read.
    let mut earliest = None;
    let mut one_step = true;
    'rounds: loop {
        let now = source.clock().now_ms();
        if one_step {
            let left = head_limit.saturating_sub(taken.claimed);
            let wanted = sessions_wanted(request, left, taken.served.len());
            let answers = source
                .claim_next_many(request, now, &visited, wanted, left)
                .await?;
            // Every session a step claimed is reported, even past a limit
            // (a source keeps within them): a head claimed is never dropped.
            let mut done = false;
            let mut exhausted = false;
            for answer in answers {
                match answer {
                    NextClaim::Session { session_id, result } => {
                        visited.push(session_id.clone());
                        done |= taken.add(session_id, result, source.clock().now_ms(), request);
                    }
                    NextClaim::Contended { retry_at } => {
                        taken.contend(retry_at);
                        done = true;
                    }
                    NextClaim::Earliest(at) => {
                        earliest = Some(at);
                        done = true;
                    }
                    NextClaim::Exhausted => exhausted = true,
                    NextClaim::Unsupported => one_step = false,
                }
            }
            // Fewer sessions than wanted were free: what was claimed is the
            // answer; with nothing claimed, the next step says why.
            if done || (exhausted && !taken.served.is_empty()) {
                break;
            }
            if one_step {
                continue;
            }
        }
        let want = session_limit.saturating_sub(taken.served.len()) + source.candidate_slack();
        let batch = match source
            .ready_or_earliest(request, now, &visited, want)
            .await?
        {
            ReadyWork::Sessions(sessions) => sessions,
            ReadyWork::Earliest(at) => {
                earliest = Some(at);
                break;
            }
        };
        let more = batch.len() >= want;
        for session_id in batch {
            if visited.contains(&session_id) {
                continue;
            }
            let claim = request.session_request(&session_id, head_limit - taken.claimed);
            visited.push(session_id.clone());
            let result = source.claim_session(claim).await?;
            if taken.add(session_id, result, source.clock().now_ms(), request) {
                break 'rounds;
            }
        }
        if !more {
            break;
        }
    }
    if !taken.served.is_empty() {
        return Ok(ClaimWorkResult::Claimed {
            sessions: taken.served,
        });
    }
    // Held work may be claimable again as soon as its holder commits: that
    // is the answer, without reading the earliest time (it would be in the
    // past too, or the holder's lease, which the next claim finds).
    if let Some(retry_at) = taken.contended {
        return Ok(ClaimWorkResult::Busy { retry_at });
    }
    let earliest = match earliest {
        Some(earliest) => earliest,
        None => source.earliest_ready(request).await?,
    };
    Ok(match earliest {
        Some(retry_at) => ClaimWorkResult::Busy { retry_at },
        None => ClaimWorkResult::Settled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(until: i64) -> Dispatch {
        Dispatch {
            attempt_count: 1,
            claim_holder: Some("w".into()),
            claim_expires_at: Some(until),
            ..Dispatch::default()
        }
    }

    /// A scripted source: `ready` answers the ready reads in turn (the
    /// default `ready_or_earliest` then asks `earliest_ready` when one is
    /// empty), `claims` the session claims; every call is logged.
    struct Scripted {
        clock: crate::ManualClock,
        signal: WorkSignal,
        ready: std::sync::Mutex<Vec<Vec<String>>>,
        claims: std::sync::Mutex<Vec<ClaimResult>>,
        earliest: Option<i64>,
        /// How far each session claim moves the clock (a claim takes time).
        claim_takes_ms: i64,
        /// What `candidate_slack` answers.
        slack: usize,
        /// The `limit` of every ready read.
        limits: std::sync::Mutex<Vec<usize>>,
        /// What `claim_next` answers in turn (empty: `Unsupported`), with
        /// the `skip` and `head_limit` of each call.
        next: std::sync::Mutex<Vec<NextClaim>>,
        next_args: std::sync::Mutex<Vec<(Vec<String>, usize)>>,
        /// What `claim_next_many` answers in turn (empty: the default,
        /// one `claim_next`), with the `skip`, `sessions_wanted` and
        /// `head_limit` of each call.
        many: std::sync::Mutex<Vec<Vec<NextClaim>>>,
        many_args: std::sync::Mutex<Vec<(Vec<String>, usize, usize)>>,
        calls: std::sync::Mutex<Vec<&'static str>>,
    }

    impl Scripted {
        fn new(ready: Vec<Vec<&str>>, claims: Vec<ClaimResult>, earliest: Option<i64>) -> Self {
            let ready = ready
                .into_iter()
                .rev()
                .map(|batch| batch.into_iter().map(String::from).collect())
                .collect();
            Self {
                clock: crate::ManualClock::new(1_000),
                signal: WorkSignal::new(),
                ready: std::sync::Mutex::new(ready),
                claims: std::sync::Mutex::new(claims.into_iter().rev().collect()),
                earliest,
                claim_takes_ms: 0,
                slack: CANDIDATE_SLACK,
                limits: std::sync::Mutex::new(Vec::new()),
                next: std::sync::Mutex::new(Vec::new()),
                next_args: std::sync::Mutex::new(Vec::new()),
                many: std::sync::Mutex::new(Vec::new()),
                many_args: std::sync::Mutex::new(Vec::new()),
                calls: std::sync::Mutex::new(Vec::new()),
            }
        }

        /// A source answering `claim_next` with `next` in turn.
        fn one_step(next: Vec<NextClaim>, earliest: Option<i64>) -> Self {
            let source = Self::new(Vec::new(), Vec::new(), earliest);
            source
                .next
                .lock()
                .map(|mut n| *n = next.into_iter().rev().collect())
                .ok();
            source
        }

        /// A source answering `claim_next_many` with `steps` in turn.
        fn batched(steps: Vec<Vec<NextClaim>>, earliest: Option<i64>) -> Self {
            let source = Self::new(Vec::new(), Vec::new(), earliest);
            source
                .many
                .lock()
                .map(|mut m| *m = steps.into_iter().rev().collect())
                .ok();
            source
        }

        fn many_args(&self) -> Vec<(Vec<String>, usize, usize)> {
            self.many_args.lock().map(|a| a.clone()).unwrap_or_default()
        }

        fn log(&self, call: &'static str) {
            self.calls.lock().map(|mut calls| calls.push(call)).ok();
        }

        fn calls(&self) -> Vec<&'static str> {
            self.calls
                .lock()
                .map(|calls| calls.clone())
                .unwrap_or_default()
        }
    }

    #[async_trait]
    impl WorkSource for Scripted {
        async fn ready_sessions(
            &self,
            _: &ClaimWorkRequest,
            _: i64,
            _: &[String],
            limit: usize,
        ) -> Result<Vec<String>> {
            self.log("ready");
            self.limits.lock().map(|mut l| l.push(limit)).ok();
            Ok(self
                .ready
                .lock()
                .ok()
                .and_then(|mut r| r.pop())
                .unwrap_or_default())
        }

        async fn claim_session(&self, _: ClaimRequest) -> Result<ClaimResult> {
            self.log("claim");
            self.clock.advance(self.claim_takes_ms);
            Ok(self
                .claims
                .lock()
                .ok()
                .and_then(|mut c| c.pop())
                .unwrap_or(ClaimResult::Settled))
        }

        async fn earliest_ready(&self, _: &ClaimWorkRequest) -> Result<Option<i64>> {
            self.log("earliest");
            Ok(self.earliest)
        }

        async fn claim_next(
            &self,
            _: &ClaimWorkRequest,
            _: i64,
            skip: &[String],
            head_limit: usize,
        ) -> Result<NextClaim> {
            let next = self.next.lock().ok().and_then(|mut n| n.pop());
            let Some(next) = next else {
                return Ok(NextClaim::Unsupported);
            };
            self.log("next");
            self.next_args
                .lock()
                .map(|mut a| a.push((skip.to_vec(), head_limit)))
                .ok();
            Ok(next)
        }

        async fn claim_next_many(
            &self,
            request: &ClaimWorkRequest,
            now_ms: i64,
            skip: &[String],
            sessions_wanted: usize,
            head_limit: usize,
        ) -> Result<Vec<NextClaim>> {
            let step = self.many.lock().ok().and_then(|mut m| m.pop());
            let Some(step) = step else {
                return Ok(vec![
                    self.claim_next(request, now_ms, skip, head_limit).await?,
                ]);
            };
            self.log("many");
            self.many_args
                .lock()
                .map(|mut a| a.push((skip.to_vec(), sessions_wanted, head_limit)))
                .ok();
            Ok(step)
        }

        fn clock(&self) -> &dyn Clock {
            &self.clock
        }

        fn signal(&self) -> &WorkSignal {
            &self.signal
        }

        fn fallback_poll(&self) -> Option<Duration> {
            None
        }

        fn candidate_slack(&self) -> usize {
            self.slack
        }
    }

    /// `claim_work` without a wait on `source`.
    fn claim(source: &Scripted) -> Result<ClaimWorkResult> {
        futures::executor::block_on(claim_work(source, &request()))
    }

    fn request() -> ClaimWorkRequest {
        ClaimWorkRequest::new(
            "w",
            vec![crate::ConsumerDeclaration::targeted("agent")],
            1_000,
        )
    }

    #[test]
    fn an_empty_claim_answers_the_earliest_time_read_with_it() {
        let source = Scripted::new(vec![vec![]], vec![], Some(5_000));
        let answer = claim(&source);
        assert!(
            matches!(answer, Ok(ClaimWorkResult::Busy { retry_at: 5_000 })),
            "{answer:?}"
        );
        assert_eq!(source.calls(), ["ready", "earliest"]);
    }

    #[test]
    fn a_held_session_answers_busy_at_once_without_reading_the_earliest_time() {
        // The claim reads the clock itself, 3 ms after the round's time.
        let held = ClaimResult::Busy { retry_at: 1_003 };
        let mut source = Scripted::new(vec![vec!["a"]], vec![held], Some(900));
        source.claim_takes_ms = 3;
        let answer = claim(&source);
        assert!(
            matches!(answer, Ok(ClaimWorkResult::Busy { retry_at: 1_003 })),
            "contended: busy at the claim's time: {answer:?}"
        );
        assert_eq!(source.calls(), ["ready", "claim"]);
    }

    #[test]
    fn a_session_busy_later_or_settled_asks_the_earliest_time() {
        for answer in [ClaimResult::Busy { retry_at: 1_500 }, ClaimResult::Settled] {
            let source = Scripted::new(vec![vec!["a"]], vec![answer], Some(1_200));
            let result = claim(&source);
            assert!(
                matches!(result, Ok(ClaimWorkResult::Busy { retry_at: 1_200 })),
                "{result:?}"
            );
            assert_eq!(source.calls(), ["ready", "claim", "earliest"]);
        }
    }

    fn claimed(session: &str) -> ClaimResult {
        ClaimResult::Claimed {
            heads: vec![crate::Head {
                incarnation: 0,
                event: crate::StoredEvent::new(session, 0, "e0", "t", serde_json::Value::Null, 0),
                consumer: "agent".into(),
                lane: None,
                dispatch: busy(2_000),
                clear_index: None,
            }],
            dead_lettered: Vec::new(),
            head: 1,
        }
    }

    #[test]
    fn ready_reads_ask_for_the_sessions_wanted_and_the_sources_slack() {
        for slack in [CANDIDATE_SLACK, 0] {
            // The first candidate was taken by another claimer in between.
            let mut source = Scripted::new(
                vec![vec!["a"], vec!["b"]],
                vec![ClaimResult::Settled, claimed("b")],
                None,
            );
            source.slack = slack;
            let answer = claim(&source);
            let limits = source.limits.lock().map(|l| l.clone()).unwrap_or_default();
            if slack == 0 {
                // A full read may leave more: the loop reads again.
                assert!(
                    matches!(&answer, Ok(ClaimWorkResult::Claimed { sessions }) if sessions[0].session_id == "b"),
                    "{answer:?}"
                );
                assert_eq!(source.calls(), ["ready", "claim", "ready", "claim"]);
                assert_eq!(limits, [1, 1]);
            } else {
                // A short read was all there is.
                assert!(matches!(answer, Ok(ClaimWorkResult::Settled)), "{answer:?}");
                assert_eq!(source.calls(), ["ready", "claim", "earliest"]);
                assert_eq!(limits, [1 + CANDIDATE_SLACK]);
            }
        }
    }

    fn next(session: &str, result: ClaimResult) -> NextClaim {
        NextClaim::Session {
            session_id: session.into(),
            result,
        }
    }

    #[test]
    fn one_step_claims_skip_the_sessions_visited_until_the_limits() {
        // Two heads wanted; the first session had nothing after all.
        let source = Scripted::one_step(
            vec![
                next("a", ClaimResult::Settled),
                next("b", claimed("b")),
                next("c", claimed("c")),
            ],
            None,
        );
        let mut request = request();
        request.limit = Some(2);
        let answer = futures::executor::block_on(claim_work(&source, &request));
        let sessions: Vec<String> = match &answer {
            Ok(ClaimWorkResult::Claimed { sessions }) => {
                sessions.iter().map(|s| s.session_id.clone()).collect()
            }
            other => panic!("claimed: {other:?}"),
        };
        assert_eq!(sessions, ["b", "c"]);
        assert_eq!(source.calls(), ["next", "next", "next"]);
        let args = source
            .next_args
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default();
        let skips: Vec<Vec<String>> = args.iter().map(|(skip, _)| skip.clone()).collect();
        assert_eq!(
            skips,
            [vec![], vec!["a".to_owned()], vec!["a".into(), "b".into()]]
        );
        let limits: Vec<usize> = args.iter().map(|(_, limit)| *limit).collect();
        assert_eq!(limits, [2, 2, 1]);
    }

    #[test]
    fn one_step_answers_busy_when_held_else_the_earliest_time() {
        // Every ready session held: busy at the claim's time, nothing read.
        let source = Scripted::one_step(vec![NextClaim::Contended { retry_at: 1_004 }], Some(9));
        let answer = claim(&source);
        assert!(
            matches!(answer, Ok(ClaimWorkResult::Busy { retry_at: 1_004 })),
            "{answer:?}"
        );
        assert_eq!(source.calls(), ["next"]);
        // Nothing ready: the earliest time the step read, or settled.
        for (earliest, want) in [
            (Some(7_000), ClaimWorkResult::Busy { retry_at: 7_000 }),
            (None, ClaimWorkResult::Settled),
        ] {
            let source = Scripted::one_step(vec![NextClaim::Earliest(earliest)], Some(1));
            let answer = claim(&source);
            assert_eq!(answer.ok(), Some(want));
            assert_eq!(source.calls(), ["next"]);
        }
        // A session claimed, then nothing more ready: what was claimed.
        let source = Scripted::one_step(
            vec![next("a", claimed("a")), NextClaim::Earliest(None)],
            None,
        );
        let mut request = request();
        request.limit = Some(3);
        let answer = futures::executor::block_on(claim_work(&source, &request));
        assert!(
            matches!(&answer, Ok(ClaimWorkResult::Claimed { sessions }) if sessions.len() == 1),
            "{answer:?}"
        );
    }

    #[test]
    fn a_source_without_one_step_claims_reads_ready_sessions() {
        // `Unsupported` once: the rest of the call reads and claims.
        let source = Scripted::new(vec![vec!["a"]], vec![claimed("a")], None);
        let answer = claim(&source);
        assert!(
            matches!(answer, Ok(ClaimWorkResult::Claimed { .. })),
            "{answer:?}"
        );
        assert_eq!(source.calls(), ["ready", "claim"]);
    }

    /// A claimed answer of `session` with `n` heads.
    fn claimed_n(session: &str, n: usize) -> ClaimResult {
        let heads = (0..n)
            .map(|k| crate::Head {
                incarnation: 0,
                event: crate::StoredEvent::new(
                    session,
                    k as u64,
                    format!("e{k}"),
                    "t",
                    serde_json::Value::Null,
                    0,
                ),
                consumer: "agent".into(),
                lane: None,
                dispatch: busy(2_000),
                clear_index: None,
            })
            .collect();
        ClaimResult::Claimed {
            heads,
            dead_lettered: Vec::new(),
            head: 1,
        }
    }

    fn served_ids(answer: &Result<ClaimWorkResult>) -> Vec<String> {
        match answer {
            Ok(ClaimWorkResult::Claimed { sessions }) => {
                sessions.iter().map(|s| s.session_id.clone()).collect()
            }
            other => panic!("claimed: {other:?}"),
        }
    }

    #[test]
    fn batched_steps_ask_for_the_sessions_the_limits_still_want() {
        // Five heads, two per session: three sessions wanted first; they
        // give four heads, so one more session is asked for the last head.
        let source = Scripted::batched(
            vec![
                vec![
                    next("a", claimed_n("a", 2)),
                    next("b", claimed_n("b", 1)),
                    next("c", claimed_n("c", 1)),
                ],
                vec![next("d", claimed_n("d", 1))],
            ],
            None,
        );
        let mut request = request();
        request.limit = Some(5);
        request.per_session_limit = Some(2);
        let answer = futures::executor::block_on(claim_work(&source, &request));
        assert_eq!(served_ids(&answer), ["a", "b", "c", "d"]);
        assert_eq!(source.calls(), ["many", "many"]);
        let abc: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        assert_eq!(source.many_args(), [(vec![], 3, 5), (abc, 1, 1)]);
    }

    #[test]
    fn sessions_wanted_keep_within_the_session_limit() {
        let mut request = request();
        request.limit = Some(16);
        assert_eq!(sessions_wanted(&request, 16, 0), 16);
        assert_eq!(sessions_wanted(&request, 3, 13), 3);
        request.session_limit = Some(4);
        assert_eq!(sessions_wanted(&request, 16, 0), 4);
        assert_eq!(sessions_wanted(&request, 16, 3), 1);
        request.per_session_limit = Some(5);
        request.session_limit = None;
        assert_eq!(sessions_wanted(&request, 16, 0), 4);
        assert_eq!(sessions_wanted(&request, 1, 0), 1);
    }

    #[test]
    fn an_exhausted_step_answers_what_it_claimed() {
        let source = Scripted::batched(
            vec![vec![next("a", claimed("a")), NextClaim::Exhausted]],
            Some(9),
        );
        let mut request = request();
        request.limit = Some(4);
        let answer = futures::executor::block_on(claim_work(&source, &request));
        assert_eq!(served_ids(&answer), ["a"]);
        assert_eq!(source.calls(), ["many"], "no step after an exhausted one");
    }

    #[test]
    fn an_exhausted_step_without_claims_steps_again_for_the_answer() {
        for (last, want) in [
            (
                NextClaim::Earliest(Some(7_000)),
                ClaimWorkResult::Busy { retry_at: 7_000 },
            ),
            (
                NextClaim::Contended { retry_at: 1_002 },
                ClaimWorkResult::Busy { retry_at: 1_002 },
            ),
            (NextClaim::Earliest(None), ClaimWorkResult::Settled),
        ] {
            let source = Scripted::batched(
                vec![
                    vec![next("a", ClaimResult::Settled), NextClaim::Exhausted],
                    vec![last],
                ],
                Some(1),
            );
            let mut request = request();
            request.limit = Some(4);
            let answer = futures::executor::block_on(claim_work(&source, &request));
            assert_eq!(answer.ok(), Some(want));
            assert_eq!(source.calls(), ["many", "many"]);
            assert_eq!(
                source.many_args()[1].0,
                ["a"],
                "the session visited is skipped"
            );
        }
    }

    #[test]
    fn a_step_past_a_limit_still_reports_every_session_it_claimed() {
        // A source must keep within the limits; if one does not, no head
        // it claimed is dropped from the answer.
        let source = Scripted::batched(
            vec![vec![next("a", claimed("a")), next("b", claimed("b"))]],
            None,
        );
        let answer = claim(&source);
        assert_eq!(served_ids(&answer), ["a", "b"]);
        assert_eq!(source.calls(), ["many"]);
    }

    #[test]
    fn rows_move_earlier_only() {
        assert_eq!(sooner(None, 5), WorkRow::Ready(5));
        assert_eq!(sooner(Some(WorkRow::Ready(3)), 5), WorkRow::Ready(3));
        assert_eq!(sooner(Some(WorkRow::Ready(9)), 5), WorkRow::Ready(5));
        assert_eq!(sooner(Some(WorkRow::DeadLettersOnly), 5), WorkRow::Ready(5));
    }

    #[test]
    fn summaries_give_the_row_a_claim_leaves() {
        let now = 100;
        let mut summary = WorkSummary::default();
        assert_eq!(summary.served_row(now), None);
        summary.add(&busy(150), now);
        summary.add(&busy(120), now);
        assert_eq!(summary.served_row(now), Some(WorkRow::Ready(120)));
        assert_eq!(
            summary.touched_row(Some(WorkRow::Ready(10)), now),
            Some(WorkRow::Ready(120))
        );
        summary.add(&Dispatch::default(), now);
        assert_eq!(summary.served_row(now), Some(WorkRow::Ready(now)));
        assert_eq!(
            summary.touched_row(Some(WorkRow::Ready(10)), now),
            Some(WorkRow::Ready(10))
        );
        let dead = Dispatch {
            failed_at: Some(1),
            ..Dispatch::default()
        };
        let mut only_dead = WorkSummary::default();
        only_dead.add(&dead, now);
        assert_eq!(only_dead.served_row(now), Some(WorkRow::DeadLettersOnly));
        assert_eq!(dead.ready_at(now), None);
        assert_eq!(busy(150).ready_at(now), Some(150));
        assert_eq!(busy(50).ready_at(now), Some(now));
        summary.merge(&only_dead);
        let listed = summary.session_work("s", Some(7));
        assert_eq!(
            (listed.claimable, listed.busy, listed.dead_lettered),
            (1, 2, 1)
        );
        assert_eq!(
            (listed.ready_since, listed.next_expiry),
            (Some(7), Some(120))
        );
        assert_eq!(only_dead.session_work("s", Some(7)).ready_since, None);
    }
}
