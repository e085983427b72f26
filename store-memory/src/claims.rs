//! `claim_available`: handing out heads under leases.
//!
//! A claim walks only the claimable heads (in `(index, consumer, lane)`
//! order, up to `through`, stopping at `limit`), after promoting the busy
//! heads whose expiry has passed. Nothing else of the session is visited.

use std::collections::{BTreeSet, HashSet};
use std::iter::Peekable;
use std::sync::Arc;

use a2_store_api::{ClaimRequest, ClaimResult, ClaimStep, Head, Pause, Result};

use crate::cursor::{CursorKey, CursorState};
use crate::cursor_table::CursorTable;
use crate::head_index::ReadyKey;
use crate::ids::{ConsumerId, CursorId};
use crate::pause::Holds;
use crate::session::{Env, Session};

impl Session {
    /// Claims every claimable served head (up to `limit`) of an already
    /// validated request: [`Dispatch::claim_step`] decides per head whether
    /// it is claimed or, its expired claim reaching `max_failures`,
    /// dead-lettered.
    ///
    /// The heads of a consumer `pauses` (those covering the session) hold
    /// are skipped when the hold is open-ended, and busy until its end
    /// otherwise ([`Dispatch::busy_until_held`]).
    ///
    /// [`Dispatch::claim_step`]: a2_store_api::Dispatch::claim_step
    /// [`Dispatch::busy_until_held`]: a2_store_api::Dispatch::busy_until_held
    pub fn claim(
        &mut self,
        env: Env<'_>,
        request: ClaimRequest,
        pauses: &[Pause],
    ) -> Result<ClaimResult> {
        let consumers = request.consumers.as_deref();
        let now = env.clock.now_ms();
        let expires_at = request.lease_expiry(now)?;
        self.refresh_log_types(consumers);
        self.cursors.promote_expired(now);
        let holds = self.holds(pauses, now);

        let served: Option<BTreeSet<&str>> = consumers.map(|consumers| {
            consumers
                .iter()
                .map(|consumer| consumer.name.as_str())
                .collect()
        });
        let excluded: HashSet<CursorKey> = request.exclude.iter().map(CursorKey::of_ref).collect();
        let through = request.through.unwrap_or(u64::MAX);
        let limit = request.limit.unwrap_or(usize::MAX);

        let mut steps = Vec::new();
        let mut claims = 0;
        let mut early_busy: Option<i64> = None;
        let mut visited = 0;
        for id in candidates(&self.cursors, served.as_ref(), through) {
            visited += 1;
            let Some(cursor) = self.cursors.get(id) else {
                continue;
            };
            if !excluded.is_empty() && excluded.contains(&cursor.key()) {
                continue;
            }
            let hold = holds.of(cursor.consumer_id);
            if hold.hides() {
                continue;
            }
            if let Some(expiry) = cursor.dispatch.busy_until_held(now, hold) {
                early_busy = Some(early_busy.map_or(expiry, |t| t.min(expiry)));
                continue;
            }
            let step = cursor.dispatch.claim_step(request.max_failures);
            steps.push((id, step));
            if step == ClaimStep::Claim {
                claims += 1;
                if claims >= limit {
                    break;
                }
            }
        }

        self.last_claim_visits = visited;
        if steps.is_empty() {
            let busy = self.earliest_busy(served.as_ref(), &excluded, through, &holds, now);
            let retry_at = match (busy, early_busy) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return Ok(match retry_at {
                Some(retry_at) => ClaimResult::Busy { retry_at },
                None => ClaimResult::Settled,
            });
        }

        // Every head's row must exist before anything changes.
        for (id, _) in &steps {
            let index = self.cursors.get(*id).and_then(|cursor| cursor.head);
            if index.is_none_or(|index| self.log.row(index).is_none()) {
                return Err(self.corrupt(index.unwrap_or(0)));
            }
        }

        // The steps `claim_step` chose, applied by the two transitions
        // `Dispatch::take` is made of. The last claim takes the holder, the
        // others a copy.
        let mut holder = request.holder;
        let mut heads = Vec::with_capacity(claims);
        let mut dead_lettered = Vec::new();
        for (id, step) in steps {
            match step {
                ClaimStep::Claim => {
                    let holder = if heads.len() + 1 >= claims {
                        std::mem::take(&mut holder)
                    } else {
                        holder.clone()
                    };
                    self.cursors.modify(id, |cursor| {
                        cursor.dispatch.claim(holder, now, expires_at);
                    });
                    heads.push(self.view(id)?);
                }
                ClaimStep::DeadLetter => {
                    let head = self.cursors.modify(id, |cursor| {
                        cursor.dispatch.dead_letter_expired(now);
                        cursor.head
                    });
                    if let Some(Some(index)) = head {
                        self.snapshots.release((id, index));
                    }
                    dead_lettered.push(self.view(id)?);
                }
            }
        }
        Ok(ClaimResult::Claimed {
            heads,
            dead_lettered,
            head: self.log.head(),
        })
    }

    /// The head of live cursor `id` as a claim reports it.
    fn view(&self, id: CursorId) -> Result<Head> {
        let cursor = self
            .cursors
            .get(id)
            .ok_or_else(|| self.inconsistent("an indexed cursor is missing"))?;
        self.head_view(cursor)
    }

    /// The earliest expiry among busy heads that are served, at or below
    /// `through`, not excluded and not hidden by a pause (a timed pause
    /// keeps its consumer's heads busy until its end at least). Walks busy
    /// heads in expiry order and stops at the first match (per consumer when
    /// a pause holds one).
    fn earliest_busy(
        &self,
        served: Option<&BTreeSet<&str>>,
        excluded: &HashSet<CursorKey>,
        through: u64,
        holds: &Holds,
        now: i64,
    ) -> Option<i64> {
        let heads = self.cursors.heads();
        let matches = |id: &CursorId| {
            self.cursors.get(*id).is_some_and(|cursor: &CursorState| {
                cursor.head.is_some_and(|head| head <= through)
                    && (excluded.is_empty() || !excluded.contains(&cursor.key()))
            })
        };
        if served.is_none() && holds.is_empty() {
            return heads
                .busy
                .iter()
                .find(|(_, id)| matches(id))
                .map(|(expiry, _)| *expiry);
        }
        let slots: Vec<ConsumerId> = match served {
            Some(served) => served
                .iter()
                .filter_map(|name| self.cursors.consumer_id(name))
                .collect(),
            None => self
                .cursors
                .consumer_names()
                .filter_map(|name| self.cursors.consumer_id(name))
                .collect(),
        };
        slots
            .into_iter()
            .filter(|slot| !holds.of(*slot).hides())
            .filter_map(|slot| {
                let view = heads.consumer(slot)?;
                let (_, id) = view.busy.iter().find(|(_, id)| matches(id))?;
                let cursor = self.cursors.get(*id)?;
                cursor.dispatch.busy_until_held(now, holds.of(slot))
            })
            .min()
    }
}

/// The claimable heads at or below `through` of the served consumers
/// (`None`: all), in claim order `(index, consumer, lane)`.
fn candidates<'a>(
    cursors: &'a CursorTable,
    served: Option<&BTreeSet<&str>>,
    through: u64,
) -> Candidates<'a> {
    let heads = cursors.heads();
    let source = match served {
        None => Source::All(heads.ready.iter()),
        Some(served) => Source::Served(Merge {
            sources: served
                .iter()
                .filter_map(|name| heads.consumer(cursors.consumer_id(name)?))
                .map(|slot| slot.ready.iter().peekable())
                .collect(),
        }),
    };
    Candidates {
        cursors,
        source: source.peekable(),
        group: Vec::new(),
        through,
    }
}

/// The claim candidates: ready heads read in index order, each run of heads
/// sharing an index put in `(consumer, lane)` order; stops after `through`.
struct Candidates<'a> {
    cursors: &'a CursorTable,
    source: Peekable<Source<'a>>,
    /// The rest of the current index's heads, in reverse claim order.
    group: Vec<CursorId>,
    through: u64,
}

impl Candidates<'_> {
    /// The `(consumer, lane)` a head's ties are ordered by.
    fn names(&self, id: CursorId) -> (Option<&Arc<str>>, Option<&Arc<str>>) {
        match self.cursors.get(id) {
            Some(cursor) => (Some(&cursor.consumer), cursor.lane.as_ref()),
            None => (None, None),
        }
    }
}

impl Iterator for Candidates<'_> {
    type Item = CursorId;

    fn next(&mut self) -> Option<CursorId> {
        if let Some(id) = self.group.pop() {
            return Some(id);
        }
        let (index, id) = self.source.next()?;
        if index > self.through {
            return None;
        }
        if self.source.peek().is_none_or(|(next, _)| *next != index) {
            return Some(id);
        }
        // Several heads at one index (fan-out): order them by name. Rare and
        // as long as the event's targets, so a sort per run is cheap.
        let mut group = std::mem::take(&mut self.group);
        group.push(id);
        while let Some((_, id)) = self.source.next_if(|(next, _)| *next == index) {
            group.push(id);
        }
        group.sort_by(|a, b| self.names(*b).cmp(&self.names(*a)));
        self.group = group;
        self.group.pop()
    }
}

/// Ready heads in index order (ties in any order).
enum Source<'a> {
    /// Every consumer is served: the session's ready heads.
    All(std::collections::btree_set::Iter<'a, ReadyKey>),
    /// Only some consumers are served: a merge of their ready heads.
    Served(Merge<'a>),
}

impl Iterator for Source<'_> {
    type Item = ReadyKey;

    fn next(&mut self) -> Option<ReadyKey> {
        match self {
            Self::All(ready) => ready.next().copied(),
            Self::Served(merge) => merge.next(),
        }
    }
}

/// A merge of several consumers' ready sets into index order. The sources
/// are few (the consumers a call serves), so picking the least is a scan.
struct Merge<'a> {
    sources: Vec<Peekable<std::collections::btree_set::Iter<'a, ReadyKey>>>,
}

impl Iterator for Merge<'_> {
    type Item = ReadyKey;

    fn next(&mut self) -> Option<ReadyKey> {
        let mut best: Option<(usize, ReadyKey)> = None;
        for (position, source) in self.sources.iter_mut().enumerate() {
            let Some(key) = source.peek() else { continue };
            if best.is_none_or(|(_, least)| **key < least) {
                best = Some((position, **key));
            }
        }
        let (position, _) = best?;
        self.sources.get_mut(position)?.next().copied()
    }
}
