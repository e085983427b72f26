//! One session's whole state and the steps its operations share: fencing,
//! lane-conflict checks, inserting a batch, advancing a cursor, building heads.

use std::collections::HashSet;
use std::sync::Arc;

use a2_store_api::{
    dispatch, log, schedule, Cause, Clock, ConsumerDeclaration, CursorKind, Dispatch, ForkOrigin,
    Head, IdGenerator, NewEvent, Pause, Result, StoreError, StoredEvent, Target,
};

use crate::cursor::{Completion, CursorState};
use crate::cursor_table::{CursorTable, Lookup};
use crate::event_log::{to_stored, EventLog, Row};
use crate::ids::CursorId;
use crate::presence::PresenceTable;
use crate::snapshot_cache::SnapshotCache;
use crate::subscribers::Subscribers;

/// The clock and id generator a session operation runs with.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    /// Now, in ms.
    pub clock: &'a dyn Clock,
    /// Fresh event ids.
    pub ids: &'a dyn IdGenerator,
}

/// Everything one session holds. Every operation runs under the session's
/// lock and checks everything that can fail before it changes anything.
#[derive(Debug)]
pub(crate) struct Session {
    /// The session id.
    pub id: String,
    /// Rows and their indexes.
    pub log: EventLog,
    /// Cursors and head indexes.
    pub cursors: CursorTable,
    /// Reducer snapshots.
    pub snapshots: SnapshotCache,
    /// Presence fields.
    pub presence: PresenceTable,
    /// Live subscribers.
    pub subscribers: Subscribers,
    /// The session and index it was forked from, when it is a fork.
    pub forked_from: Option<ForkOrigin>,
    /// How many heads the last claim walked (the work it did, for tests
    /// that prove a claim does not scan the session).
    pub last_claim_visits: usize,
    /// The incarnation (see [`a2_store_api::retention`]); 0 for a session
    /// standing in for one never created.
    pub incarnation: u64,
    /// When something was last appended (or the session was created by a
    /// fork or a presence write), ms; `None` while nothing was ever stored.
    pub last_activity: Option<i64>,
    /// Set when the session was deleted: whoever locks it after that looks
    /// the id up again.
    pub deleted: bool,
}

impl Session {
    /// An empty session (head 0).
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            log: EventLog::default(),
            cursors: CursorTable::default(),
            snapshots: SnapshotCache::default(),
            presence: PresenceTable::default(),
            subscribers: Subscribers::default(),
            forked_from: None,
            last_claim_visits: 0,
            incarnation: 0,
            last_activity: None,
            deleted: false,
        }
    }

    /// The same (new) session in incarnation `incarnation`.
    pub fn in_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Whether anything was ever stored in the session (an event, a fork's
    /// rows or a presence field): only such a session can be deleted, and
    /// only its requests are fenced by incarnation.
    pub fn exists(&self) -> bool {
        self.last_activity.is_some()
    }

    /// Records activity at `now` (an append, or the write creating the
    /// session when `only_first`).
    pub fn mark_active(&mut self, now: i64, only_first: bool) {
        if !only_first || self.last_activity.is_none() {
            self.last_activity = Some(now);
        }
    }

    /// The incarnation the fence compares with: `None` while the session
    /// does not exist.
    fn current_incarnation(&self) -> Option<u64> {
        self.exists().then_some(self.incarnation)
    }

    /// Whether a request naming `requested` may act on this session
    /// ([`a2_store_api::retention::incarnation_current`]).
    pub fn incarnation_current(&self, requested: Option<u64>) -> bool {
        a2_store_api::retention::incarnation_current(requested, self.current_incarnation())
    }

    /// Refuses a request naming another incarnation of this session
    /// ([`a2_store_api::retention::fence_incarnation`]).
    pub fn fence_incarnation(&self, requested: Option<u64>) -> Result<()> {
        a2_store_api::retention::fence_incarnation(&self.id, requested, self.current_incarnation())
    }

    /// Whether a served cursor (`None`: any) has a head that is not
    /// dead-lettered and not held by a pause (`pauses`: those covering the
    /// session, at `now`). O(k) hash lookups for k declarations; without a
    /// pause on a consumer of the session, O(1) for `None`.
    pub fn has_pending(
        &self,
        consumers: Option<&[ConsumerDeclaration]>,
        pauses: &[Pause],
        now: i64,
    ) -> bool {
        let heads = self.cursors.heads();
        let holds = self.holds(pauses, now);
        let pending = |slot| !holds.of(slot).is_held() && heads.consumer_pending(slot);
        match consumers {
            None if holds.is_empty() => heads.any_pending(),
            None => self
                .cursors
                .consumer_names()
                .filter_map(|name| self.cursors.consumer_id(name))
                .any(pending),
            Some(consumers) => consumers.iter().any(|consumer| {
                self.cursors
                    .consumer_id(&consumer.name)
                    .is_some_and(pending)
            }),
        }
    }

    /// The clear index as heads report it: `Some` once cleared.
    pub fn reported_clear(&self) -> Option<u64> {
        let clear = self.log.clear_index();
        (clear > 0).then_some(clear)
    }

    /// Fencing ([`dispatch::fence`]): `cause` must name a cursor whose head
    /// is `cause.index` (above the clear) at attempt `cause.attempt`, not
    /// dead-lettered.
    pub fn fence(&self, cause: &Cause) -> Result<()> {
        let cursor = match self
            .cursors
            .lookup(&cause.consumer, cause.lane.as_deref(), cause.index)
        {
            Lookup::Live(_, cursor) => Some((cursor.head, &cursor.dispatch)),
            Lookup::Finished(_) | Lookup::Missing => None,
        };
        dispatch::fence(&self.id, self.log.clear_index(), cause, cursor)
    }

    /// Lane conflicts with stored cursors: a target on a stored log lane, or
    /// a log declaration on a stored target lane.
    pub fn check_lane_conflicts(
        &self,
        events: &[NewEvent],
        consumers: Option<&[ConsumerDeclaration]>,
    ) -> Result<()> {
        for target in events.iter().flat_map(|event| &event.targets) {
            let Some(lane) = &target.lane else { continue };
            if let Some((_, cursor)) = self.cursors.find(&target.consumer, Some(lane), 0) {
                if cursor.kind == CursorKind::Log {
                    return Err(StoreError::lane_conflict(&target.consumer, lane));
                }
            }
        }
        for consumer in consumers.unwrap_or_default() {
            let Some(log) = &consumer.log else { continue };
            if let Some((_, cursor)) = self.cursors.find(&consumer.name, Some(&log.lane), 0) {
                if cursor.kind != CursorKind::Log {
                    return Err(StoreError::lane_conflict(&consumer.name, &log.lane));
                }
            }
        }
        Ok(())
    }

    /// Refreshes the types of existing log cursors from `consumers`; the
    /// current heads are kept.
    pub fn refresh_log_types(&mut self, consumers: Option<&[ConsumerDeclaration]>) {
        for consumer in consumers.unwrap_or_default() {
            let Some(log) = &consumer.log else { continue };
            let Some((id, cursor)) = self.cursors.find(&consumer.name, Some(&log.lane), 0) else {
                continue;
            };
            if cursor.kind != CursorKind::Log || cursor.types == log.types {
                continue;
            }
            let types = log.types.clone();
            self.cursors.modify(id, |cursor| cursor.types = types);
        }
    }

    /// Gives log cursor `id` the declared `types` and, when `wake` and it
    /// has no head, its next taken event after its position as a fresh head.
    pub fn update_log_cursor(&mut self, id: CursorId, types: Option<Vec<String>>, wake: bool) {
        let next = match self.cursors.get(id) {
            Some(cursor) if wake && cursor.head.is_none() => {
                self.log.next_taken(cursor.position, types.as_deref())
            }
            _ => None,
        };
        self.cursors.modify(id, |cursor| {
            cursor.types = types;
            if next.is_some() {
                cursor.head = next;
                cursor.dispatch = Dispatch::default();
            }
        });
    }

    /// The stored row owning each supplied id of `events` (ids never stored
    /// are left out).
    pub fn owners(&self, events: &[NewEvent]) -> Vec<u64> {
        events
            .iter()
            .filter_map(|event| event.id.as_deref())
            .filter_map(|id| self.log.owner_of(id))
            .collect()
    }

    /// The stored rows at `indexes`, in order.
    pub fn rows(&self, indexes: &[u64]) -> Result<Vec<StoredEvent>> {
        indexes
            .iter()
            .map(|index| {
                self.log
                    .stored(&self.id, *index)
                    .ok_or_else(|| self.corrupt(*index))
            })
            .collect()
    }

    /// The error for a row an index says exists but does not (a bug).
    pub fn corrupt(&self, index: u64) -> StoreError {
        self.inconsistent(&format!("no row at index {index}"))
    }

    /// The error for state the indexes say exists but does not (a bug):
    /// reported, never a panic.
    pub fn inconsistent(&self, what: &str) -> StoreError {
        StoreError::Backend {
            message: format!(
                "in-memory state of session '{}' is inconsistent: {what}",
                self.id
            ),
            source: None,
        }
    }

    /// A cursor's head as claims and `dead_letters` report it.
    pub fn head_view(&self, cursor: &CursorState) -> Result<Head> {
        let index = cursor
            .head
            .ok_or_else(|| self.inconsistent("a reported cursor has no head"))?;
        let event = self
            .log
            .stored(&self.id, index)
            .ok_or_else(|| self.corrupt(index))?;
        Ok(Head::new(
            event,
            String::from(&*cursor.consumer),
            cursor.lane.as_deref().map(str::to_owned),
            cursor.dispatch.clone(),
        )
        .with_clear_index(self.reported_clear())
        .with_incarnation(self.incarnation))
    }

    /// Appends an already validated, fenced and conflict-checked batch:
    /// assigns ids (a generated id already stored is `PartialDuplicateBatch`,
    /// checked before anything changes), stores the rows with `cause` (or
    /// each event's own), creates or extends target cursors, starts declared
    /// log cursors and notifies subscribers.
    pub fn insert_batch(
        &mut self,
        env: Env<'_>,
        events: &[NewEvent],
        cause: Option<&Cause>,
        consumers: Option<&[ConsumerDeclaration]>,
    ) -> Result<Vec<StoredEvent>> {
        let mut ids = Vec::with_capacity(events.len());
        let mut fresh = HashSet::with_capacity(events.len());
        for event in events {
            let id = match &event.id {
                Some(id) => id.clone(),
                None => env.ids.next_id(),
            };
            if id.is_empty() || self.log.owner_of(&id).is_some() || !fresh.insert(id.clone()) {
                return Err(StoreError::id_taken(&self.id, &id));
            }
            ids.push(id);
        }
        let now = env.clock.now_ms();
        let base = self.log.head();
        let mut stored = Vec::with_capacity(events.len());
        for (event, id) in events.iter().zip(ids) {
            let row = Row {
                id: Arc::from(id),
                event_type: self.log.intern_type(&event.event_type),
                payload: event.payload.clone(),
                created_at: now,
                cause: cause.cloned().or_else(|| event.cause.clone()),
            };
            stored.push(to_stored(&self.id, self.log.head() + 1, &row));
            self.log.push(row);
        }
        for (event, row) in events.iter().zip(&stored) {
            // One cursor per (consumer, lane) of the event, taking the
            // latest time its targets ask for.
            let mut seen: HashSet<(&str, Option<&str>)> = HashSet::new();
            for target in &event.targets {
                let key = (target.consumer.as_str(), target.lane.as_deref());
                if !seen.insert(key) {
                    continue;
                }
                let same = event
                    .targets
                    .iter()
                    .filter(|other| (other.consumer.as_str(), other.lane.as_deref()) == key);
                let due = schedule::merged_due_at(same, now);
                self.add_target(target, row.index, due);
            }
        }
        self.start_log_cursors(consumers, base, &stored);
        self.subscribers.notify(&stored);
        if !stored.is_empty() {
            self.mark_active(now, false);
        }
        Ok(stored)
    }

    /// Creates an event cursor or queues `index` on a lane cursor, not
    /// claimable before `due` (see [`Dispatch::scheduled`]).
    fn add_target(&mut self, target: &Target, index: u64, due: Option<i64>) {
        let found = self
            .cursors
            .find(&target.consumer, target.lane.as_deref(), index);
        match (found, &target.lane) {
            (Some(_), None) => {}
            (Some((id, _)), Some(_)) => {
                self.cursors.modify(id, |cursor| cursor.enqueue(index, due));
            }
            (None, None) => {
                let mut cursor = CursorState::new(
                    &target.consumer,
                    None,
                    CursorKind::Event,
                    index.saturating_sub(1),
                );
                cursor.head = Some(index);
                cursor.dispatch = Dispatch::scheduled(due);
                self.cursors.insert(cursor);
            }
            (None, Some(lane)) => {
                let mut cursor = CursorState::new(
                    &target.consumer,
                    Some(lane),
                    CursorKind::Lane,
                    self.log.clear_index(),
                );
                cursor.enqueue(index, due);
                self.cursors.insert(cursor);
            }
        }
    }

    /// Creates or wakes the declared log cursors whose types the inserted
    /// rows hold, and refreshes every declared log cursor's types.
    fn start_log_cursors(
        &mut self,
        consumers: Option<&[ConsumerDeclaration]>,
        base: u64,
        stored: &[StoredEvent],
    ) {
        for consumer in consumers.unwrap_or_default() {
            let Some(log) = &consumer.log else { continue };
            let first = stored
                .iter()
                .find(|row| log::takes(log.types.as_deref(), &row.event_type))
                .map(|row| row.index);
            match self.cursors.find(&consumer.name, Some(&log.lane), 0) {
                Some((_, cursor)) if cursor.kind != CursorKind::Log => {}
                Some((id, _)) => self.update_log_cursor(id, log.types.clone(), first.is_some()),
                None => {
                    let Some(first) = first else { continue };
                    let clear = self.log.clear_index();
                    let position = log.start_position(clear, base);
                    let head = if log.backfill {
                        self.log.next_taken(position, log.types.as_deref())
                    } else {
                        Some(first)
                    };
                    let mut cursor = CursorState::new(
                        &consumer.name,
                        Some(&log.lane),
                        CursorKind::Log,
                        position,
                    );
                    cursor.head = head;
                    cursor.types = log.types.clone();
                    self.cursors.insert(cursor);
                }
            }
        }
    }

    /// Moves cursor `id` past its head: releases the head's pins, records
    /// `completion` (a log cursor keeps only its latest), and moves to the
    /// next queued index (lane), next taken event (log) or finishes (event).
    pub fn advance(&mut self, id: CursorId, completion: Option<Completion>) {
        let Some(cursor) = self.cursors.get(id) else {
            return;
        };
        let Some(done) = cursor.head else { return };
        self.snapshots.release((id, done));
        let kind = cursor.kind;
        if kind == CursorKind::Event {
            self.cursors.finish_event(id, completion);
            return;
        }
        let next_log = match kind {
            CursorKind::Log => self.log.next_taken(done, cursor.types.as_deref()),
            _ => None,
        };
        self.cursors.modify(id, |cursor| {
            cursor.position = done;
            if let Some(completion) = completion {
                if kind == CursorKind::Log {
                    cursor.completions.clear();
                }
                cursor.completions.insert(done, completion);
            }
            let (head, not_before) = match kind {
                CursorKind::Lane => match cursor.queue.pop_front() {
                    Some(queued) => (Some(queued.index), queued.not_before),
                    None => (None, None),
                },
                _ => (next_log, None),
            };
            cursor.head = head;
            cursor.dispatch = Dispatch::scheduled(not_before);
        });
    }

    /// Brute-force consistency check of every index (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self) -> Result<(), String> {
        self.log.check_invariants()?;
        self.cursors.check_invariants()?;
        let clear = self.log.clear_index();
        for cursor in self.cursors.iter() {
            if let Some(head) = cursor.head {
                if head <= clear || head > self.log.head() || self.log.row(head).is_none() {
                    return Err(format!("cursor head {head} is not a live row"));
                }
                if head <= cursor.position {
                    return Err(format!("cursor head {head} not after its position"));
                }
                if cursor.kind == CursorKind::Event && head != cursor.position + 1 {
                    return Err(format!("event cursor head {head} is not position + 1"));
                }
            }
            if cursor.kind == CursorKind::Log && cursor.position < clear {
                return Err("log cursor below the clear".into());
            }
        }
        Ok(())
    }
}
