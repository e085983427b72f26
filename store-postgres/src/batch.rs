//! Writing a batch of rows, shared by `append`, `complete_attempt` (the
//! returned events) and `clear` (the marker): stored-id lookups, lane
//! conflicts, the insert, the cursor work its targets and log consumers
//! start, and the `NOTIFY` of subscribers.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use a2_store_api::log::takes;
use a2_store_api::sql::count_to_sql;
use a2_store_api::{Cause, ConsumerDeclaration, CursorKind, NewEvent, StoreError, StoredEvent};
use tokio_postgres::types::Json;

use crate::cursor_table::{load_many, next_log_head, put_all};
use crate::db::{execute, query, set_head, sql_index, SessionState, Tx};
use crate::error::TxResult;
use crate::inner::Inner;
use crate::notify::notify;
use crate::ops::work::Touched;
use crate::rows::{decode_event, index_of, CursorKey, CursorRow, EVENT_COLUMNS};

/// The rows above the clear (the marker included) owning any of `ids`, by id.
pub(crate) async fn stored_ids(
    tx: &Tx<'_>,
    session_id: &str,
    clear: i64,
    ids: &[&str],
) -> TxResult<HashMap<String, StoredEvent>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    // One `events_by_id` probe per id (the `LIMIT` keeps the planner from
    // flattening it into a scan of every row above the clear, which it chose
    // for `id = ANY($2)` whenever its statistics were stale). Ids above the
    // clear are unique, so one row per id is all there is.
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM unnest($2::text[]) AS k(id) \
         CROSS JOIN LATERAL (SELECT * FROM events e WHERE e.session_id = $1 AND e.id = k.id \
           AND e.idx >= $3 ORDER BY e.idx LIMIT 1) AS e"
    );
    let rows = query(tx, &sql, &[&session_id, &ids, &clear]).await?;
    let mut owners = HashMap::with_capacity(rows.len());
    for row in &rows {
        let event = decode_event(row, 0, session_id)?;
        owners.insert(event.id.clone(), event);
    }
    Ok(owners)
}

/// A batch to write.
pub(crate) struct Batch<'a> {
    pub session_id: &'a str,
    pub events: &'a [NewEvent],
    /// Overrides every event's cause (a completion's attempt).
    pub cause: Option<&'a Cause>,
    /// The declarations the batch comes with.
    pub consumers: Option<&'a [ConsumerDeclaration]>,
}

/// Writes `batch` after the session's head (under the session's writer
/// lock) with the cursor work it starts, and notifies subscribers on
/// commit. Returns the stored rows in order. An empty batch writes nothing
/// but is still checked for lane conflicts with its declarations. The
/// cursors written are noted in `touched`, whose work rows the caller
/// upserts once its cursor writes are done.
pub(crate) async fn write(
    tx: &Tx<'_>,
    inner: &Inner,
    state: &mut SessionState,
    batch: &Batch<'_>,
    touched: &mut Touched,
) -> TxResult<Vec<StoredEvent>> {
    let lanes = lane_cursors(tx, batch.session_id, batch.events, batch.consumers).await?;
    if batch.events.is_empty() {
        return Ok(Vec::new());
    }
    let stored = insert(tx, inner, state, batch, lanes, touched).await?;
    notify(tx, &inner.channel, batch.session_id).await?;
    Ok(stored)
}

/// The lane and log cursors (slot 0) a batch's lane targets and the declared
/// log consumers name, by `(consumer, lane)`; rejects lane conflicts with
/// stored cursors (a target on a log lane, a log declared on a target lane).
async fn lane_cursors(
    tx: &Tx<'_>,
    session_id: &str,
    events: &[NewEvent],
    consumers: Option<&[ConsumerDeclaration]>,
) -> TxResult<BTreeMap<(String, String), CursorRow>> {
    let mut keys: BTreeSet<CursorKey> = BTreeSet::new();
    for target in events.iter().flat_map(|event| &event.targets) {
        if let Some(lane) = &target.lane {
            keys.insert((target.consumer.clone(), lane.clone(), 0));
        }
    }
    for consumer in consumers.unwrap_or_default() {
        if let Some(log) = &consumer.log {
            keys.insert((consumer.name.clone(), log.lane.clone(), 0));
        }
    }
    let keys: Vec<CursorKey> = keys.into_iter().collect();
    let found = load_many(tx, session_id, &keys, true).await?;
    let map: BTreeMap<(String, String), CursorRow> = found
        .into_iter()
        .map(|cursor| ((cursor.consumer.clone(), cursor.lane.clone()), cursor))
        .collect();
    for target in events.iter().flat_map(|event| &event.targets) {
        let Some(lane) = &target.lane else { continue };
        if let Some(cursor) = map.get(&(target.consumer.clone(), lane.clone())) {
            if cursor.kind == CursorKind::Log {
                return Err(StoreError::lane_conflict(&target.consumer, lane).into());
            }
        }
    }
    for consumer in consumers.unwrap_or_default() {
        let Some(log) = &consumer.log else { continue };
        if let Some(cursor) = map.get(&(consumer.name.clone(), log.lane.clone())) {
            if cursor.kind != CursorKind::Log {
                return Err(StoreError::lane_conflict(&consumer.name, &log.lane).into());
            }
        }
    }
    Ok(map)
}

/// Appends the batch after the head (ids generated where absent, a generated
/// id already stored is `PartialDuplicateBatch`), sets the head, and starts
/// their cursor work: event cursors, lane queues and declared log cursors
/// (`lanes` comes from [`lane_cursors`]). Returns the stored rows in order.
async fn insert(
    tx: &Tx<'_>,
    inner: &Inner,
    state: &mut SessionState,
    batch: &Batch<'_>,
    mut lanes: BTreeMap<(String, String), CursorRow>,
    touched: &mut Touched,
) -> TxResult<Vec<StoredEvent>> {
    let session_id = batch.session_id;
    let now = inner.clock.now_ms();
    let base = state.head;
    let mut generated = Vec::new();
    let mut stored = Vec::with_capacity(batch.events.len());
    for (offset, event) in (1_i64..).zip(batch.events) {
        let id = match &event.id {
            Some(id) => id.clone(),
            None => {
                let id = inner.ids.next_id();
                generated.push(id.clone());
                id
            }
        };
        let index = base + offset;
        stored.push(StoredEvent {
            id,
            event_type: event.event_type.clone(),
            payload: event.payload.clone(),
            index: u64::try_from(index).unwrap_or_default(),
            session_id: session_id.to_owned(),
            created_at: now,
            cause: batch.cause.cloned().or_else(|| event.cause.clone()),
        });
    }
    if !generated.is_empty() {
        let refs: Vec<&str> = generated.iter().map(String::as_str).collect();
        let owners = stored_ids(tx, session_id, state.clear, &refs).await?;
        if let Some(id) = owners.keys().next() {
            return Err(StoreError::id_taken(session_id, id).into());
        }
    }
    write_rows(tx, session_id, base, &stored).await?;
    state.head = base + i64::try_from(stored.len()).unwrap_or(i64::MAX);
    set_head(tx, session_id, state.head).await?;
    enqueue(tx, batch, state, base, &stored, &mut lanes, touched).await?;
    Ok(stored)
}

async fn write_rows(
    tx: &Tx<'_>,
    session_id: &str,
    base: i64,
    rows: &[StoredEvent],
) -> TxResult<()> {
    let indexes: Vec<i64> = (base + 1..).take(rows.len()).collect();
    let ids: Vec<&str> = rows.iter().map(|row| row.id.as_str()).collect();
    let types: Vec<&str> = rows.iter().map(|row| row.event_type.as_str()).collect();
    let payloads: Vec<Json<&serde_json::Value>> = rows
        .iter()
        .map(|row| Json(row.payload.as_value()))
        .collect();
    let cause_consumers: Vec<Option<&str>> = rows
        .iter()
        .map(|row| row.cause.as_ref().map(|c| c.consumer.as_str()))
        .collect();
    let cause_lanes: Vec<Option<&str>> = rows
        .iter()
        .map(|row| row.cause.as_ref().and_then(|c| c.lane.as_deref()))
        .collect();
    let mut cause_indexes: Vec<Option<i64>> = Vec::with_capacity(rows.len());
    for row in rows {
        cause_indexes.push(match &row.cause {
            Some(cause) => Some(sql_index("cause index", cause.index)?),
            None => None,
        });
    }
    let cause_attempts: Vec<Option<i64>> = rows
        .iter()
        .map(|row| row.cause.as_ref().map(|c| count_to_sql(c.attempt)))
        .collect();
    let created_at = rows.first().map(|row| row.created_at).unwrap_or_default();
    execute(
        tx,
        "INSERT INTO events (session_id, idx, id, type, payload, created_at, cause_consumer, \
           cause_lane, cause_index, cause_attempt) \
         SELECT $1, r.idx, r.id, r.type, r.payload, $2, r.cc, r.cl, r.ci, r.ca \
         FROM unnest($3::bigint[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[], \
           $9::bigint[], $10::bigint[]) AS r(idx, id, type, payload, cc, cl, ci, ca)",
        &[
            &session_id,
            &created_at,
            &indexes,
            &ids,
            &types,
            &payloads,
            &cause_consumers,
            &cause_lanes,
            &cause_indexes,
            &cause_attempts,
        ],
    )
    .await?;
    Ok(())
}

async fn enqueue(
    tx: &Tx<'_>,
    batch: &Batch<'_>,
    state: &SessionState,
    base: i64,
    rows: &[StoredEvent],
    lanes: &mut BTreeMap<(String, String), CursorRow>,
    touched: &mut Touched,
) -> TxResult<()> {
    let session_id = batch.session_id;
    let mut changed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut event_cursors: BTreeMap<(String, i64), CursorRow> = BTreeMap::new();
    let mut queue: BTreeSet<(String, String, i64)> = BTreeSet::new();
    for (index, event) in (base + 1..).zip(batch.events) {
        for target in &event.targets {
            match &target.lane {
                None => {
                    event_cursors.insert(
                        (target.consumer.clone(), index),
                        CursorRow::new(
                            &target.consumer,
                            None,
                            index,
                            CursorKind::Event,
                            index - 1,
                            Some(index),
                            None,
                        ),
                    );
                }
                Some(lane) => {
                    let key = (target.consumer.clone(), lane.clone());
                    let cursor = lanes.entry(key.clone()).or_insert_with(|| {
                        CursorRow::new(
                            &target.consumer,
                            Some(lane),
                            0,
                            CursorKind::Lane,
                            state.clear,
                            None,
                            None,
                        )
                    });
                    queue.insert((target.consumer.clone(), lane.clone(), index));
                    if cursor.head.is_none() {
                        cursor.head = Some(index);
                    }
                    changed.insert(key);
                }
            }
        }
    }
    for consumer in batch.consumers.unwrap_or_default() {
        let Some(log) = &consumer.log else { continue };
        let first = (base + 1..)
            .zip(rows)
            .find(|(_, row)| takes(log.types.as_deref(), &row.event_type))
            .map(|(index, _)| index);
        let key = (consumer.name.clone(), log.lane.clone());
        match lanes.get_mut(&key) {
            Some(cursor) => {
                let before = cursor.clone();
                cursor.types = log.types.clone();
                if first.is_some() && cursor.head.is_none() {
                    cursor.head =
                        next_log_head(tx, session_id, cursor.position, log.types.as_deref())
                            .await?;
                }
                if *cursor != before {
                    changed.insert(key);
                }
            }
            None => {
                let Some(first) = first else { continue };
                let start = log.start_position(index_of(state.clear)?, index_of(base)?);
                let position = sql_index("log cursor position", start)?;
                let head = if log.backfill {
                    next_log_head(tx, session_id, position, log.types.as_deref()).await?
                } else {
                    Some(first)
                };
                lanes.insert(
                    key.clone(),
                    CursorRow::new(
                        &consumer.name,
                        Some(&log.lane),
                        0,
                        CursorKind::Log,
                        position,
                        head,
                        log.types.clone(),
                    ),
                );
                changed.insert(key);
            }
        }
    }
    let written: Vec<&CursorRow> = changed
        .iter()
        .filter_map(|key| lanes.get(key))
        .chain(event_cursors.values())
        .collect();
    put_all(tx, session_id, written.iter().copied()).await?;
    for cursor in written {
        touched.cursor(cursor);
    }
    if !queue.is_empty() {
        let consumers: Vec<&str> = queue.iter().map(|q| q.0.as_str()).collect();
        let lanes: Vec<&str> = queue.iter().map(|q| q.1.as_str()).collect();
        let indexes: Vec<i64> = queue.iter().map(|q| q.2).collect();
        execute(
            tx,
            "INSERT INTO lane_queue (session_id, consumer, lane, idx) \
             SELECT $1, q.consumer, q.lane, q.idx \
             FROM unnest($2::text[], $3::text[], $4::bigint[]) AS q(consumer, lane, idx) \
             ON CONFLICT DO NOTHING",
            &[&session_id, &consumers, &lanes, &indexes],
        )
        .await?;
    }
    Ok(())
}
