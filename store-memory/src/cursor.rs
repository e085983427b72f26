//! One cursor's state: kind, position, head, its queue (lane cursors), its
//! types (log cursors), the head's dispatch bookkeeping and completion records.

use std::collections::VecDeque;
use std::sync::Arc;

use a2_store_api::{Cursor, CursorKind, CursorRef, Dispatch};

use crate::ids::ConsumerId;

/// How callers name a cursor: an event cursor by `(consumer, index)`, a lane
/// or log cursor by `(consumer, lane)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CursorKey {
    /// A per-event cursor.
    Event {
        /// Its consumer.
        consumer: String,
        /// The one index it processes.
        index: u64,
    },
    /// A lane or log cursor.
    Lane {
        /// Its consumer.
        consumer: String,
        /// Its lane.
        lane: String,
    },
}

impl CursorKey {
    /// The key a ref `(consumer, lane, index)` names.
    pub fn of(consumer: &str, lane: Option<&str>, index: u64) -> Self {
        match lane {
            None => Self::Event {
                consumer: consumer.to_owned(),
                index,
            },
            Some(lane) => Self::Lane {
                consumer: consumer.to_owned(),
                lane: lane.to_owned(),
            },
        }
    }

    /// The key of a cursor ref.
    pub fn of_ref(cursor: &CursorRef) -> Self {
        Self::of(&cursor.consumer, cursor.lane.as_deref(), cursor.index)
    }
}

/// What a completion recorded, for replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Completion {
    /// The attempt that completed the head.
    pub attempt: u32,
    /// The ids the caller supplied for the returned events (`None`: generated).
    pub returned_ids: Vec<Option<String>>,
}

/// A cursor's completion records, ordered by index.
///
/// A cursor finishes its heads in increasing index order, so recording one
/// is an append (amortised O(1), no hashing or rehashing); a lookup is a
/// binary search, O(log n). Records out of order are still placed in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Completions {
    records: Vec<(u64, Completion)>,
}

impl Completions {
    /// The record of `index`, if any.
    pub fn get(&self, index: u64) -> Option<&Completion> {
        self.records
            .binary_search_by_key(&index, |(at, _)| *at)
            .ok()
            .and_then(|position| self.records.get(position))
            .map(|(_, record)| record)
    }

    /// Records `completion` for `index`, replacing an earlier record of it.
    pub fn insert(&mut self, index: u64, completion: Completion) {
        if self.records.last().is_none_or(|(last, _)| *last < index) {
            self.records.push((index, completion));
            return;
        }
        match self.records.binary_search_by_key(&index, |(at, _)| *at) {
            Ok(position) => {
                if let Some(slot) = self.records.get_mut(position) {
                    slot.1 = completion;
                }
            }
            Err(position) => self.records.insert(position, (index, completion)),
        }
    }

    /// Forgets every record.
    pub fn clear(&mut self) {
        self.records.clear();
    }
}

/// Where a cursor's head sits in the session's head indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// No head.
    Idle,
    /// Claimable now (never claimed, released without delay, or its expiry passed).
    Ready,
    /// Claimed or waiting out a retry delay until this instant (ms).
    Busy(i64),
    /// Dead-lettered.
    Dead,
}

/// An index queued on a lane behind its head, with its not-before time
/// (`None`: claimable as soon as the lane reaches it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Queued {
    /// The queued index.
    pub index: u64,
    /// The time it is not claimable before ([`Dispatch::scheduled`]).
    pub not_before: Option<i64>,
}

/// The full state of one cursor.
#[derive(Debug, Clone)]
pub(crate) struct CursorState {
    /// Its consumer.
    pub consumer: Arc<str>,
    /// Its consumer's slot in the session; assigned by the cursor table.
    pub consumer_id: ConsumerId,
    /// Its lane, `None` for an event cursor.
    pub lane: Option<Arc<str>>,
    /// Event, lane or log.
    pub kind: CursorKind,
    /// Last index it finished (or started after).
    pub position: u64,
    /// The index it must process next.
    pub head: Option<u64>,
    /// Lane cursors: the queued indexes after the head, in log order, each
    /// with the not-before time it takes when the lane reaches it.
    pub queue: VecDeque<Queued>,
    /// Log cursors: the types taken (`None`: all).
    pub types: Option<Vec<String>>,
    /// Bookkeeping of the head.
    pub dispatch: Dispatch,
    /// Completion records by index (a log cursor keeps only its latest).
    pub completions: Completions,
    /// Where the head sits in the head indexes; kept by the cursor table.
    pub placement: Placement,
}

impl CursorState {
    /// A fresh cursor with no head and no bookkeeping.
    pub fn new(consumer: &str, lane: Option<&str>, kind: CursorKind, position: u64) -> Self {
        Self {
            consumer: Arc::from(consumer),
            consumer_id: 0,
            lane: lane.map(Arc::from),
            kind,
            position,
            head: None,
            queue: VecDeque::new(),
            types: None,
            dispatch: Dispatch::default(),
            completions: Completions::default(),
            placement: Placement::Idle,
        }
    }

    /// The key this cursor is found by.
    pub fn key(&self) -> CursorKey {
        CursorKey::of(
            &self.consumer,
            self.lane.as_deref(),
            self.head.unwrap_or(self.position),
        )
    }

    /// Where the head belongs in the head indexes, from its state alone.
    pub fn natural_placement(&self) -> Placement {
        match (self.head, &self.dispatch) {
            (None, _) => Placement::Idle,
            (Some(_), dispatch) if dispatch.is_dead_lettered() => Placement::Dead,
            (Some(_), dispatch) => match dispatch.claim_expires_at {
                Some(expiry) => Placement::Busy(expiry),
                None => Placement::Ready,
            },
        }
    }

    /// Queues a targeted index on a lane cursor, not claimable before
    /// `not_before`; the first becomes the head (busy until that time). The
    /// same index twice in a row (a duplicate target) is queued once.
    pub fn enqueue(&mut self, index: u64, not_before: Option<i64>) {
        match self.head {
            None => {
                self.head = Some(index);
                self.dispatch = Dispatch::scheduled(not_before);
            }
            Some(head) => {
                let last = self.queue.back().map(|queued| queued.index);
                if head != index && last != Some(index) {
                    self.queue.push_back(Queued { index, not_before });
                }
            }
        }
    }

    /// Where `index` sits in the lane's queue (the queue is in log order).
    pub fn queued(&self, index: u64) -> Option<usize> {
        self.queue
            .binary_search_by_key(&index, |queued| queued.index)
            .ok()
    }

    /// The public view of this cursor.
    pub fn to_cursor(&self) -> Cursor {
        Cursor::new(
            String::from(&*self.consumer),
            self.lane.as_deref().map(str::to_owned),
            self.kind,
            self.position,
        )
        .with_head(self.head)
        .with_types(if self.kind == CursorKind::Log {
            self.types.clone()
        } else {
            None
        })
        .with_dispatch(self.dispatch.clone())
    }
}
