//! `cursors` and `wake_log`: listing a session's cursors, and starting or
//! waking a declared log consumer's cursor.

use a2_store_api::{
    log, order, pause, ConsumerDeclaration, Cursor, CursorKind, LogDeclaration, Pause, Result,
    StoreError, WakeLogResult,
};

use crate::cursor::CursorState;
use crate::session::Session;

impl Session {
    /// Every live cursor, in [`order::compare_cursors`] order, each with the
    /// pause in force for its consumer at `now` ([`pause::in_force_for`];
    /// `pauses`: those covering the session).
    pub fn list_cursors(&self, pauses: &[Pause], now: i64) -> Vec<Cursor> {
        let mut cursors: Vec<Cursor> = self
            .cursors
            .iter()
            .map(|cursor| {
                let mut listed = cursor.to_cursor();
                if !pauses.is_empty() {
                    listed.pause = pause::in_force_for(pauses, &listed.consumer, &self.id, now);
                }
                listed
            })
            .collect();
        cursors.sort_by(order::compare_cursors);
        cursors
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
            Some((id, _)) => {
                self.update_log_cursor(id, types, true);
                id
            }
            None => {
                let marker = self.log.clear_index();
                if head == marker {
                    return Ok(WakeLogResult::new(
                        log::idle_log_cursor(consumer, marker),
                        head,
                    ));
                }
                let position = log.start_position(marker, head);
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
        Ok(WakeLogResult::new(cursor, head))
    }
}
