//! Writing a batch of rows, shared by `append`, `complete_attempt` (the
//! returned events) and `clear` (the marker): stored-id lookups, lane
//! conflicts, the insert, the cursor work its targets and log consumers
//! start, and the `NOTIFY` of subscribers.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use a2_store_api::log::takes;
use a2_store_api::schedule::merged_due_at;
use a2_store_api::sql::count_to_sql;
use a2_store_api::{
    Cause, ConsumerDeclaration, CursorKind, Dispatch, NewEvent, StoreError, StoredEvent,
};
use tokio_postgres::types::Json;

use tokio_postgres::types::ToSql;

use crate::cursor_table::{load_many, next_log_head, CursorWrites, PUT_ALL};
use crate::db::{query, sql_index, SessionState, Stmt, Tx};
use crate::error::TxResult;
use crate::inner::Inner;
use crate::notify::{notification_payload, NOTIFY};
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

/// [`stored_ids`] reading the clear index from the session row itself:
/// `$1` session, `$2` ids; for a pipeline after the session's lock. One
/// `events_by_id` probe per id (the `LIMIT` keeps the planner from
/// flattening it into a scan of every row above the clear, which it chose
/// for `id = ANY($2)` whenever its statistics were stale). Ids above the
/// clear are unique, so one row per id is all there is.
pub(crate) fn stored_ids_sql() -> String {
    format!(
        "SELECT {EVENT_COLUMNS} FROM unnest($2::text[]) AS k(id) \
         CROSS JOIN LATERAL (SELECT * FROM events e WHERE e.session_id = $1 AND e.id = k.id \
           AND e.idx >= (SELECT s.clear_index FROM sessions s WHERE s.session_id = $1) \
           ORDER BY e.idx LIMIT 1) AS e"
    )
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
    let Some(prepared) = prepare(tx, inner, state, batch, touched).await? else {
        return Ok(Vec::new());
    };
    let columns = prepared.columns()?;
    let params = columns.params(&inner.channel);
    let mut statements = Vec::with_capacity(5);
    Columns::push(&params, &mut statements);
    tx.pipeline(&statements).await?;
    Ok(prepared.stored)
}

/// [`write()`] up to the writes: lane conflicts checked, ids generated and
/// checked, the head advanced in `state`, the cursors the batch starts
/// decided (and noted in `touched`); `None` for an empty batch. The caller
/// sends [`Prepared::columns`]'s statements, in one pipeline with whatever
/// follows them.
pub(crate) async fn prepare(
    tx: &Tx<'_>,
    inner: &Inner,
    state: &mut SessionState,
    batch: &Batch<'_>,
    touched: &mut Touched,
) -> TxResult<Option<Prepared>> {
    let lanes = lane_cursors(tx, batch.session_id, batch.events, batch.consumers).await?;
    if batch.events.is_empty() {
        return Ok(None);
    }
    insert(tx, inner, state, batch, lanes, touched)
        .await
        .map(Some)
}

/// A batch ready to write (see [`prepare`]).
pub(crate) struct Prepared {
    session_id: String,
    /// The stored rows, in order.
    pub stored: Vec<StoredEvent>,
    /// The index before the first row.
    base: i64,
    /// The session's head after the batch.
    head: i64,
    /// The cursors the batch starts or extends, in key order.
    cursors: Vec<CursorRow>,
    /// The lane queue entries it adds, each with its not-before time.
    queue: Vec<QueueEntry>,
}

/// A lane queue entry: consumer, lane, index and its not-before time.
type QueueEntry = (String, String, i64, Option<i64>);

/// The bound columns of a [`Prepared`] batch's statements.
pub(crate) struct Columns<'a> {
    session_id: &'a str,
    created_at: i64,
    indexes: Vec<i64>,
    ids: Vec<&'a str>,
    types: Vec<&'a str>,
    payloads: Vec<Json<&'a serde_json::Value>>,
    cause_consumers: Vec<Option<&'a str>>,
    cause_lanes: Vec<Option<&'a str>>,
    cause_indexes: Vec<Option<i64>>,
    cause_attempts: Vec<Option<i64>>,
    head: i64,
    cursors: Option<CursorWrites<'a>>,
    queue_consumers: Vec<&'a str>,
    queue_lanes: Vec<&'a str>,
    queue_indexes: Vec<i64>,
    queue_not_before: Vec<Option<i64>>,
    payload: &'a str,
}

/// The parameters of a batch's statements: the rows, the head, the cursor
/// writes (when any), the queue (when any) and the subscribers' `NOTIFY`.
pub(crate) type ColumnParams<'a> = (
    [&'a (dyn ToSql + Sync); 10],
    [&'a (dyn ToSql + Sync); 3],
    Option<[&'a (dyn ToSql + Sync); 18]>,
    Option<[&'a (dyn ToSql + Sync); 5]>,
    [&'a (dyn ToSql + Sync); 3],
);

/// The rows' insert: `$1` session, `$2` created_at, `$3`.. the columns.
const INSERT_ROWS: &str = "INSERT INTO events (session_id, idx, id, type, payload, created_at, \
      cause_consumer, cause_lane, cause_index, cause_attempt) \
    SELECT $1, r.idx, r.id, r.type, r.payload, $2, r.cc, r.cl, r.ci, r.ca \
    FROM unnest($3::bigint[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[], \
      $9::bigint[], $10::bigint[]) AS r(idx, id, type, payload, cc, cl, ci, ca)";

/// The session's new head, and its last activity (the rows' time, for
/// `prune`): `$1` session, `$2` head, `$3` created_at.
const SET_HEAD: &str = "UPDATE sessions SET head = $2, last_activity = $3 WHERE session_id = $1";

/// The statements of appends that a new connection prepares before its
/// first call (see `crate::warm`).
pub(crate) const HOT_STATEMENTS: [&str; 3] = [INSERT_ROWS, SET_HEAD, ENQUEUE];

/// The lane queue's new entries: `$1` session, `$2`..`$5` consumers, lanes,
/// indexes and not-before times (`NULL`: claimable once the lane reaches it).
const ENQUEUE: &str = "INSERT INTO lane_queue (session_id, consumer, lane, idx, not_before) \
    SELECT $1, q.consumer, q.lane, q.idx, q.not_before \
    FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) \
      AS q(consumer, lane, idx, not_before) \
    ON CONFLICT DO NOTHING";

impl Prepared {
    /// The columns of its statements.
    pub(crate) fn columns(&self) -> TxResult<Columns<'_>> {
        let rows = &self.stored;
        let mut cause_indexes: Vec<Option<i64>> = Vec::with_capacity(rows.len());
        for row in rows {
            cause_indexes.push(match &row.cause {
                Some(cause) => Some(sql_index("cause index", cause.index)?),
                None => None,
            });
        }
        Ok(Columns {
            session_id: &self.session_id,
            created_at: rows.first().map(|row| row.created_at).unwrap_or_default(),
            indexes: (self.base + 1..).take(rows.len()).collect(),
            ids: rows.iter().map(|row| row.id.as_str()).collect(),
            types: rows.iter().map(|row| row.event_type.as_str()).collect(),
            payloads: rows
                .iter()
                .map(|row| Json(row.payload.as_value()))
                .collect(),
            cause_consumers: rows
                .iter()
                .map(|row| row.cause.as_ref().map(|c| c.consumer.as_str()))
                .collect(),
            cause_lanes: rows
                .iter()
                .map(|row| row.cause.as_ref().and_then(|c| c.lane.as_deref()))
                .collect(),
            cause_indexes,
            cause_attempts: rows
                .iter()
                .map(|row| row.cause.as_ref().map(|c| count_to_sql(c.attempt)))
                .collect(),
            head: self.head,
            cursors: CursorWrites::new(&self.session_id, &self.cursors),
            queue_consumers: self.queue.iter().map(|q| q.0.as_str()).collect(),
            queue_lanes: self.queue.iter().map(|q| q.1.as_str()).collect(),
            queue_indexes: self.queue.iter().map(|q| q.2).collect(),
            queue_not_before: self.queue.iter().map(|q| q.3).collect(),
            payload: notification_payload(&self.session_id),
        })
    }
}

impl<'a> Columns<'a> {
    /// The parameters of each statement; `channel` is the subscribers'.
    pub(crate) fn params(&'a self, channel: &'a String) -> ColumnParams<'a> {
        (
            [
                &self.session_id,
                &self.created_at,
                &self.indexes,
                &self.ids,
                &self.types,
                &self.payloads,
                &self.cause_consumers,
                &self.cause_lanes,
                &self.cause_indexes,
                &self.cause_attempts,
            ],
            [&self.session_id, &self.head, &self.created_at],
            self.cursors.as_ref().map(CursorWrites::params),
            (!self.queue_indexes.is_empty()).then(|| {
                let params: [&(dyn ToSql + Sync); 5] = [
                    &self.session_id,
                    &self.queue_consumers,
                    &self.queue_lanes,
                    &self.queue_indexes,
                    &self.queue_not_before,
                ];
                params
            }),
            [channel, &self.payload, &self.session_id],
        )
    }

    /// Adds the batch's statements, in order: the rows, the head (with the
    /// session's last activity), the
    /// cursors, the queue, the `NOTIFY` (sent only when the session has a
    /// subscriber; delivered on commit). None of their answers is needed.
    pub(crate) fn push<'s>(params: &'s ColumnParams<'s>, statements: &mut Vec<Stmt<'s>>) {
        statements.push(Stmt::new(INSERT_ROWS, &params.0));
        statements.push(Stmt::new(SET_HEAD, &params.1));
        if let Some(cursors) = &params.2 {
            statements.push(Stmt::new(PUT_ALL, cursors));
        }
        if let Some(queue) = &params.3 {
            statements.push(Stmt::new(ENQUEUE, queue));
        }
        statements.push(Stmt::new(NOTIFY, &params.4));
    }
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
) -> TxResult<Prepared> {
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
        stored.push(
            StoredEvent::new(
                session_id.to_owned(),
                u64::try_from(index).unwrap_or_default(),
                id,
                event.event_type.clone(),
                event.payload.clone(),
                now,
            )
            .with_cause(batch.cause.cloned().or_else(|| event.cause.clone())),
        );
    }
    if !generated.is_empty() {
        let refs: Vec<&str> = generated.iter().map(String::as_str).collect();
        let owners = stored_ids(tx, session_id, state.clear, &refs).await?;
        if let Some(id) = owners.keys().next() {
            return Err(StoreError::id_taken(session_id, id).into());
        }
    }
    state.head = base + i64::try_from(stored.len()).unwrap_or(i64::MAX);
    let (cursors, queue) =
        enqueue(tx, batch, state, (base, now), &stored, &mut lanes, touched).await?;
    Ok(Prepared {
        session_id: session_id.to_owned(),
        stored,
        base,
        head: state.head,
        cursors,
        queue,
    })
}

/// The cursor work a batch's targets and declarations start (the batch's
/// first row is `base + 1`, written at `now`): event cursors, lane queue
/// entries and the lanes' new heads, log cursors. A scheduled target's time
/// (`schedule::merged_due_at` of the event's targets naming the same
/// cursor) is a new head's `Dispatch::scheduled`, or kept with the queued
/// index until its lane reaches it.
async fn enqueue(
    tx: &Tx<'_>,
    batch: &Batch<'_>,
    state: &SessionState,
    (base, now): (i64, i64),
    rows: &[StoredEvent],
    lanes: &mut BTreeMap<(String, String), CursorRow>,
    touched: &mut Touched,
) -> TxResult<(Vec<CursorRow>, Vec<QueueEntry>)> {
    let session_id = batch.session_id;
    let mut changed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut event_cursors: BTreeMap<(String, i64), CursorRow> = BTreeMap::new();
    let mut queue: BTreeMap<(String, String, i64), Option<i64>> = BTreeMap::new();
    for (index, event) in (base + 1..).zip(batch.events) {
        for target in &event.targets {
            let due = merged_due_at(
                event
                    .targets
                    .iter()
                    .filter(|t| t.consumer == target.consumer && t.lane == target.lane),
                now,
            );
            match &target.lane {
                None => {
                    let mut cursor = CursorRow::new(
                        &target.consumer,
                        None,
                        index,
                        CursorKind::Event,
                        index - 1,
                        Some(index),
                        None,
                    );
                    cursor.dispatch = Dispatch::scheduled(due);
                    event_cursors.insert((target.consumer.clone(), index), cursor);
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
                    queue.insert((target.consumer.clone(), lane.clone(), index), due);
                    if cursor.head.is_none() {
                        cursor.head = Some(index);
                        cursor.dispatch = Dispatch::scheduled(due);
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
                    // The batch's rows are not written yet: an older event
                    // comes first, else the batch's first it takes.
                    let stored =
                        next_log_head(tx, session_id, cursor.position, log.types.as_deref())
                            .await?;
                    cursor.head = stored.or(first);
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
                    let stored =
                        next_log_head(tx, session_id, position, log.types.as_deref()).await?;
                    stored.or(Some(first))
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
    let written: Vec<CursorRow> = changed
        .iter()
        .filter_map(|key| lanes.get(key))
        .chain(event_cursors.values())
        .cloned()
        .collect();
    for cursor in &written {
        touched.cursor(cursor);
    }
    let queue = queue
        .into_iter()
        .map(|((consumer, lane, index), due)| (consumer, lane, index, due))
        .collect();
    Ok((written, queue))
}
