//! [`RecyclingIds`]: the id generator the encryption layer names unnamed
//! events from, shared with the backend below it.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use a2_store_api::{IdGenerator, RandomIds};

/// An [`IdGenerator`] that takes back ids a refused call drew, and hands
/// them out again first.
///
/// The encryption layer binds an event's ciphertext to its id, so it must
/// know the id before the backend stores the event: it draws ids for
/// events appended without one from this generator. When the backend then
/// refuses the call (an error that changed nothing, or a superseded
/// completion), the layer gives the ids back, so a call that was refused
/// draws no ids, as the contract says. Give the backend a clone of the same
/// generator (clones share it), so the ids it makes itself (clear markers)
/// come from the same sequence.
///
/// ```
/// use std::sync::Arc;
/// use a2_store::{CounterIds, IdGenerator, RecyclingIds};
///
/// let ids = RecyclingIds::new(Arc::new(CounterIds::new("e")));
/// let backend_ids = ids.clone(); // give this one to the backend
/// assert_eq!(ids.next_id(), "e1");
/// assert_eq!(backend_ids.next_id(), "e2");
/// ```
#[derive(Clone)]
pub struct RecyclingIds {
    inner: Arc<dyn IdGenerator>,
    returned: Arc<Mutex<VecDeque<String>>>,
}

impl RecyclingIds {
    /// Ids from `inner`, with returned ones handed out first.
    pub fn new(inner: Arc<dyn IdGenerator>) -> Self {
        Self {
            inner,
            returned: Arc::default(),
        }
    }

    /// Gives back ids drawn (in the order drawn) by a call that stored none
    /// of them: the next ones handed out, in that order.
    pub(crate) fn give_back(&self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let mut returned = self.returned.lock().unwrap_or_else(PoisonError::into_inner);
        for id in ids.into_iter().rev() {
            returned.push_front(id);
        }
    }
}

impl Default for RecyclingIds {
    /// Time-ordered random ids ([`RandomIds`]), what backends use by default.
    fn default() -> Self {
        Self::new(Arc::new(RandomIds))
    }
}

impl IdGenerator for RecyclingIds {
    fn next_id(&self) -> String {
        let returned = self
            .returned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        returned.unwrap_or_else(|| self.inner.next_id())
    }
}

impl fmt::Debug for RecyclingIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecyclingIds")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::CounterIds;

    #[test]
    fn returned_ids_come_back_first_in_the_order_drawn() {
        let ids = RecyclingIds::new(Arc::new(CounterIds::new("e")));
        let drawn = vec![ids.next_id(), ids.next_id()];
        ids.give_back(drawn);
        let shared = ids.clone();
        assert_eq!(shared.next_id(), "e1");
        assert_eq!(ids.next_id(), "e2");
        assert_eq!(ids.next_id(), "e3");
    }
}
