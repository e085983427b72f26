//! `write_state` and `read_state`: the reducer snapshot cache with pins.

use a2_store_api::{codec, ReadStateOptions, Result, StateRead, StateWrite};

use crate::cursor_table::Lookup;
use crate::session::Session;
use crate::snapshots::PinKey;

impl Session {
    /// Applies `writes` in index order: writes below the clear are ignored,
    /// the last applied one becomes the head snapshot, and each write is a
    /// checkpoint kept while one of its pins (a held, live head) holds.
    pub fn write_state(&mut self, reducer: &str, mut writes: Vec<StateWrite>) -> Result<()> {
        codec::validate_name("reducer name", reducer)?;
        codec::validate_state_writes(&writes)?;
        writes.sort_by_key(|write| write.index);
        let clear = self.log.clear_index();
        for write in writes {
            if write.index < clear {
                continue;
            }
            let pins: Vec<PinKey> = write
                .pins
                .iter()
                .filter(|pin| pin.index > clear)
                .filter_map(|pin| {
                    match self
                        .cursors
                        .lookup(&pin.consumer, pin.lane.as_deref(), pin.index)
                    {
                        Lookup::Live(id, cursor)
                            if cursor.head == Some(pin.index)
                                && cursor.dispatch.failed_at.is_none() =>
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
        Ok(())
    }

    /// The best snapshot at or below `at` and at or above the clear.
    pub fn read_state(&self, reducer: &str, options: ReadStateOptions) -> Result<StateRead> {
        codec::validate_name("reducer name", reducer)?;
        let clear = self.log.clear_index();
        Ok(StateRead {
            snapshot: self.snapshots.read(reducer, clear, options.at),
            clear_index: clear,
        })
    }
}
