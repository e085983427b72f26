//! `claim_work` and `list_work`: the store-wide work index (one row per
//! `(session, consumer)` with unfinished heads, see [`a2_store_api::work`]),
//! kept in step under the session's lock after every operation that moves
//! a cursor, and the [`WorkSource`] the shared claim-and-wait loop runs on.
//!
//! Lock order: a session's lock, then the index's, then the pause table's.
//! The index lock is never held while a session lock is taken. Pauses do
//! not change the rows: claims read them beside the rows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    ClaimRequest, ClaimResult, ClaimWorkRequest, Clock, Hold, ListWork, Result, SessionWork,
    WorkRow, WorkSignal, WorkSource, WorkSummary,
};
use async_trait::async_trait;

use crate::pause::PauseTable;
use crate::session::Session;
use crate::store::{lock, MemoryStore};

/// Which rows an operation rewrites and how (see [`a2_store_api::work`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Touch<'a> {
    /// Any change but a claim: every consumer's row of the session, kept
    /// waiting as long as it already was ([`WorkSummary::touched_row`]).
    All,
    /// A claim serving these consumers (`None`: every consumer):
    /// [`WorkSummary::served_row`] for them, nothing else.
    Served(Option<&'a [String]>),
}

/// A session id as the fairness order compares it: by its first
/// [`SessionKey::INLINE`] bytes kept in the key, then, only when those are
/// equal, by the whole id. Rows ready at the same time are ordered by
/// session id, so a walk of the ready set compares ids at every step; kept
/// inline, most comparisons read no id from the heap (with thousands of
/// sessions, each such read is a cache miss).
///
/// The order is exactly `str`'s: the inline bytes are the id's, padded
/// with zeros, and zero is the smallest byte, so two ids whose inline bytes
/// differ first differ at that byte, or there one of them ends.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionKey {
    inline: [u8; SessionKey::INLINE],
    id: Arc<str>,
}

impl SessionKey {
    /// The bytes of an id kept in the key.
    const INLINE: usize = 16;

    fn new(id: &Arc<str>) -> Self {
        let mut inline = [0u8; Self::INLINE];
        let bytes = id.as_bytes();
        let kept = bytes.len().min(Self::INLINE);
        inline[..kept].copy_from_slice(&bytes[..kept]);
        Self {
            inline,
            id: id.clone(),
        }
    }

    /// The smallest key: sorts before every id.
    fn smallest() -> Self {
        Self {
            inline: [0; Self::INLINE],
            id: Arc::from(""),
        }
    }
}

impl Ord for SessionKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.inline
            .cmp(&other.inline)
            .then_with(|| self.id.cmp(&other.id))
    }
}

impl PartialOrd for SessionKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The rows of every session, with the orders claims and listings read.
#[derive(Debug, Default)]
pub(crate) struct WorkIndex {
    /// Session → consumer → row.
    rows: HashMap<Arc<str>, BTreeMap<Arc<str>, WorkRow>>,
    /// Consumer → its `Ready` rows in fairness order `(ready_at, session)`.
    ready: HashMap<Arc<str>, BTreeSet<(i64, SessionKey)>>,
    /// Consumer → sessions with a row, by id (listings).
    listed: HashMap<Arc<str>, BTreeSet<Arc<str>>>,
    /// Sessions with a dead-lettered head, by id (bulk redrive reads only
    /// these, so it costs in proportion to dead letters).
    dead: BTreeSet<Arc<str>>,
}

impl WorkIndex {
    fn row(&self, session: &str, consumer: &str) -> Option<WorkRow> {
        self.rows.get(session)?.get(consumer).copied()
    }

    /// Stores `row` for `(session, consumer)` (`None` deletes it); returns
    /// whether work became claimable sooner than it was. A pair that keeps
    /// a row is found once and changed in place; only a new or deleted row
    /// touches the listing.
    fn set(&mut self, session: &Arc<str>, consumer: &Arc<str>, row: Option<WorkRow>) -> bool {
        let Self {
            rows,
            ready,
            listed,
            ..
        } = self;
        let pairs = rows.get_mut(&**session);
        let stored = pairs.and_then(|pairs| pairs.get_mut(&**consumer));
        let old = stored.as_deref().copied();
        if old == row {
            return false;
        }
        let key = SessionKey::new(session);
        if let Some(WorkRow::Ready(at)) = old {
            if let Some(ready) = ready.get_mut(&**consumer) {
                ready.remove(&(at, key.clone()));
            }
        }
        match (row, stored) {
            (Some(row), Some(stored)) => {
                // The pair had a row, so it is listed already: only the row
                // changes (a claim's rewrite walks no ordered set of ids).
                *stored = row;
            }
            (Some(row), None) => {
                rows.entry(session.clone())
                    .or_default()
                    .insert(consumer.clone(), row);
                listed
                    .entry(consumer.clone())
                    .or_default()
                    .insert(session.clone());
            }
            (None, _) => {
                if let Some(pairs) = rows.get_mut(&**session) {
                    pairs.remove(&**consumer);
                    if pairs.is_empty() {
                        rows.remove(&**session);
                    }
                }
                if let Some(sessions) = listed.get_mut(&**consumer) {
                    sessions.remove(&**session);
                    if sessions.is_empty() {
                        listed.remove(&**consumer);
                    }
                }
            }
        }
        if let Some(WorkRow::Ready(at)) = row {
            match ready.get_mut(&**consumer) {
                Some(ready) => {
                    ready.insert((at, key));
                }
                None => {
                    ready.insert(consumer.clone(), BTreeSet::from([(at, key)]));
                }
            }
        }
        match (row, old) {
            (Some(WorkRow::Ready(at)), Some(WorkRow::Ready(before))) => at < before,
            (Some(WorkRow::Ready(_)), _) => true,
            _ => false,
        }
    }

    /// Records whether `session` has a dead-lettered head.
    fn set_dead(&mut self, session: &Arc<str>, dead: bool) {
        if dead {
            if !self.dead.contains(session) {
                self.dead.insert(session.clone());
            }
        } else {
            self.dead.remove(session);
        }
    }

    /// The sessions with a dead-lettered head, by id.
    pub fn dead_sessions(&self) -> Vec<String> {
        self.dead
            .iter()
            .map(|session| String::from(&**session))
            .collect()
    }

    /// Up to `limit` sessions with a `Ready` row of `consumers` due by
    /// `now`, by their earliest such row, leaving out `skip` and the pairs
    /// `pauses` hold at `now` (their rows stay as they are).
    fn ready_sessions(
        &self,
        request: &ClaimWorkRequest,
        now: i64,
        skip: &[String],
        limit: usize,
        pauses: &PauseTable,
    ) -> Vec<String> {
        let free = |consumer: &str, session: &str| !pauses.hold(consumer, session, now).is_held();
        let names = request.consumer_names();
        let mut due: Vec<(i64, &str)> = Vec::new();
        if let Some(sessions) = &request.sessions {
            // A session list: look its rows up, at most MAX_WORK_LIMIT sessions.
            for session in sessions {
                let Some(rows) = self.rows.get(session.as_str()) else {
                    continue;
                };
                let earliest = names
                    .iter()
                    .filter(|name| free(name, session))
                    .filter_map(|name| rows.get(name.as_str())?.ready_at())
                    .min();
                if let Some(at) = earliest.filter(|at| *at <= now) {
                    due.push((at, session));
                }
            }
            due.sort();
        } else {
            // Every session: merge the served consumers' fairness orders,
            // reading only the rows due, until enough sessions are found.
            // A consumer paused everywhere is left out whole; a pause of one
            // session leaves out that pair.
            let mut sources: Vec<_> = names
                .iter()
                .filter(|name| !pauses.store_wide_hold(name, now).is_held())
                .filter_map(|name| Some((name.as_str(), self.ready.get(name.as_str())?)))
                .map(|(name, ready)| {
                    let due = ready
                        .range(..(now.saturating_add(1), SessionKey::smallest()))
                        .peekable();
                    (name, due)
                })
                .collect();
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            loop {
                let next = sources
                    .iter_mut()
                    .enumerate()
                    .filter_map(|(position, (_, source))| source.peek().map(|key| (position, *key)))
                    .min_by(|a, b| a.1.cmp(b.1));
                let Some((position, _)) = next else { break };
                let Some((name, source)) = sources.get_mut(position) else {
                    break;
                };
                let Some((at, key)) = source.next() else {
                    break;
                };
                let session = &*key.id;
                if skip.iter().any(|skipped| skipped.as_str() == session) {
                    continue;
                }
                if !free(name, session) {
                    continue;
                }
                if seen.insert(session) {
                    due.push((*at, session));
                    if due.len() >= limit {
                        break;
                    }
                }
            }
        }
        due.into_iter()
            .filter(|(_, session)| !skip.iter().any(|skipped| skipped == session))
            .take(limit)
            .map(|(_, session)| session.to_owned())
            .collect()
    }

    /// The earliest time a `Ready` row served by `request` may be claimed,
    /// with the pauses at `now`: a pair held until resumed is left out, one
    /// held until a time is ready at that time at the earliest.
    fn earliest_ready(
        &self,
        request: &ClaimWorkRequest,
        pauses: &PauseTable,
        now: i64,
    ) -> Option<i64> {
        let names = request.consumer_names();
        let held =
            |at: i64, consumer: &str, session: &str| match pauses.hold(consumer, session, now) {
                Hold::Free => Some(at),
                Hold::Until(until) => Some(at.max(until)),
                Hold::Indefinite => None,
            };
        match &request.sessions {
            Some(sessions) => sessions
                .iter()
                .filter_map(|session| Some((session, self.rows.get(session.as_str())?)))
                .flat_map(|(session, rows)| {
                    names.iter().filter_map(move |name| {
                        Some((session, name, rows.get(name.as_str())?.ready_at()?))
                    })
                })
                .filter_map(|(session, name, at)| held(at, name, session))
                .min(),
            None if pauses.is_empty() => names
                .iter()
                .filter_map(|name| self.ready.get(name.as_str())?.first())
                .map(|(at, _)| *at)
                .min(),
            None => {
                let mut best: Option<i64> = None;
                for name in &names {
                    // Every pair of the consumer is held at least as long as
                    // its store-wide pause: the walk stops once no later row
                    // can beat the best found.
                    let floor = match pauses.store_wide_hold(name, now) {
                        Hold::Free => i64::MIN,
                        Hold::Until(until) => until,
                        Hold::Indefinite => continue,
                    };
                    let Some(ready) = self.ready.get(name.as_str()) else {
                        continue;
                    };
                    for (at, session) in ready {
                        if best.is_some_and(|best| (*at).max(floor) >= best) {
                            break;
                        }
                        if let Some(at) = held(*at, name, &session.id) {
                            best = Some(best.map_or(at, |best| best.min(at)));
                        }
                    }
                }
                best
            }
        }
    }

    /// Up to `limit` session ids after `after` with a row of `consumers`, by id.
    fn listed_after(&self, consumers: &[String], after: Option<&str>, limit: usize) -> Vec<String> {
        let lower: Bound<&str> = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut found: BTreeSet<&str> = BTreeSet::new();
        for consumer in consumers {
            let Some(sessions) = self.listed.get(consumer.as_str()) else {
                continue;
            };
            let range = sessions
                .range::<str, _>((lower, Bound::Unbounded))
                .map(|session| &**session)
                .take(limit);
            found.extend(range);
        }
        found.into_iter().take(limit).map(str::to_owned).collect()
    }
}

impl MemoryStore {
    /// Rewrites the work rows of `session` after an operation, as `touch`
    /// says, and wakes waiting claimers when work became claimable sooner.
    /// Runs under the session's lock.
    pub(crate) fn sync_work(&self, session: &Session, touch: Touch<'_>) -> Result<()> {
        let now = self.shared.clock.now_ms();
        let mut index = lock(&self.shared.work, "work index")?;
        // The index's own copies of the names when it has them: a claim's
        // rewrite allocates nothing.
        let id: Arc<str> = match index.rows.get_key_value(session.id.as_str()) {
            Some((id, _)) => id.clone(),
            None => Arc::from(session.id.as_str()),
        };
        let mut consumers: BTreeSet<Arc<str>> = match touch {
            Touch::Served(Some(served)) => served
                .iter()
                .map(|name| match session.cursors.consumer_name(name) {
                    Some(name) => name.clone(),
                    None => Arc::from(name.as_str()),
                })
                .collect(),
            _ => session.cursors.consumer_names().cloned().collect(),
        };
        if !matches!(touch, Touch::Served(Some(_))) {
            if let Some(rows) = index.rows.get(&id) {
                consumers.extend(rows.keys().cloned());
            }
        }
        let mut sooner = false;
        for consumer in consumers {
            let summary = session.cursors.work_summary(&consumer, now);
            let row = match touch {
                Touch::All => summary.touched_row(index.row(&id, &consumer), now),
                Touch::Served(_) => summary.served_row(now),
            };
            sooner |= index.set(&id, &consumer, row);
        }
        index.set_dead(&id, !session.cursors.heads().dead.is_empty());
        drop(index);
        if sooner {
            self.shared.signal.notify();
        }
        Ok(())
    }

    /// [`Store::list_work`](a2_store_api::Store::list_work) of a validated request.
    pub(crate) fn list(&self, request: &ListWork) -> Result<Vec<SessionWork>> {
        let page = request.page_size();
        let now = self.shared.clock.now_ms();
        let consumers = request.consumer_names();
        let mut listed = Vec::new();
        let mut after = request.after.clone();
        loop {
            let candidates = lock(&self.shared.work, "work index")?.listed_after(
                &consumers,
                after.as_deref(),
                page,
            );
            let more = candidates.len() >= page;
            for session_id in candidates {
                after = Some(session_id.clone());
                let work = self.with_existing(&session_id, |session, _| {
                    let mut summary = WorkSummary::default();
                    for consumer in &consumers {
                        summary.merge(&session.cursors.work_summary(consumer, now));
                    }
                    let index = lock(&self.shared.work, "work index")?;
                    let ready_at = consumers
                        .iter()
                        .filter_map(|consumer| index.row(&session_id, consumer)?.ready_at())
                        .min();
                    Ok(summary.session_work(&session_id, ready_at))
                })?;
                if work.has_work() {
                    listed.push(work);
                    if listed.len() >= page {
                        return Ok(listed);
                    }
                }
            }
            if !more {
                return Ok(listed);
            }
        }
    }
}

impl MemoryStore {
    /// Brute-force check of the work index against every session's cursors
    /// (tests only): a consumer with a head claimable now has a `Ready` row
    /// due by now; one whose heads are all busy has a `Ready` row due by the
    /// earliest end; one with dead letters only has a row; one without
    /// heads has none; the dead-letter set names exactly the sessions
    /// holding dead letters.
    #[cfg(test)]
    pub(crate) fn check_work_invariants(&self) -> std::result::Result<(), String> {
        let now = self.shared.clock.now_ms();
        let sessions: Vec<_> = lock(&self.shared.sessions, "sessions map")
            .map_err(|err| err.to_string())?
            .values()
            .cloned()
            .collect();
        for session in sessions {
            let session = lock(&session, "session").map_err(|err| err.to_string())?;
            let index = lock(&self.shared.work, "work index").map_err(|err| err.to_string())?;
            let id: Arc<str> = Arc::from(session.id.as_str());
            let mut consumers: BTreeSet<String> = session
                .cursors
                .iter()
                .map(|c| c.consumer.to_string())
                .collect();
            if let Some(rows) = index.rows.get(&id) {
                consumers.extend(rows.keys().map(|name| name.to_string()));
            }
            for consumer in consumers {
                let mut summary = WorkSummary::default();
                for cursor in session.cursors.iter() {
                    if *cursor.consumer == *consumer && cursor.head.is_some() {
                        summary.add(&cursor.dispatch, now);
                    }
                }
                let row = index.row(&id, &consumer);
                let fits = if summary.claimable > 0 {
                    matches!(row, Some(WorkRow::Ready(at)) if at <= now)
                } else if let Some(expiry) = summary.next_expiry {
                    matches!(row, Some(WorkRow::Ready(at)) if at <= expiry)
                } else if summary.dead_lettered > 0 {
                    row.is_some()
                } else {
                    row.is_none()
                };
                if !fits {
                    return Err(format!(
                        "work row of ('{}', '{consumer}') is {row:?} for {summary:?}",
                        session.id
                    ));
                }
            }
            let dead = !session.cursors.heads().dead.is_empty();
            if index.dead.contains(&id) != dead {
                return Err(format!("dead-letter set wrong for '{}'", session.id));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl WorkSource for MemoryStore {
    async fn ready_sessions(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        limit: usize,
    ) -> Result<Vec<String>> {
        let index = lock(&self.shared.work, "work index")?;
        let pauses = lock(&self.shared.pauses, "pause table")?;
        Ok(index.ready_sessions(request, now_ms, skip, limit, &pauses))
    }

    async fn claim_session(&self, request: ClaimRequest) -> Result<ClaimResult> {
        self.claim_in_session(request)
    }

    async fn earliest_ready(&self, request: &ClaimWorkRequest) -> Result<Option<i64>> {
        let now = self.shared.clock.now_ms();
        let index = lock(&self.shared.work, "work index")?;
        let pauses = lock(&self.shared.pauses, "pause table")?;
        Ok(index.earliest_ready(request, &pauses, now))
    }

    fn clock(&self) -> &dyn Clock {
        self.shared.clock.as_ref()
    }

    fn signal(&self) -> &WorkSignal {
        &self.shared.signal
    }

    /// Every change is made in this process and fires the signal.
    fn fallback_poll(&self) -> Option<Duration> {
        None
    }

    /// A ready read is a range of the in-process index: reading spares
    /// would copy ids a claim drops, and a session lost to another claimer
    /// costs one more range.
    fn candidate_slack(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(id: &str) -> SessionKey {
        SessionKey::new(&Arc::from(id))
    }

    /// Ids around the inline length, sharing long prefixes, with zero bytes.
    fn id() -> impl Strategy<Value = String> {
        let byte = prop_oneof![Just('\0'), Just('a'), Just('b'), Just('\u{e9}')];
        (0usize..3, prop::collection::vec(byte, 0..24)).prop_map(|(shared, tail)| {
            let mut id = "session-".repeat(shared);
            id.extend(tail);
            id
        })
    }

    proptest! {
        #[test]
        fn session_keys_order_as_their_ids(a in id(), b in id()) {
            prop_assert_eq!(key(&a).cmp(&key(&b)), a.as_str().cmp(b.as_str()));
            prop_assert_eq!(key(&a) == key(&b), a == b);
        }
    }

    #[test]
    fn the_smallest_key_sorts_first() {
        for id in ["", "\0", "a", "work-000001", &"z".repeat(40)] {
            assert!(SessionKey::smallest() <= key(id), "{id:?}");
        }
    }
}
