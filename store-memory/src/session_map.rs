//! The store's sessions by id: a hash map for the lookup every call makes,
//! and the ids in order for `sessions()` listings.
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

/// Every session ever created (sessions are never removed).
///
/// Guarantees: `by_id` and `order` hold the same ids; `by_id`'s key and
/// `order`'s entry of a session are one allocation.
#[derive(Debug, Default)]
pub(crate) struct SessionMap {
    /// Sessions by id (the lookups).
    by_id: HashMap<Arc<str>, SessionCell>,
    /// Session ids in order (the listings).
    order: BTreeSet<Arc<str>>,
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
        let session = Arc::new(Mutex::new(Session::new(id)));
        self.order.insert(key.clone());
        self.by_id.insert(key, session.clone());
        session
    }

    /// Every session, in no particular order.
    #[cfg(test)]
    pub fn values(&self) -> impl Iterator<Item = &SessionCell> {
        self.by_id.values()
    }

    /// The sessions whose id sorts after `after` (`None`: every session),
    /// in id order.
    pub fn after<'a>(&'a self, after: Option<&'a str>) -> impl Iterator<Item = &'a SessionCell> {
        let lower: Bound<&str> = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.order
            .range::<str, _>((lower, Bound::Unbounded))
            .filter_map(|id| self.by_id.get(id))
    }
}
