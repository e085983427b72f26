//! `pause`, `resume` and `pauses`: the store-wide table of paused
//! consumers, and how a session's claims and `has_pending` see it.
//!
//! Pauses are kept once for the whole store, not per session: a store-wide
//! pause covers sessions not created yet. Whether a pause holds a head is
//! [`a2_store_api::pause`]'s to say; this module only finds the pauses that
//! cover a session or a `(session, consumer)` pair.
//!
//! Lock order: the pause table's lock is the innermost: it is taken under a
//! session's lock or the work index's, never the other way round.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use a2_store_api::{
    order, pause, validate, Hold, Pause, PauseRequest, Result, ResumeRequest, ResumeResult,
    StoreError,
};

use crate::ids::ConsumerId;
use crate::session::Session;
use crate::store::{lock, MemoryStore};

/// Every stored pause, by scope. Pauses whose end has passed may linger
/// until the next `pause` or `resume`; every reader filters them out.
#[derive(Debug, Default)]
pub(crate) struct PauseTable {
    /// Store-wide pauses by consumer.
    store_wide: BTreeMap<String, Pause>,
    /// Per-session pauses by `(session, consumer)`.
    by_session: BTreeMap<(String, String), Pause>,
}

impl PauseTable {
    /// Whether no pause is stored (the claim paths then skip every check).
    pub fn is_empty(&self) -> bool {
        self.store_wide.is_empty() && self.by_session.is_empty()
    }

    /// The pauses that may cover `session_id`: the store-wide ones and the
    /// session's own.
    pub fn covering(&self, session_id: &str) -> Vec<Pause> {
        let mut pauses: Vec<Pause> = self.store_wide.values().cloned().collect();
        pauses.extend(self.session_pauses(session_id).cloned());
        pauses
    }

    fn session_pauses<'a>(&'a self, session_id: &'a str) -> impl Iterator<Item = &'a Pause> {
        self.by_session
            .range((session_id.to_owned(), String::new())..)
            .take_while(move |((session, _), _)| session == session_id)
            .map(|(_, pause)| pause)
    }

    /// How the pauses hold `consumer` in `session_id` at `now` ([`pause::hold`]).
    pub fn hold(&self, consumer: &str, session_id: &str, now: i64) -> Hold {
        if self.is_empty() {
            return Hold::Free;
        }
        let mut pauses: Vec<Pause> = Vec::with_capacity(2);
        if let Some(pause) = self.store_wide.get(consumer) {
            pauses.push(pause.clone());
        }
        if let Some(pause) = self
            .by_session
            .get(&(session_id.to_owned(), consumer.to_owned()))
        {
            pauses.push(pause.clone());
        }
        pause::hold(&pauses, consumer, session_id, now)
    }

    /// How `consumer`'s store-wide pause holds it at `now`: every pair of
    /// the consumer is held at least that long.
    pub fn store_wide_hold(&self, consumer: &str, now: i64) -> Hold {
        match self.store_wide.get(consumer) {
            Some(pause) => pause::hold(std::slice::from_ref(pause), consumer, "", now),
            None => Hold::Free,
        }
    }

    /// Stores `pause`, replacing the pause of its scope; drops pauses that
    /// have ended.
    fn insert(&mut self, pause: Pause, now: i64) {
        self.prune(now);
        match pause.session_id.clone() {
            None => {
                self.store_wide.insert(pause.consumer.clone(), pause);
            }
            Some(session) => {
                self.by_session
                    .insert((session, pause.consumer.clone()), pause);
            }
        }
    }

    /// Removes the pause of one scope; returns it.
    fn remove(&mut self, consumer: &str, session_id: Option<&str>) -> Option<Pause> {
        match session_id {
            None => self.store_wide.remove(consumer),
            Some(session) => self
                .by_session
                .remove(&(session.to_owned(), consumer.to_owned())),
        }
    }

    /// Forgets the pauses of `session_id` (deleted).
    pub fn remove_session(&mut self, session_id: &str) {
        let consumers: Vec<String> = self
            .session_pauses(session_id)
            .map(|pause| pause.consumer.clone())
            .collect();
        for consumer in consumers {
            self.by_session.remove(&(session_id.to_owned(), consumer));
        }
    }

    /// Forgets the pauses whose end has passed.
    fn prune(&mut self, now: i64) {
        self.store_wide.retain(|_, pause| pause.in_force(now));
        self.by_session.retain(|_, pause| pause.in_force(now));
    }

    /// The pauses in force at `now` covering `session_id` (`None`: every
    /// pause), in [`order::compare_pauses`] order.
    fn listed(&self, session_id: Option<&str>, now: i64) -> Vec<Pause> {
        let mut pauses: Vec<Pause> = match session_id {
            Some(session) => self.covering(session),
            None => self
                .store_wide
                .values()
                .chain(self.by_session.values())
                .cloned()
                .collect(),
        };
        pauses.retain(|pause| pause.in_force(now));
        pauses.sort_by(order::compare_pauses);
        pauses
    }
}

/// How the pauses covering a session hold each of its consumers at one
/// time, by consumer slot. Empty (every consumer free) when no pause covers
/// a consumer of the session, which costs the claim paths nothing.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    by_slot: HashMap<ConsumerId, Hold>,
}

impl Holds {
    /// How consumer slot `slot` is held.
    pub fn of(&self, slot: ConsumerId) -> Hold {
        self.by_slot.get(&slot).copied().unwrap_or(Hold::Free)
    }

    /// Whether every consumer is free.
    pub fn is_empty(&self) -> bool {
        self.by_slot.is_empty()
    }
}

impl Session {
    /// How `pauses` (those covering this session) hold its consumers at `now`.
    pub fn holds(&self, pauses: &[Pause], now: i64) -> Holds {
        let mut holds = Holds::default();
        let consumers: BTreeSet<&str> = pauses.iter().map(|p| p.consumer.as_str()).collect();
        for consumer in consumers {
            let Some(slot) = self.cursors.consumer_id(consumer) else {
                continue;
            };
            let hold = pause::hold(pauses, consumer, &self.id, now);
            if hold.is_held() {
                holds.by_slot.insert(slot, hold);
            }
        }
        holds
    }

    /// Whether `consumer` has a cursor here to pause: one `cursors()` lists
    /// or a finished event cursor (both keep the consumer's slot).
    pub fn has_cursor_of(&self, consumer: &str) -> bool {
        self.cursors.consumer_id(consumer).is_some()
    }
}

impl MemoryStore {
    /// The pauses that may cover `session_id` (see [`PauseTable::covering`]).
    pub(crate) fn pauses_covering(&self, session_id: &str) -> Result<Vec<Pause>> {
        let table = lock(&self.shared.pauses, "pause table")?;
        Ok(if table.is_empty() {
            Vec::new()
        } else {
            table.covering(session_id)
        })
    }

    /// [`Store::pause`](a2_store_api::Store::pause).
    pub(crate) fn pause_consumer(&self, request: PauseRequest) -> Result<Pause> {
        validate::pause(&request)?;
        let now = self.shared.clock.now_ms();
        let stored = request.pause_at(now)?;
        let store = |stored: Pause| -> Result<Pause> {
            lock(&self.shared.pauses, "pause table")?.insert(stored.clone(), now);
            // A pause replaced by a shorter one may free work sooner.
            self.shared.signal.notify();
            Ok(stored)
        };
        match &request.session_id {
            None => store(stored),
            Some(session_id) => self.with_existing(session_id, |session, _| {
                if !session.has_cursor_of(&request.consumer) {
                    return Err(StoreError::nothing_to_pause(&request.consumer, session_id));
                }
                store(stored)
            }),
        }
    }

    /// [`Store::resume`](a2_store_api::Store::resume).
    pub(crate) fn resume_consumer(&self, request: ResumeRequest) -> Result<ResumeResult> {
        validate::resume(&request)?;
        let now = self.shared.clock.now_ms();
        let removed = {
            let mut table = lock(&self.shared.pauses, "pause table")?;
            let removed = table.remove(&request.consumer, request.session_id.as_deref());
            table.prune(now);
            removed
        };
        self.shared.signal.notify();
        Ok(ResumeResult::new(
            removed.is_some_and(|pause| pause.in_force(now)),
        ))
    }

    /// [`Store::pauses`](a2_store_api::Store::pauses).
    pub(crate) fn list_pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>> {
        validate::pauses(session_id)?;
        let now = self.shared.clock.now_ms();
        Ok(lock(&self.shared.pauses, "pause table")?.listed(session_id, now))
    }
}
