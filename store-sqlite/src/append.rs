//! `append`: idempotent replay, fencing, then one atomic insert.

use a2_store_api::{replay, AppendOptions, AppendResult, NewEvent, StoreError};
use rusqlite::Connection;

use crate::batch;
use crate::cursor_rows::{fence, has_pending, refresh_log_types};
use crate::events::owner_of;
use crate::pool::Ctx;
use crate::session;
use crate::work::Wake;

/// What an append did: its result, and whether rows were written (subscribers
/// must be told).
pub(crate) struct Appended {
    /// The call's result.
    pub result: AppendResult,
    /// Whether new rows were committed.
    pub wrote: bool,
    /// Whether some work row moved earlier (waiting claimers are woken).
    pub wake: Wake,
}

/// Appends in the CONTRACT's order: empty batch → replay / partial
/// duplicate → cleared origin → fenced causes → lane conflicts → insert.
pub(crate) fn append(
    tx: &Connection,
    ctx: &Ctx,
    session_id: &str,
    events: &[NewEvent],
    options: &AppendOptions,
) -> Result<Appended, StoreError> {
    let consumers = options.consumers.as_deref();
    let existing_session = session::find(tx, session_id)?;
    if let Some(session) = &existing_session {
        refresh_log_types(tx, session, consumers)?;
    }
    if events.is_empty() {
        return Ok(Appended {
            result: AppendResult::new(
                Vec::new(),
                has_pending(tx, existing_session.as_ref(), consumers, ctx.clock.now_ms())?,
            ),
            wrote: false,
            wake: Wake::default(),
        });
    }
    if let Some(session) = &existing_session {
        let mut stored = Vec::new();
        for event in events {
            if let Some(id) = &event.id {
                if let Some(row) = owner_of(tx, session, id)? {
                    stored.push(row);
                }
            }
        }
        if !stored.is_empty() {
            if stored.len() == events.len() {
                let replayed = replay::append(events, stored)?;
                return Ok(Appended {
                    result: AppendResult::new(
                        replayed,
                        has_pending(tx, Some(session), consumers, ctx.clock.now_ms())?,
                    ),
                    wrote: false,
                    wake: Wake::default(),
                });
            }
            return Err(StoreError::mixed_batch(
                stored.len(),
                events.len() - stored.len(),
            ));
        }
    }
    let clear = existing_session.as_ref().map_or(0, |session| session.clear);
    options.check_origin(session_id, clear)?;
    for event in events {
        if let Some(cause) = &event.cause {
            fence(tx, existing_session.as_ref(), session_id, cause)?;
        }
    }
    let mut session = match existing_session {
        Some(session) => session,
        None => session::find_or_create(tx, session_id)?,
    };
    let mut wake = Wake::default();
    let rows = batch::insert(tx, ctx, &mut session, events, consumers, None, &mut wake)?;
    Ok(Appended {
        result: AppendResult::new(
            rows,
            has_pending(tx, Some(&session), consumers, ctx.clock.now_ms())?,
        ),
        wrote: true,
        wake,
    })
}
