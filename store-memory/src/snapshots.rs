//! `write_state` and `read_state`: the reducer snapshot cache with pins.

use a2_store_api::{dispatch, ReadStateOptions, StateRead, StateWrite};

use crate::cursor_table::Lookup;
use crate::session::Session;
use crate::snapshot_cache::PinKey;

impl Session {
    /// Applies already validated `writes` in index order: writes below the
    /// clear are ignored, the last applied one becomes the head snapshot,
    /// and each write is a checkpoint kept while one of its pins (a live,
    /// not dead-lettered head) holds.
    pub fn write_state(&mut self, reducer: &str, mut writes: Vec<StateWrite>) {
        writes.sort_by_key(|write| write.index);
        let clear = self.log.clear_index();
        for write in writes {
            if !write.kept(clear) {
                continue;
            }
            let pins: Vec<PinKey> = write
                .pins
                .iter()
                .filter(|pin| !dispatch::cleared(pin.index, clear))
                .filter_map(|pin| {
                    match self
                        .cursors
                        .lookup(&pin.consumer, pin.lane.as_deref(), pin.index)
                    {
                        Lookup::Live(id, cursor)
                            if cursor.dispatch.holds_pin(cursor.head == Some(pin.index)) =>
                        {
                            Some((id, pin.index))
                        }
                        _ => None,
                    }
                })
                .collect();
            self.snapshots
                .write(reducer, write.index, write.state, &pins);
        }
    }

    /// The best snapshot at or below `at` and at or above the clear.
    pub fn read_state(&self, reducer: &str, options: ReadStateOptions) -> StateRead {
        let clear = self.log.clear_index();
        StateRead::new(self.snapshots.read(reducer, clear, options.at), clear)
    }
}
