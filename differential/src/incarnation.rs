//! Incarnations as each store numbers them, mapped to the order in which
//! they first appear, so stores that number sessions differently compare
//! equal.
//!
//! Every store hands out its own incarnation numbers (see
//! `a2_store_api::retention`): the memory reference and a SQLite file need
//! not agree on them, only on which results name the same incarnation.
//! Each store of a case gets an [`Incarnations`]: results and captured
//! states have their incarnations replaced by ordinals (1 for the first one
//! seen, 2 for the next, ...; 0, "not said", stays 0), and requests, which
//! the model builds from those ordinals, get the store's own number back.

use std::collections::BTreeMap;

use a2_store_api::{ClaimResult, ClaimWorkResult, DeleteSessionResult, Head, SessionInfo};

use crate::call::{Call, Outcome};
use crate::snapshot::StoreState;

/// One store's incarnations, in order of appearance.
#[derive(Debug, Clone, Default)]
pub struct Incarnations {
    /// The store's number to its ordinal.
    ordinals: BTreeMap<u64, u64>,
    /// Ordinal to the store's number.
    numbers: BTreeMap<u64, u64>,
}

impl Incarnations {
    /// The ordinal of the store's incarnation `number` (a new one when
    /// first seen); 0 stays 0.
    fn ordinal(&mut self, number: u64) -> u64 {
        if number == 0 {
            return 0;
        }
        let next = self.ordinals.len() as u64 + 1;
        let ordinal = *self.ordinals.entry(number).or_insert(next);
        self.numbers.entry(ordinal).or_insert(number);
        ordinal
    }

    /// The store's number of `ordinal`; one this store never handed out
    /// (a number no session has) when the ordinal was never seen here.
    fn number(&self, ordinal: u64) -> u64 {
        self.numbers
            .get(&ordinal)
            .copied()
            .unwrap_or(u64::MAX - ordinal)
    }

    fn number_of(&self, ordinal: Option<u64>) -> Option<u64> {
        ordinal.map(|ordinal| self.number(ordinal))
    }

    fn head(&mut self, head: &mut Head) {
        head.incarnation = self.ordinal(head.incarnation);
    }

    fn heads(&mut self, heads: &mut [Head]) {
        for head in heads {
            self.head(head);
        }
    }

    fn info(&mut self, info: &mut SessionInfo) {
        info.incarnation = self.ordinal(info.incarnation);
    }

    /// `call` as this store must receive it: the ordinals its requests
    /// name replaced by this store's numbers.
    pub fn request(&self, call: &Call) -> Call {
        let mut call = call.clone();
        match &mut call {
            Call::Renew(r) => r.incarnation = self.number_of(r.incarnation),
            Call::Complete(r) => r.incarnation = self.number_of(r.incarnation),
            Call::Fail(r) => r.incarnation = self.number_of(r.incarnation),
            Call::Redrive(r) => r.incarnation = self.number_of(r.incarnation),
            Call::Clear(r) => r.incarnation = self.number_of(r.incarnation),
            Call::Reschedule(r) => r.incarnation = self.number_of(r.incarnation),
            _ => {}
        }
        call
    }

    /// Replaces every incarnation `outcome` names by its ordinal.
    pub fn outcome(&mut self, outcome: &mut Outcome) {
        match outcome {
            Outcome::Claim(ClaimResult::Claimed {
                heads,
                dead_lettered,
                ..
            }) => {
                self.heads(heads);
                self.heads(dead_lettered);
            }
            Outcome::ClaimWork(ClaimWorkResult::Claimed { sessions }) => {
                for claim in sessions {
                    self.heads(&mut claim.heads);
                    self.heads(&mut claim.dead_lettered);
                }
            }
            Outcome::Fork(result) => self.info(&mut result.session),
            Outcome::DeleteSession(DeleteSessionResult::Deleted { removed }) => {
                removed.incarnation = self.ordinal(removed.incarnation);
            }
            _ => {}
        }
    }

    /// Replaces every incarnation `state` shows by its ordinal, sessions in
    /// order, then the listing.
    pub fn state(&mut self, state: &mut StoreState) {
        for session in &mut state.sessions {
            if let Some(info) = session.info.as_mut() {
                self.info(info);
            }
            if let Ok(letters) = session.dead_letters.as_mut() {
                self.heads(letters);
            }
        }
        if let Ok(listing) = state.listing.as_mut() {
            for info in listing {
                self.info(info);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_become_ordinals_and_back() {
        let mut seen = Incarnations::default();
        assert_eq!(seen.ordinal(40), 1);
        assert_eq!(seen.ordinal(0), 0);
        assert_eq!(seen.ordinal(7), 2);
        assert_eq!(seen.ordinal(40), 1);
        assert_eq!((seen.number(1), seen.number(2)), (40, 7));
        assert_ne!(seen.number(3), 40);
    }
}
