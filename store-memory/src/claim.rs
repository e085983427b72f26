//! `claim_available` and `renew_claims`: handing out heads under leases.
//!
//! A claim walks only the claimable heads (in `(index, consumer, lane)`
//! order, up to `through`, stopping at `limit`), after promoting the busy
//! heads whose expiry has passed. Nothing else of the session is visited.

use std::collections::{BTreeSet, HashSet};
use std::iter::Peekable;
use std::sync::Arc;

use a2_store_api::{
    codec, ClaimRequest, ClaimResult, CursorRef, RenewRequest, RenewResult, Result, StoreError,
};

use crate::cursor::{CursorId, CursorKey, CursorState};
use crate::cursor_table::{CursorTable, Lookup};
use crate::head_index::ReadyKey;
use crate::session::{Env, Session};

/// What a claim does to one head.
enum Step {
    Claim(CursorId),
    DeadLetter(CursorId),
}

impl Session {
    /// Claims every claimable served head (up to `limit`), counting expired
    /// claims as failures first and dead-lettering at `max_failures`.
    pub fn claim(&mut self, env: Env<'_>, request: ClaimRequest) -> Result<ClaimResult> {
        codec::validate_name("holder", &request.holder)?;
        let consumers = request.consumers.as_deref();
        codec::validate_consumers(consumers, &[])?;
        let now = env.clock.now_ms();
        let expires_at = codec::lease_expiry(now, request.ttl_ms, request.expires_at_ms)?;
        if request.limit == Some(0) {
            return Err(StoreError::invalid_input(
                "claim limit is 0: pass at least 1, or no limit",
            ));
        }
        self.refresh_log_types(consumers);
        self.cursors.promote_expired(now);

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
            let dispatch = &cursor.dispatch;
            if let Some(expiry) = dispatch.claim_expires_at.filter(|expiry| *expiry > now) {
                // Promoted earlier, but the clock moved back: still busy.
                early_busy = Some(early_busy.map_or(expiry, |t| t.min(expiry)));
                continue;
            }
            let dead = dispatch.claim_holder.is_some()
                && request
                    .max_failures
                    .is_some_and(|max| dispatch.failure_count.saturating_add(1) >= max);
            if dead {
                steps.push(Step::DeadLetter(id));
            } else {
                steps.push(Step::Claim(id));
                claims += 1;
                if claims >= limit {
                    break;
                }
            }
        }

        self.last_claim_visits = visited;
        if steps.is_empty() {
            let busy = self.earliest_busy(served.as_ref(), &excluded, through);
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
        for step in &steps {
            let (Step::Claim(id) | Step::DeadLetter(id)) = step;
            let index = self.cursors.get(*id).and_then(|cursor| cursor.head);
            if index.is_none_or(|index| self.log.row(index).is_none()) {
                return Err(self.corrupt(index.unwrap_or(0)));
            }
        }

        // The last claim takes the holder, the others a copy.
        let mut holder = Some(request.holder);
        let mut heads = Vec::with_capacity(claims);
        let mut dead_lettered = Vec::new();
        for step in steps {
            match step {
                Step::Claim(id) => {
                    let holder = if heads.len() + 1 >= claims {
                        holder.take()
                    } else {
                        holder.clone()
                    };
                    self.cursors.modify(id, |cursor| {
                        let dispatch = &mut cursor.dispatch;
                        if dispatch.claim_holder.is_some() {
                            dispatch.failure_count = dispatch.failure_count.saturating_add(1);
                        }
                        dispatch.attempt_count = dispatch.attempt_count.saturating_add(1);
                        dispatch.first_claimed_at.get_or_insert(now);
                        dispatch.last_claimed_at = Some(now);
                        dispatch.claim_holder = holder;
                        dispatch.claim_expires_at = Some(expires_at);
                    });
                    heads.push(self.view(id)?);
                }
                Step::DeadLetter(id) => {
                    let head = self.cursors.modify(id, |cursor| {
                        let dispatch = &mut cursor.dispatch;
                        dispatch.failure_count = dispatch.failure_count.saturating_add(1);
                        dispatch.attempt_count = dispatch.attempt_count.saturating_add(1);
                        dispatch.claim_holder = None;
                        dispatch.claim_expires_at = None;
                        dispatch.failed_at = Some(now);
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
    fn view(&self, id: CursorId) -> Result<a2_store_api::Head> {
        let cursor = self
            .cursors
            .get(id)
            .ok_or_else(|| self.inconsistent("an indexed cursor is missing"))?;
        self.head_view(cursor)
    }

    /// The earliest expiry among busy heads that are served, at or below
    /// `through` and not excluded. Walks busy heads in expiry order and stops
    /// at the first match.
    fn earliest_busy(
        &self,
        served: Option<&BTreeSet<&str>>,
        excluded: &HashSet<CursorKey>,
        through: u64,
    ) -> Option<i64> {
        let heads = self.cursors.heads();
        let matches = |id: &CursorId| {
            self.cursors.get(*id).is_some_and(|cursor: &CursorState| {
                cursor.head.is_some_and(|head| head <= through)
                    && (excluded.is_empty() || !excluded.contains(&cursor.key()))
            })
        };
        match served {
            None => heads
                .busy
                .iter()
                .find(|(_, id)| matches(id))
                .map(|(expiry, _)| *expiry),
            Some(served) => served
                .iter()
                .filter_map(|name| self.cursors.consumer_id(name))
                .filter_map(|slot| heads.consumer(slot))
                .filter_map(|slot| slot.busy.iter().find(|(_, id)| matches(id)))
                .map(|(expiry, _)| *expiry)
                .min(),
        }
    }

    /// Extends leases still held by `holder`; reports claims that can never
    /// complete. Refs are processed in `(index, consumer, lane)` order.
    pub fn renew(&mut self, env: Env<'_>, request: RenewRequest) -> Result<RenewResult> {
        codec::validate_name("holder", &request.holder)?;
        let now = env.clock.now_ms();
        let expires_at = codec::lease_expiry(now, request.ttl_ms, request.expires_at_ms)?;
        let mut claims = request.claims;
        claims.sort_by(|a, b| codec::compare_refs(&a.cursor, &b.cursor));
        let clear = self.log.clear_index();
        let mut result = RenewResult::default();
        for claim in claims {
            let target: CursorRef = claim.cursor;
            if target.index <= clear {
                result.superseded.push(target);
                continue;
            }
            let id =
                match self
                    .cursors
                    .lookup(&target.consumer, target.lane.as_deref(), target.index)
                {
                    Lookup::Missing => continue,
                    Lookup::Finished(_) => {
                        result.superseded.push(target);
                        continue;
                    }
                    Lookup::Live(id, cursor) => {
                        let on_head = cursor.head == Some(target.index);
                        if !on_head && cursor.position < target.index {
                            continue;
                        }
                        if !on_head || cursor.dispatch.attempt_count > claim.attempt {
                            result.superseded.push(target);
                            continue;
                        }
                        let dispatch = &cursor.dispatch;
                        let held = dispatch.failed_at.is_none()
                            && dispatch.claim_holder.as_deref() == Some(request.holder.as_str())
                            && dispatch.claim_expires_at.is_some_and(|expiry| expiry > now);
                        if !held {
                            continue;
                        }
                        id
                    }
                };
            self.cursors.modify(id, |cursor| {
                cursor.dispatch.claim_expires_at = Some(expires_at);
            });
            result.renewed.push(target);
        }
        Ok(result)
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
