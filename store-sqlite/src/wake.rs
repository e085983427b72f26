//! `wake_log`: making sure a declared log consumer's cursor exists and
//! points at its next taken event.

use a2_store_api::codec::{idle_log_cursor, lane_conflict, log_declaration, validate_session_id};
use a2_store_api::{ConsumerDeclaration, CursorKind, StoreError, WakeLogResult};
use rusqlite::Connection;

use crate::cursor::{self, CursorRow};
use crate::events::next_log_head;
use crate::session;

/// Validates a wake before any database work.
pub(crate) fn validate_wake(
    session_id: &str,
    consumer: &ConsumerDeclaration,
) -> Result<(), StoreError> {
    validate_session_id(session_id)?;
    log_declaration(consumer).map(|_| ())
}

/// Creates or wakes the consumer's log cursor; on a session with nothing
/// after its clear, returns an idle cursor without storing one.
pub(crate) fn wake_log(
    tx: &Connection,
    session_id: &str,
    consumer: &ConsumerDeclaration,
) -> Result<WakeLogResult, StoreError> {
    let log = log_declaration(consumer)?;
    let Some(session) = session::find(tx, session_id)? else {
        return Ok(WakeLogResult {
            cursor: idle_log_cursor(consumer, 0),
            head: 0,
        });
    };
    let found = cursor::find(tx, &session, &consumer.name, Some(&log.lane), 0)?;
    let row = match found {
        Some(existing) if existing.kind != CursorKind::Log => {
            return Err(lane_conflict(&consumer.name, &log.lane));
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
