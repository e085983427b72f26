//! The store's sessions by id: a hash map for the lookup every call makes,
//! the ids in order for `sessions()` listings, and the ids by last activity
//! for `prune`.
//!
//! Every call on a session starts by finding it here, so the lookup must not
//! grow with the number of sessions: a hash map costs one hash and a probe
//! or two however many sessions there are, where an ordered map of string
//! keys costs a comparison (a cache miss on a big store) per level.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use crate::session::Session;

/// A session shared between the map and the calls running on it.
pub(crate) type SessionCell = Arc<Mutex<Session>>;

/// Every session created and not deleted.
///
/// Guarantees: `by_id` and `order` hold the same ids; `by_id`'s key and
/// `order`'s entry of a session are one allocation; `by_activity` holds
/// exactly the sessions that exist (were written to), each at the last
/// activity its session records; no two sessions ever got the same
/// incarnation.
#[derive(Debug)]
pub(crate) struct SessionMap {
    /// Sessions by id (the lookups).
    by_id: HashMap<Arc<str>, SessionCell>,
    /// Session ids in order (the listings).
    order: BTreeSet<Arc<str>>,
    /// Existing sessions by `(last activity, id)` (prune's candidates).
    by_activity: BTreeSet<(i64, Arc<str>)>,
    /// The incarnation the next created session gets.
    next_incarnation: u64,
}

impl Default for SessionMap {
    fn default() -> Self {
        Self {
            by_id: HashMap::new(),
            order: BTreeSet::new(),
            by_activity: BTreeSet::new(),
            next_incarnation: 1,
        }
    }
}

impl SessionMap {
    /// Session `id`, if it was created.
    pub fn get(&self, id: &str) -> Option<&SessionCell> {
        self.by_id.get(id)
    }

    /// Session `id`, created empty when new.
    pub fn get_or_create(&mut self, id: &str) -> SessionCell {
        if let Some(session) = self.by_id.get(id) {
            return session.clone();
        }
        let key: Arc<str> = Arc::from(id);
        let incarnation = self.next_incarnation;
        self.next_incarnation += 1;
        let session = Arc::new(Mutex::new(Session::new(id).in_incarnation(incarnation)));
        self.order.insert(key.clone());
        self.by_id.insert(key, session.clone());
        session
    }

    /// Up to `limit` sessions whose id sorts after `after` (`None`: from the
    /// first), in id order, with their ids.
    pub fn page_after(&self, after: Option<&str>, limit: usize) -> Vec<(Arc<str>, SessionCell)> {
        let lower: Bound<&str> = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.order
            .range::<str, _>((lower, Bound::Unbounded))
            .filter_map(|id| Some((id.clone(), self.by_id.get(id)?.clone())))
            .take(limit)
            .collect()
    }

    /// Moves session `id` in the activity order from `before` (`None`: it did
    /// not exist) to `after`.
    pub fn touch(&mut self, id: &str, before: Option<i64>, after: i64) {
        let key = match self.by_id.get_key_value(id) {
            Some((key, _)) => key.clone(),
            None => return,
        };
        if let Some(before) = before {
            self.by_activity.remove(&(before, key.clone()));
        }
        self.by_activity.insert((after, key));
    }

    /// Forgets session `id` (deleted), which was last active at `activity`.
    pub fn remove(&mut self, id: &str, activity: Option<i64>) {
        if let Some(activity) = activity {
            self.by_activity.remove(&(activity, Arc::from(id)));
        }
        self.order.remove(id);
        self.by_id.remove(id);
    }

    /// Up to `limit` existing sessions last active before `cutoff`, after
    /// `(from_activity, from_id)` when given, in `(activity, id)` order.
    pub fn idle(
        &self,
        from: Option<(i64, &str)>,
        cutoff: i64,
        limit: usize,
    ) -> Vec<(i64, Arc<str>, SessionCell)> {
        let lower = match from {
            Some((activity, id)) => Bound::Excluded((activity, Arc::from(id))),
            None => Bound::Unbounded,
        };
        self.by_activity
            .range((lower, Bound::Unbounded))
            .take_while(|(activity, _)| *activity < cutoff)
            .filter_map(|(activity, id)| {
                let cell = self.by_id.get(id)?;
                Some((*activity, id.clone(), cell.clone()))
            })
            .take(limit)
            .collect()
    }

    /// Every session, in no particular order.
    #[cfg(test)]
    pub fn values(&self) -> impl Iterator<Item = &SessionCell> {
        self.by_id.values()
    }
}
