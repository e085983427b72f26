//! The runner's model: what it remembers between steps to resolve symbolic
//! ops into concrete calls, and what the invariants check stores against.
//!
//! The model follows the reference store's results (which every candidate
//! must equal): recently claimed heads, each lane's queue of targeted
//! indexes and which of them finished, and every type list a log consumer
//! was declared with.

use std::collections::{BTreeMap, BTreeSet};

use a2_store_api::{
    AppendOptions, BulkRedrive, Cause, ClaimRequest, ClaimResult, ClaimWorkRequest,
    ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, CursorRef, DeleteSessionRequest, DeleteSessionResult, FailRequest,
    ForkRequest, HeldClaim, ListWork, NewEvent, NotBefore, PauseRequest, PresenceMeta,
    PruneRequest, ReadOptions, ReadStateOptions, RedriveAction, RedriveRequest, RenewRequest,
    RescheduleRequest, RescheduleResult, ResumeRequest, ScheduleChange, StateWrite, Target,
};
use serde_json::{json, Value};

use crate::call::{Call, Outcome, Projection};
use crate::op::{EventSpec, IfLast, LeaseSpec, Op, WhenSpec};
use crate::snapshot::StoreState;
use crate::vocab::{
    declaration_list, declarations, pick, Avoid, EVENT_IDS, FIELDS, HOLDERS, LANES, PARTICIPANTS,
    REDUCERS, REPLY_IDS, SESSIONS, TARGET_CONSUMERS, TYPES, WORK_CONSUMERS,
};

/// How many recently claimed heads ops can pick from.
const KNOWN_HEADS: usize = 8;

/// A head some claim returned, with the attempt it was claimed as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownHead {
    /// Logical session index.
    pub session: usize,
    /// The head.
    pub cursor: CursorRef,
    /// The attempt returned by the claim.
    pub attempt: u32,
    /// The session's incarnation when it was claimed, as an ordinal (see
    /// `incarnation`; 0: the store did not say). A head claimed before its
    /// session was deleted stays known, so later ops complete, fail and
    /// renew it against the new session of the same id.
    pub incarnation: u64,
}

impl KnownHead {
    /// The incarnation requests about this head name (`for_head` does the same).
    fn fence(&self) -> Option<u64> {
        (self.incarnation != 0).then_some(self.incarnation)
    }

    fn cause(&self) -> Cause {
        Cause {
            consumer: self.cursor.consumer.clone(),
            lane: self.cursor.lane.clone(),
            index: self.cursor.index,
            attempt: self.attempt,
        }
    }
}

/// One lane's FIFO as the model sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneModel {
    /// Every index targeted at the lane since the last clear.
    pub queued: BTreeSet<u64>,
    /// The queued indexes completed or skipped.
    pub finished: BTreeSet<u64>,
}

impl LaneModel {
    /// The lowest unfinished targeted index: the head the lane cursor must have.
    pub fn expected_head(&self) -> Option<u64> {
        self.queued.difference(&self.finished).next().copied()
    }
}

/// What the runner remembers between steps.
#[derive(Debug, Clone, Default)]
pub struct Model {
    known: Vec<KnownHead>,
    /// Lanes by `(session, consumer, lane)`.
    pub lanes: BTreeMap<(usize, String, String), LaneModel>,
    /// Every type list declared for a log `(consumer, lane)`.
    pub log_types: BTreeMap<(String, String), Vec<Option<Vec<String>>>>,
    /// Input patterns left out.
    pub avoid: Avoid,
}

fn session_index(name: &str) -> usize {
    SESSIONS.iter().position(|s| *s == name).unwrap_or(0)
}

fn session_name(n: u8) -> String {
    pick(&SESSIONS, n).to_owned()
}

fn lease(spec: LeaseSpec, now: i64) -> (Option<i64>, Option<i64>) {
    match spec {
        LeaseSpec::Ttl(ttl) => (Some(ttl), None),
        LeaseSpec::ExpiresIn(offset) => (None, Some(now + offset)),
        LeaseSpec::Neither => (None, None),
        LeaseSpec::ZeroTtl => (Some(0), None),
    }
}

fn not_before(when: WhenSpec, now: i64) -> NotBefore {
    match when {
        WhenSpec::After(ms) => NotBefore::AfterMs(ms),
        WhenSpec::At(offset) => NotBefore::AtMs(now.saturating_add(offset)),
    }
}

fn redrive_action(skip: bool) -> RedriveAction {
    if skip {
        RedriveAction::Skip
    } else {
        RedriveAction::Retry
    }
}

/// The index an `if_last_index` spec names against the session's `head`.
fn if_last_index(spec: IfLast, head: u64) -> u64 {
    match spec {
        IfLast::Head => head,
        IfLast::Behind(n) => head.saturating_sub(u64::from(n) + 1),
    }
}

fn with_delta(attempt: u32, delta: i8) -> u32 {
    attempt.saturating_add_signed(i32::from(delta))
}

impl Model {
    /// An empty model whose resolutions leave out what `avoid` asks.
    pub fn new(avoid: Avoid) -> Self {
        Self {
            avoid,
            ..Self::default()
        }
    }

    /// The `n`-th most recently claimed head, if any was claimed.
    fn recent(&self, n: u8) -> Option<&KnownHead> {
        let len = self.known.len();
        if len == 0 {
            return None;
        }
        self.known.get(len - 1 - usize::from(n) % len)
    }

    fn event(&self, spec: &EventSpec, ids: &[&str], now: i64) -> NewEvent {
        let mut event = NewEvent::new(pick(&TYPES, spec.event_type), json!(spec.payload));
        if let Some(id) = spec.id {
            event = event.with_id(pick(ids, id));
        }
        for (consumer, lane, when) in &spec.targets {
            let consumer = pick(&TARGET_CONSUMERS, *consumer);
            let mut target = match lane {
                Some(lane) if self.avoid.target_lane_conflicts => {
                    Target::lane(consumer, pick(&LANES[..2], *lane))
                }
                Some(lane) => Target::lane(consumer, pick(&LANES, *lane)),
                None => Target::event(consumer),
            };
            target.not_before = when.map(|when| not_before(when, now));
            event = event.with_target(target);
        }
        if let Some(known) = spec.cause.and_then(|n| self.recent(n)) {
            event = event.with_cause(known.cause());
        }
        event
    }

    /// Turns `op` into a concrete call against the reference's current state.
    pub fn resolve(&self, op: &Op, state: &StoreState, now: i64) -> Call {
        match op {
            Op::Append {
                session,
                events,
                consumers,
                origin,
            } => Call::Append {
                session: session_name(*session),
                events: events
                    .iter()
                    .map(|e| self.event(e, &EVENT_IDS, now))
                    .collect(),
                options: AppendOptions {
                    consumers: declarations(consumers, self.avoid),
                    origin_index: origin.map(u64::from),
                },
            },
            Op::Claim {
                session,
                holder,
                lease: spec,
                exclude,
                consumers,
                max_failures,
                through,
                limit,
            } => {
                let (ttl_ms, expires_at_ms) = lease(*spec, now);
                Call::Claim(ClaimRequest {
                    session_id: session_name(*session),
                    holder: pick(&HOLDERS, *holder).to_owned(),
                    ttl_ms,
                    expires_at_ms,
                    exclude: exclude
                        .iter()
                        .filter_map(|n| self.recent(*n).map(|k| k.cursor.clone()))
                        .collect(),
                    consumers: declarations(consumers, self.avoid),
                    max_failures: max_failures.map(u32::from),
                    through: through.map(u64::from),
                    limit: limit.map(usize::from),
                })
            }
            Op::Renew {
                holder,
                picks,
                attempt_delta,
                lease: spec,
            } => {
                let first = picks.first().and_then(|n| self.recent(*n));
                let session = first.map_or(0, |k| k.session);
                let (ttl_ms, expires_at_ms) = lease(*spec, now);
                let mut claims: Vec<HeldClaim> = Vec::new();
                for known in picks.iter().filter_map(|n| self.recent(*n)) {
                    let claim = HeldClaim {
                        cursor: known.cursor.clone(),
                        attempt: with_delta(known.attempt, *attempt_delta),
                    };
                    if known.session == session && !claims.contains(&claim) {
                        claims.push(claim);
                    }
                }
                Call::Renew(RenewRequest {
                    incarnation: first.and_then(KnownHead::fence),
                    session_id: SESSIONS[session % SESSIONS.len()].to_owned(),
                    holder: pick(&HOLDERS, *holder).to_owned(),
                    claims,
                    ttl_ms,
                    expires_at_ms,
                })
            }
            Op::Complete {
                pick: n,
                attempt_delta,
                events,
                consumers,
            } => {
                let (session, cursor, attempt, incarnation) =
                    self.target_of(state, *n, *attempt_delta);
                Call::Complete(CompleteRequest {
                    incarnation,
                    session_id: session,
                    consumer: cursor.consumer,
                    lane: cursor.lane,
                    index: cursor.index,
                    attempt,
                    events: events
                        .iter()
                        .map(|e| self.event(e, &REPLY_IDS, now))
                        .collect(),
                    consumers: declarations(consumers, self.avoid),
                })
            }
            Op::Fail {
                pick: n,
                attempt_delta,
                retry_after,
                max_failures,
            } => {
                let (session, cursor, attempt, incarnation) =
                    self.target_of(state, *n, *attempt_delta);
                Call::Fail(FailRequest {
                    incarnation,
                    session_id: session,
                    consumer: cursor.consumer,
                    lane: cursor.lane,
                    index: cursor.index,
                    attempt,
                    error: "handler failed".to_owned(),
                    max_failures: max_failures.map(u32::from),
                    retry_after_ms: *retry_after,
                })
            }
            Op::Redrive {
                session,
                pick: n,
                skip,
                lane,
                consumers,
            } => {
                let all = state
                    .session(usize::from(*session) % SESSIONS.len())
                    .map(|s| s.dead_letters())
                    .unwrap_or(&[]);
                let letters: Vec<_> = all
                    .iter()
                    .filter(|letter| {
                        !self.avoid.ambiguous_redrives
                            || all
                                .iter()
                                .filter(|other| {
                                    other.consumer == letter.consumer
                                        && other.event.index == letter.event.index
                                })
                                .count()
                                == 1
                    })
                    .collect();
                let letter = letters.get(usize::from(*n) % letters.len().max(1));
                let (consumer, index) = match letter {
                    Some(head) => (head.consumer.clone(), head.event.index),
                    None => ("agent".to_owned(), u64::from(*n) + 1),
                };
                let lane = match lane {
                    None => None,
                    Some(0) => letter.and_then(|head| head.lane.clone()),
                    Some(n) => Some(pick(&LANES, *n).to_owned()),
                };
                Call::Redrive(RedriveRequest {
                    incarnation: None,
                    lane,
                    session_id: session_name(*session),
                    consumer,
                    index,
                    action: redrive_action(*skip),
                    consumers: declarations(consumers, self.avoid),
                })
            }
            Op::Reschedule {
                session,
                pick: n,
                queued,
                to,
                cause,
            } => {
                let (consumer, lane, index) = self.schedule_pick(state, *session, *n, *queued);
                let cause = cause.and_then(|n| self.recent(n));
                Call::Reschedule(RescheduleRequest {
                    // Fenced like the cause: stale after a delete.
                    incarnation: cause.and_then(KnownHead::fence),
                    session_id: session_name(*session),
                    consumer,
                    lane,
                    index,
                    change: match to {
                        Some(when) => ScheduleChange::To(not_before(*when, now)),
                        None => ScheduleChange::Cancel,
                    },
                    cause: cause.map(KnownHead::cause),
                })
            }
            Op::Pause {
                consumer,
                session,
                until,
            } => Call::Pause(PauseRequest {
                consumer: pick(&WORK_CONSUMERS, *consumer).to_owned(),
                session_id: self.scope(*session),
                until_ms: until.map(|ms| now + ms),
            }),
            Op::Resume {
                consumer,
                session,
                listed,
            } => {
                let pauses = state.pauses.as_deref().unwrap_or(&[]);
                match pauses.get(usize::from(*consumer) % pauses.len().max(1)) {
                    Some(pause) if *listed => Call::Resume(ResumeRequest {
                        consumer: pause.consumer.clone(),
                        session_id: pause.session_id.clone(),
                    }),
                    _ => Call::Resume(ResumeRequest {
                        consumer: pick(&WORK_CONSUMERS, *consumer).to_owned(),
                        session_id: self.scope(*session),
                    }),
                }
            }
            Op::RedriveAll {
                skip,
                consumer,
                session,
                lane,
                since,
                before,
                limit,
            } => Call::RedriveAll(BulkRedrive {
                action: redrive_action(*skip),
                consumer: consumer.map(|n| pick(&WORK_CONSUMERS, n).to_owned()),
                session_id: self.scope(*session),
                lane: lane.map(|n| pick(&LANES, n).to_owned()),
                dead_since_ms: since.map(|ms| now - ms),
                dead_before_ms: before.map(|ms| now + ms),
                limit: limit.map(usize::from),
            }),
            Op::Fork {
                session,
                into,
                through,
            } => {
                let head = state
                    .session(usize::from(*session) % SESSIONS.len())
                    .map_or(0, |s| s.head());
                Call::Fork(ForkRequest {
                    session_id: session_name(*session),
                    into: session_name(*into),
                    through: through.map(|delta| head.saturating_add_signed(i64::from(delta))),
                })
            }
            Op::Clear {
                session,
                if_last,
                cause,
            } => {
                let head = state
                    .session(usize::from(*session) % SESSIONS.len())
                    .map_or(0, |s| s.head());
                let cause = cause.and_then(|n| self.recent(n));
                Call::Clear(ClearRequest {
                    incarnation: cause.and_then(KnownHead::fence),
                    session_id: session_name(*session),
                    if_last_index: if_last.map(|spec| if_last_index(spec, head)),
                    cause: cause.map(KnownHead::cause),
                })
            }
            Op::Reclaim { session } => Call::Reclaim(session_name(*session)),
            Op::Read {
                session,
                after,
                through,
                limit,
            } => Call::Read(
                session_name(*session),
                ReadOptions {
                    after: after.map(u64::from),
                    through: through.map(u64::from),
                    limit: limit.map(usize::from),
                },
            ),
            Op::WakeLog { session, consumer } => {
                Call::WakeLog(session_name(*session), consumer.declaration(self.avoid))
            }
            Op::WriteState {
                session,
                reducer,
                writes,
            } => {
                let head = state
                    .session(usize::from(*session) % SESSIONS.len())
                    .map_or(0, |s| s.head());
                let writes = writes
                    .iter()
                    .map(|(back, value, pins)| StateWrite {
                        index: head.saturating_sub(u64::from(*back)),
                        state: json!({ "n": value }),
                        pins: pins
                            .iter()
                            .filter_map(|n| self.recent(*n).map(|k| k.cursor.clone()))
                            .collect(),
                    })
                    .collect();
                Call::WriteState(
                    session_name(*session),
                    pick(&REDUCERS, *reducer).to_owned(),
                    writes,
                )
            }
            Op::ReadState {
                session,
                reducer,
                at,
            } => Call::ReadState(
                session_name(*session),
                pick(&REDUCERS, *reducer).to_owned(),
                ReadStateOptions {
                    at: at.map(u64::from),
                },
            ),
            Op::SetPresence {
                session,
                participant,
                fields,
                at,
                seen,
                ttl,
            } => {
                let values = fields
                    .iter()
                    .map(|(field, value)| {
                        (
                            pick(&FIELDS, *field).to_owned(),
                            value.map_or(Value::Null, |v| json!(v)),
                        )
                    })
                    .collect();
                Call::SetPresence(
                    session_name(*session),
                    pick(&PARTICIPANTS, *participant).to_owned(),
                    values,
                    PresenceMeta {
                        at: i64::from(*at),
                        seen: seen.map(u64::from),
                        ttl_ms: i64::from(*ttl),
                    },
                )
            }
            Op::ClaimWork {
                holder,
                lease: spec,
                consumers,
                sessions,
                max_failures,
                limit,
                session_limit,
                per_session_limit,
                wait_ms,
            } => {
                let (ttl_ms, expires_at_ms) = lease(*spec, now);
                let sessions = match sessions {
                    Some(list) => Some(list.iter().map(|n| session_name(*n)).collect()),
                    None if self.avoid.unlisted_work_claims => {
                        Some(SESSIONS.iter().map(|s| (*s).to_owned()).collect())
                    }
                    None => None,
                };
                Call::ClaimWork(ClaimWorkRequest {
                    holder: pick(&HOLDERS, *holder).to_owned(),
                    ttl_ms,
                    expires_at_ms,
                    consumers: declaration_list(consumers, self.avoid),
                    sessions,
                    max_failures: max_failures.map(u32::from),
                    limit: limit.map(usize::from),
                    session_limit: session_limit.map(usize::from),
                    per_session_limit: per_session_limit.map(usize::from),
                    wait_ms: wait_ms.map(i64::from),
                })
            }
            Op::ListWork {
                consumers,
                after,
                limit,
            } => {
                let mut names: Vec<String> = Vec::new();
                for name in consumers.iter().map(|n| pick(&WORK_CONSUMERS, *n)) {
                    if !names.iter().any(|known| known == name) {
                        names.push(name.to_owned());
                    }
                }
                Call::ListWork(ListWork {
                    consumers: names,
                    after: after.map(session_name),
                    limit: limit.map(usize::from),
                })
            }
            Op::DeleteSession {
                session,
                force,
                if_last_index: if_last,
            } => {
                let head = state
                    .session(usize::from(*session) % SESSIONS.len())
                    .map_or(0, |s| s.head());
                Call::DeleteSession(DeleteSessionRequest {
                    session_id: session_name(*session),
                    force: *force,
                    if_last_index: if_last.map(|spec| if_last_index(spec, head)),
                })
            }
            // A prune acts store-wide: not where stores share a database.
            Op::Prune { .. } if self.avoid.unlisted_work_claims => Call::Advance(0),
            Op::Prune {
                idle_for_ms,
                limit,
                dry_run,
                include_dead_letters,
            } => Call::Prune(PruneRequest {
                idle_for_ms: *idle_for_ms,
                limit: limit.map(usize::from),
                dry_run: *dry_run,
                include_dead_letters: *include_dead_letters,
                after: None,
            }),
            Op::Advance { ms } => Call::Advance(*ms),
        }
    }

    /// The session a pause, resume or bulk redrive names: `None` is every
    /// session, unless the factory's stores share a database (then `s0`).
    fn scope(&self, session: Option<u8>) -> Option<String> {
        match session {
            Some(n) => Some(session_name(n)),
            None if self.avoid.unlisted_work_claims => Some(session_name(0)),
            None => None,
        }
    }

    /// The `(consumer, lane, index)` a reschedule names: the `n`-th index
    /// queued behind a lane's head when `queued` (and one is), else the
    /// `n`-th cursor head, else a made-up `(agent, event cursor, n + 1)`.
    fn schedule_pick(
        &self,
        state: &StoreState,
        session: u8,
        n: u8,
        queued: bool,
    ) -> (String, Option<String>, u64) {
        let index = usize::from(session) % SESSIONS.len();
        let mut candidates: Vec<(String, Option<String>, u64)> = Vec::new();
        if queued {
            for (key, lane) in self.lanes.iter().filter(|(key, _)| key.0 == index) {
                let head = lane.expected_head();
                for queued in lane.queued.difference(&lane.finished) {
                    if Some(*queued) != head {
                        candidates.push((key.1.clone(), Some(key.2.clone()), *queued));
                    }
                }
            }
        }
        if candidates.is_empty() {
            let cursors = state.session(index).map(|s| s.cursors()).unwrap_or(&[]);
            candidates = cursors
                .iter()
                .filter_map(|c| {
                    c.head
                        .map(|head| (c.consumer.clone(), c.lane.clone(), head))
                })
                .collect();
        }
        candidates
            .get(usize::from(n) % candidates.len().max(1))
            .cloned()
            .unwrap_or_else(|| ("agent".to_owned(), None, u64::from(n) + 1))
    }

    /// The head a completion or failure names: a recently claimed one, else
    /// a current (unclaimed) head of the first session, else a made-up
    /// `(agent, event cursor, i)` with `i` in `0..=head + 1`.
    /// A recently claimed head is named with its incarnation; the others
    /// with none.
    fn target_of(
        &self,
        state: &StoreState,
        n: u8,
        delta: i8,
    ) -> (String, CursorRef, u32, Option<u64>) {
        if let Some(known) = self.recent(n) {
            return (
                SESSIONS[known.session % SESSIONS.len()].to_owned(),
                known.cursor.clone(),
                with_delta(known.attempt, delta),
                known.fence(),
            );
        }
        let current = state
            .session(0)
            .map(|s| s.cursors())
            .unwrap_or(&[])
            .iter()
            .filter_map(|c| c.head_ref().map(|r| (r, c.dispatch.attempt_count)))
            .nth(usize::from(n));
        match current {
            Some((cursor, attempt)) => (
                SESSIONS[0].to_owned(),
                cursor,
                with_delta(attempt, delta),
                None,
            ),
            None => (
                SESSIONS[0].to_owned(),
                CursorRef::new(
                    "agent",
                    None,
                    u64::from(n) % (state.session(0).map_or(0, |s| s.head()) + 2),
                ),
                with_delta(1, delta),
                None,
            ),
        }
    }

    /// Records the declarations a call passes (before it runs).
    pub fn note_declarations(&mut self, call: &Call) {
        let declared: Vec<ConsumerDeclaration> = match call {
            Call::Append { options, .. } => options.consumers.clone().unwrap_or_default(),
            Call::Claim(r) => r.consumers.clone().unwrap_or_default(),
            Call::ClaimWork(r) => r.consumers.clone(),
            Call::Complete(r) => r.consumers.clone().unwrap_or_default(),
            Call::Redrive(r) => r.consumers.clone().unwrap_or_default(),
            Call::WakeLog(_, consumer) => vec![consumer.clone()],
            _ => Vec::new(),
        };
        for consumer in declared {
            if let Some(log) = consumer.log {
                let versions = self
                    .log_types
                    .entry((consumer.name.clone(), log.lane.clone()))
                    .or_default();
                if !versions.contains(&log.types) {
                    versions.push(log.types);
                }
            }
        }
    }

    /// Follows the reference's result of `call`: `before` and `after` are
    /// the reference's states around it.
    pub fn observe(
        &mut self,
        call: &Call,
        outcome: &Projection,
        before: &StoreState,
        after: &StoreState,
    ) {
        if let (Call::RedriveAll(request), Ok(Outcome::RedriveAll(result))) = (call, outcome) {
            if request.action == RedriveAction::Skip {
                for head in &result.redriven {
                    if let Some(lane) = &head.cursor.lane {
                        let session = session_index(&head.session_id);
                        self.finish(session, &head.cursor.consumer, lane, head.cursor.index);
                    }
                }
            }
            return;
        }
        if let (Call::Prune(request), Ok(Outcome::Prune(result))) = (call, outcome) {
            if !request.dry_run {
                for name in &result.sessions {
                    self.forget(session_index(name));
                }
            }
            return;
        }
        if let (Call::ClaimWork(_), Ok(Outcome::ClaimWork(ClaimWorkResult::Claimed { sessions }))) =
            (call, outcome)
        {
            for claim in sessions {
                let session = session_index(&claim.session_id);
                self.remember(session, &claim.heads);
            }
            return;
        }
        let Some(session_name) = call.session() else {
            return;
        };
        let session = session_index(session_name);
        let head_before = before.session(session).map_or(0, |s| s.head());
        match (call, outcome) {
            (Call::Claim(_), Ok(Outcome::Claim(ClaimResult::Claimed { heads, .. }))) => {
                self.remember(session, heads);
            }
            (Call::Append { events, .. }, Ok(Outcome::Append(result))) => {
                self.queue(session, head_before, events, &result.events);
            }
            (
                Call::Complete(request),
                Ok(Outcome::Complete(CompleteResult::Completed { events })),
            ) => {
                if let Some(lane) = &request.lane {
                    let key = (session, request.consumer.clone(), lane.clone());
                    if let Some(model) = self.lanes.get_mut(&key) {
                        if model.expected_head() == Some(request.index) {
                            model.finished.insert(request.index);
                        }
                    }
                }
                self.queue(session, head_before, &request.events, events);
            }
            (Call::Redrive(request), Ok(Outcome::Redrive(result)))
                if result.redriven && request.action == RedriveAction::Skip =>
            {
                let was = before
                    .session(session)
                    .map(|s| s.dead_letters())
                    .unwrap_or(&[]);
                let now = after
                    .session(session)
                    .map(|s| s.dead_letters())
                    .unwrap_or(&[]);
                for letter in was {
                    let gone = !now.iter().any(|h| h.cursor_ref() == letter.cursor_ref());
                    if letter.consumer != request.consumer
                        || letter.event.index != request.index
                        || !gone
                    {
                        continue;
                    }
                    let Some(lane) = &letter.lane else { continue };
                    let key = (session, letter.consumer.clone(), lane.clone());
                    if let Some(model) = self.lanes.get_mut(&key) {
                        if model.expected_head() == Some(request.index) {
                            model.finished.insert(request.index);
                        }
                    }
                }
            }
            (Call::Reschedule(request), Ok(Outcome::Reschedule(RescheduleResult::Cancelled))) => {
                // A cancelled head or queued index leaves the lane's queue.
                if let Some(lane) = &request.lane {
                    let key = (session, request.consumer.clone(), lane.clone());
                    self.lanes
                        .entry(key)
                        .or_default()
                        .finished
                        .insert(request.index);
                }
            }
            (Call::Clear(_), Ok(Outcome::Clear(ClearResult::Cleared { .. }))) => {
                self.lanes.retain(|key, _| key.0 != session);
            }
            (
                Call::DeleteSession(_),
                Ok(Outcome::DeleteSession(DeleteSessionResult::Deleted { .. })),
            ) => self.forget(session),
            _ => {}
        }
    }

    /// A deleted session's lanes start over (its heads claimed before stay
    /// known: their requests are stale now).
    fn forget(&mut self, session: usize) {
        self.lanes.retain(|key, _| key.0 != session);
    }

    /// Marks `index` finished on a lane when it is the lane's head.
    fn finish(&mut self, session: usize, consumer: &str, lane: &str, index: u64) {
        let key = (session, consumer.to_owned(), lane.to_owned());
        if let Some(model) = self.lanes.get_mut(&key) {
            if model.expected_head() == Some(index) {
                model.finished.insert(index);
            }
        }
    }

    /// Remembers heads claimed in `session` as the most recent ones.
    fn remember(&mut self, session: usize, heads: &[a2_store_api::Head]) {
        for head in heads {
            let known = KnownHead {
                session,
                cursor: head.cursor_ref(),
                attempt: head.dispatch.attempt_count,
                incarnation: head.incarnation,
            };
            self.known.retain(|k| {
                !(k.session == session
                    && k.cursor == known.cursor
                    && k.incarnation == known.incarnation)
            });
            self.known.push(known);
        }
        let excess = self.known.len().saturating_sub(KNOWN_HEADS);
        self.known.drain(..excess);
    }

    /// Queues the lane targets of the newly stored rows among `stored`.
    fn queue(
        &mut self,
        session: usize,
        head_before: u64,
        requested: &[NewEvent],
        stored: &[a2_store_api::StoredEvent],
    ) {
        for (event, row) in requested.iter().zip(stored) {
            if row.index <= head_before {
                continue;
            }
            for target in &event.targets {
                if let Some(lane) = &target.lane {
                    self.lanes
                        .entry((session, target.consumer.clone(), lane.clone()))
                        .or_default()
                        .queued
                        .insert(row.index);
                }
            }
        }
    }
}
