//! `append` and `wake_log`: writing batches and starting log cursors.

use a2_store_api::{
    log, replay, AppendOptions, AppendResult, ConsumerDeclaration, CursorKind, Dispatch,
    LogDeclaration, NewEvent, Result, StoreError, WakeLogResult,
};

use crate::cursor::CursorState;
use crate::session::{Env, Session};

impl Session {
    /// Appends an already validated batch atomically, or replays it when
    /// every id is stored. Precedence: empty batch, replay / partial
    /// duplicate, `origin_index` at or below the clear, fencing, lane
    /// conflicts, insert.
    pub fn append(
        &mut self,
        env: Env<'_>,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult> {
        let consumers = options.consumers.as_deref();
        if events.is_empty() {
            self.refresh_log_types(consumers);
            return Ok(AppendResult {
                events: Vec::new(),
                has_pending: self.has_pending(consumers),
            });
        }
        let owners = self.owners(&events);
        if !owners.is_empty() {
            if owners.len() != events.len() {
                return Err(StoreError::mixed_batch(
                    owners.len(),
                    events.len() - owners.len(),
                ));
            }
            let stored = replay::append(&events, self.rows(&owners)?)?;
            self.refresh_log_types(consumers);
            return Ok(AppendResult {
                events: stored,
                has_pending: self.has_pending(consumers),
            });
        }
        if let Some(origin) = options.origin_index {
            if origin <= self.log.clear_index() {
                return Err(StoreError::session_cleared(&self.id, origin));
            }
        }
        for cause in events.iter().filter_map(|event| event.cause.as_ref()) {
            self.fence(cause)?;
        }
        self.check_lane_conflicts(&events, consumers)?;
        let stored = self.insert_batch(env, &events, None, consumers)?;
        Ok(AppendResult {
            events: stored,
            has_pending: self.has_pending(consumers),
        })
    }

    /// Makes sure the declared log consumer's cursor (`log`: its validated
    /// declaration) exists and points at its next taken event; refreshes
    /// its types. On a session with nothing after its clear, returns an
    /// idle cursor without creating one.
    pub fn wake_log(
        &mut self,
        consumer: &ConsumerDeclaration,
        log: &LogDeclaration,
    ) -> Result<WakeLogResult> {
        let head = self.log.head();
        let types = log.types.clone();
        let id = match self.cursors.find(&consumer.name, Some(&log.lane), 0) {
            Some((_, cursor)) if cursor.kind != CursorKind::Log => {
                return Err(StoreError::lane_conflict(&consumer.name, &log.lane));
            }
            Some((id, cursor)) => {
                let next = match cursor.head {
                    Some(current) => Some(current),
                    None => self.log.next_taken(cursor.position, types.as_deref()),
                };
                let woken = cursor.head.is_none() && next.is_some();
                self.cursors.modify(id, |cursor| {
                    cursor.types = types;
                    if woken {
                        cursor.head = next;
                        cursor.dispatch = Dispatch::default();
                    }
                });
                id
            }
            None => {
                let marker = self.log.clear_index();
                if head == marker {
                    return Ok(WakeLogResult {
                        cursor: log::idle_log_cursor(consumer, marker),
                        head,
                    });
                }
                let position = if log.backfill { marker } else { head };
                let mut cursor =
                    CursorState::new(&consumer.name, Some(&log.lane), CursorKind::Log, position);
                if log.backfill {
                    cursor.head = self.log.next_taken(position, types.as_deref());
                }
                cursor.types = types;
                self.cursors.insert(cursor)
            }
        };
        let cursor = self
            .cursors
            .get(id)
            .map(CursorState::to_cursor)
            .ok_or_else(|| self.inconsistent("an indexed cursor is missing"))?;
        Ok(WakeLogResult { cursor, head })
    }
}
