//! `wake_log`: making sure a declared log consumer's cursor exists and
//! points at its next taken event.

use a2_store_api::log::idle_log_cursor;
use a2_store_api::{ConsumerDeclaration, CursorKind, LogDeclaration, StoreError, WakeLogResult};
use rusqlite::Connection;

use crate::cursor::{self, CursorRow};
use crate::events::next_log_head;
use crate::session;

/// Creates or wakes the consumer's log cursor (`log`: its declaration's log
/// part); on a session with nothing after its clear, returns an idle cursor
/// without storing one.
pub(crate) fn wake_log(
    tx: &Connection,
    session_id: &str,
    consumer: &ConsumerDeclaration,
    log: &LogDeclaration,
) -> Result<WakeLogResult, StoreError> {
    let Some(session) = session::find(tx, session_id)? else {
        return Ok(WakeLogResult {
            cursor: idle_log_cursor(consumer, 0),
            head: 0,
        });
    };
    let found = cursor::find(tx, &session, &consumer.name, Some(&log.lane), 0)?;
    let row = match found {
        Some(existing) if existing.kind != CursorKind::Log => {
            return Err(StoreError::lane_conflict(&consumer.name, &log.lane));
        }
        Some(mut existing) => {
            existing.types = log.types.clone();
            if existing.head.is_none() {
                existing.head =
                    next_log_head(tx, &session, existing.position, log.types.as_deref())?;
            }
            cursor::save(tx, &existing)?;
            existing
        }
        None => {
            if session.head == session.clear {
                return Ok(WakeLogResult {
                    cursor: idle_log_cursor(consumer, session.clear),
                    head: session.head,
                });
            }
            let position = if log.backfill {
                session.clear
            } else {
                session.head
            };
            let head = if log.backfill {
                next_log_head(tx, &session, position, log.types.as_deref())?
            } else {
                None
            };
            cursor::create(
                tx,
                &session,
                CursorRow::new_log(&consumer.name, log, position, head),
            )?
        }
    };
    Ok(WakeLogResult {
        cursor: row.to_cursor(),
        head: session.head,
    })
}
