//! Inserting a batch of events and starting the cursor work it carries.

use a2_store_api::log::takes;
use a2_store_api::schedule::merged_due_at;
use a2_store_api::{
    Cause, ConsumerDeclaration, CursorKind, Dispatch, NewEvent, StoreError, StoredEvent,
};
use rusqlite::Connection;

use crate::cursor_rows::{self, CursorRow};
use crate::errors::SqlContext;
use crate::events::{next_log_head, RowWriter};
use crate::pool::Ctx;
use crate::session::{self, SessionRow};
use crate::values::SqlIndex;
use crate::work::{self, Wake};

/// Appends `events` at the session's head with one `created_at` (the
/// session's last activity from then on), then creates
/// or extends the cursors their targets name and creates or wakes the
/// declared log consumers, moving the work row of every consumer that got a
/// head to now (noted in `wake`). `cause` (a completion's attempt) overrides
/// every event's own cause. Fails with nothing kept (the caller's
/// transaction rolls back) on an id already owned or a lane conflict.
pub(crate) fn insert(
    tx: &Connection,
    ctx: &Ctx,
    session: &mut SessionRow,
    events: &[NewEvent],
    consumers: Option<&[ConsumerDeclaration]>,
    cause: Option<&Cause>,
    wake: &mut Wake,
) -> Result<Vec<StoredEvent>, StoreError> {
    check_lane_conflicts(tx, session, events, consumers)?;
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let now = ctx.clock.now_ms();
    let base = session.head;
    let mut rows = Vec::with_capacity(events.len());
    let mut writer = RowWriter::new(tx, session)?;
    for (offset, event) in (1u64..).zip(events) {
        let id = match &event.id {
            Some(id) => id.clone(),
            None => ctx.ids.next_id(),
        };
        let row = StoredEvent::new(
            session.name.clone(),
            base + offset,
            id,
            event.event_type.clone(),
            event.payload.clone(),
            now,
        )
        .with_cause(cause.cloned().or_else(|| event.cause.clone()));
        writer.write(&session.name, &row)?;
        rows.push(row);
    }
    drop(writer);
    session.head = base + events.len() as u64;
    session::active(tx, session, now)?;
    let mut started = enqueue(tx, session, &rows, events, base, consumers, now)?;
    // One row per consumer that got a head, however many heads it got, at
    // the earliest time one of them is claimable.
    started.sort_unstable();
    started.dedup_by(|later, first| later.0 == first.0);
    for (consumer, at) in &started {
        work::ready_from(tx, session, consumer, *at, wake)?;
    }
    Ok(rows)
}

/// Lane conflicts with stored cursors, checked before any id is drawn: a
/// target on a stored log lane, or a log declaration on a stored target lane.
fn check_lane_conflicts(
    tx: &Connection,
    session: &SessionRow,
    events: &[NewEvent],
    consumers: Option<&[ConsumerDeclaration]>,
) -> Result<(), StoreError> {
    for target in events.iter().flat_map(|event| &event.targets) {
        let Some(lane) = &target.lane else { continue };
        if cursor_rows::lane_kind(tx, session, &target.consumer, lane)? == Some(CursorKind::Log) {
            return Err(StoreError::lane_conflict(&target.consumer, lane));
        }
    }
    for consumer in consumers.unwrap_or_default() {
        let Some(log) = &consumer.log else { continue };
        if cursor_rows::lane_kind(tx, session, &consumer.name, &log.lane)? == Some(CursorKind::Lane)
        {
            return Err(StoreError::lane_conflict(&consumer.name, &log.lane));
        }
    }
    Ok(())
}

/// Starts the cursor work of freshly inserted `rows` (`events[i]` made
/// `rows[i]`) at `now`; returns the consumers (with repeats) of the cursors
/// that got a head, each with the time that head is claimable (now, or its
/// not-before time).
fn enqueue<'a>(
    tx: &Connection,
    session: &SessionRow,
    rows: &[StoredEvent],
    events: &'a [NewEvent],
    base: u64,
    consumers: Option<&'a [ConsumerDeclaration]>,
    now: i64,
) -> Result<Vec<(&'a str, i64)>, StoreError> {
    let mut started = Vec::new();
    for (row, event) in rows.iter().zip(events) {
        for target in &event.targets {
            // Targets naming one cursor queue the index once, at the latest
            // of their times.
            let due = merged_due_at(
                event
                    .targets
                    .iter()
                    .filter(|other| other.consumer == target.consumer && other.lane == target.lane),
                now,
            );
            let got_head = match &target.lane {
                None => add_event_cursor(tx, session, &target.consumer, row.index, due)?,
                Some(lane) => queue_on_lane(tx, session, &target.consumer, lane, row.index, due)?,
            };
            if got_head {
                started.push((target.consumer.as_str(), due.unwrap_or(now)));
            }
        }
    }
    for consumer in consumers.unwrap_or_default() {
        let Some(log) = &consumer.log else { continue };
        let Some(first) = rows
            .iter()
            .find(|row| takes(log.types.as_deref(), &row.event_type))
        else {
            continue;
        };
        let got_head = match cursor_rows::find(tx, session, &consumer.name, Some(&log.lane), 0)? {
            None => {
                let position = log.start_position(session.clear, base);
                let head = if log.backfill {
                    next_log_head(tx, session, position, log.types.as_deref())?
                } else {
                    Some(first.index)
                };
                cursor_rows::create(
                    tx,
                    session,
                    CursorRow::new_log(&consumer.name, log, position, head),
                )?;
                head.is_some()
            }
            Some(mut existing) => {
                existing.types = log.types.clone();
                let idle = existing.head.is_none();
                if idle {
                    existing.head =
                        next_log_head(tx, session, existing.position, log.types.as_deref())?;
                }
                cursor_rows::save(tx, &existing)?;
                idle && existing.head.is_some()
            }
        };
        if got_head {
            started.push((consumer.name.as_str(), now));
        }
    }
    Ok(started)
}

/// A fresh event cursor for `(consumer, index)` (a repeated target is one
/// cursor), busy until `due` when scheduled; whether one was created.
fn add_event_cursor(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    index: u64,
    due: Option<i64>,
) -> Result<bool, StoreError> {
    if cursor_rows::find(tx, session, consumer, None, index)?.is_some() {
        return Ok(false);
    }
    cursor_rows::create(
        tx,
        session,
        CursorRow {
            cid: 0,
            consumer: consumer.to_owned(),
            lane: None,
            ev_index: index,
            kind: CursorKind::Event,
            position: index - 1,
            head: Some(index),
            types: None,
            dispatch: Dispatch::scheduled(due),
        },
    )?;
    Ok(true)
}

/// Queues `index` on the lane cursor `(consumer, lane)` with its not-before
/// time `due`, creating the lane at the clear; whether the lane got a head
/// (it had none; the head is busy until `due` when scheduled).
fn queue_on_lane(
    tx: &Connection,
    session: &SessionRow,
    consumer: &str,
    lane: &str,
    index: u64,
    due: Option<i64>,
) -> Result<bool, StoreError> {
    let mut lane_cursor = match cursor_rows::find(tx, session, consumer, Some(lane), 0)? {
        Some(existing) if existing.kind == CursorKind::Log => {
            return Err(StoreError::lane_conflict(consumer, lane));
        }
        Some(existing) => existing,
        None => cursor_rows::create(
            tx,
            session,
            CursorRow {
                cid: 0,
                consumer: consumer.to_owned(),
                lane: Some(lane.to_owned()),
                ev_index: 0,
                kind: CursorKind::Lane,
                position: session.clear,
                head: None,
                types: None,
                dispatch: Dispatch::default(),
            },
        )?,
    };
    let idx = SqlIndex::new("lane index", index)?;
    tx.prepare_cached(
        "INSERT OR IGNORE INTO lane_queue (cid, idx, not_before) VALUES (?1, ?2, ?3)",
    )
    .and_then(|mut stmt| stmt.execute((lane_cursor.cid, idx, due)))
    .ctx("queueing on a lane")?;
    if lane_cursor.head.is_some() {
        return Ok(false);
    }
    lane_cursor.head = Some(index);
    lane_cursor.dispatch = Dispatch::scheduled(due);
    cursor_rows::save(tx, &lane_cursor)?;
    Ok(true)
}
