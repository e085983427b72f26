//! Completions in batches: completions of event and lane cursors that
//! return no events, gathered by [`crate::writer`] from concurrent calls,
//! decided and written in one transaction of set-based statements.
//!
//! Two round trips, whatever the batch's size:
//!
//! 1. `BEGIN`, the cursors' lock and read ([`LOCK_MANY`], in key order), the
//!    sessions' clear indexes and incarnations ([`CLEARS`]), the work rows of their
//!    `(session, consumer)` pairs locked and the heads deciding them probed
//!    ([`crate::ops::work::pairs`]), and each lane's next queued index
//!    ([`NEXT_MANY`]);
//! 2. the completion records ([`RECORD_MANY`]), the pins' release
//!    ([`RELEASE_MANY`]), the lanes' trims ([`TRIM_MANY`]), the cursors'
//!    writes ([`PUT_MANY`]), the work rows that change (an update, a delete
//!    and an insert, each when needed) and `COMMIT`.
//!
//! Between the two, each completion is decided in Rust on the rows read,
//! with the rules the single path uses (`retention::incarnation_current`,
//! `dispatch::cleared`,
//! `Dispatch::complete_verdict`, the cursor's move past its head), and so
//! is each pair's work row (`WorkSummary::add` and `touched_row`). Only a
//! completion whose verdict is `Apply` is written; every other one (a
//! replay, a superseded attempt, a request naming another incarnation of
//! its session, a missing cursor, a log cursor) is left
//! out of the batch and answered by the single path, which reads its rows
//! again and decides, so no rule is decided twice in two ways.

use std::collections::{BTreeMap, BTreeSet};

use a2_store_api::dispatch::cleared;
use a2_store_api::retention::incarnation_current;
use a2_store_api::sql::count_to_sql;
use a2_store_api::{CompleteRequest, CompleteVerdict, CursorKind};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::cursor_table::{advance_in_memory, ManyCursorWrites, PUT_MANY};
use crate::db::{Stmt, Tx};
use crate::error::TxResult;
use crate::ops::claims::claimed::Claimed;
use crate::ops::work::pairs::{Pairs, Rows, LOCK_PAIRS, PROBE_PAIRS};
use crate::ops::work::Rule;
use crate::rows::{index_of, lane_key, slot_key, CursorRow, CURSOR_COLUMNS};

/// Whether a completion can join a batch: it returns no events (which would
/// need the session's writer lock and an append) and declares no log
/// consumer (whose types a completion refreshes, a write of its own).
pub(crate) fn batchable(request: &CompleteRequest) -> bool {
    request.events.is_empty()
        && !request
            .consumers
            .as_deref()
            .is_some_and(|declared| declared.iter().any(|c| c.log.is_some()))
}

/// The cursors' lock and read, in key order so concurrent batches lock
/// them in one order: `$1`..`$4` the keys' sessions, consumers, stored
/// lanes and slots. Each row is the key's ordinal (1-based), then the
/// cursor's columns.
fn lock_many_sql() -> String {
    format!(
        "SELECT k.n, {CURSOR_COLUMNS} FROM unnest($1::text[], $2::text[], $3::text[], \
           $4::bigint[]) WITH ORDINALITY AS k(session_id, consumer, lane, slot, n) \
         JOIN cursors c ON c.session_id = k.session_id AND c.consumer = k.consumer \
           AND c.lane = k.lane AND c.slot = k.slot \
         ORDER BY c.session_id, c.consumer, c.lane, c.slot FOR UPDATE OF c"
    )
}

/// See [`lock_many_sql`].
static LOCK_MANY: std::sync::LazyLock<String> = std::sync::LazyLock::new(lock_many_sql);

/// The clear index and incarnation of each session (`NULL` for a session
/// that does not exist yet, which no incarnation fences): `$1` the sessions.
/// Sent after [`LOCK_MANY`], so its snapshot sees every commit before the
/// locks.
const CLEARS: &str = "SELECT session_id, clear_index, \
    CASE WHEN last_activity IS NULL THEN NULL ELSE incarnation END \
    FROM sessions WHERE session_id = ANY($1)";

/// Each lane's first queued index after the head it finishes, with its
/// not-before time, then the key's ordinal: `$1`..`$3` the lanes' sessions,
/// consumers and stored lanes, `$4` the heads finished. One primary-key
/// probe per lane.
const NEXT_MANY: &str = "SELECT q.idx, q.not_before, k.n FROM unnest($1::text[], $2::text[], \
       $3::text[], $4::bigint[]) WITH ORDINALITY AS k(session_id, consumer, lane, done, n) \
     CROSS JOIN LATERAL (SELECT idx, not_before FROM lane_queue q \
       WHERE q.session_id = k.session_id AND q.consumer = k.consumer AND q.lane = k.lane \
         AND q.idx > k.done ORDER BY q.idx LIMIT 1) AS q";

/// The completion records for replays, none returning events: `$1`..`$5`
/// sessions, consumers, stored lanes, indexes and attempts.
const RECORD_MANY: &str =
    "INSERT INTO completions (session_id, consumer, lane, idx, attempt, returned_ids) \
     SELECT k.session_id, k.consumer, k.lane, k.idx, k.attempt, '[]'::jsonb \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) \
       AS k(session_id, consumer, lane, idx, attempt) \
     ORDER BY k.session_id, k.consumer, k.lane, k.idx \
     ON CONFLICT (session_id, consumer, lane, idx) DO UPDATE \
     SET attempt = EXCLUDED.attempt, returned_ids = EXCLUDED.returned_ids";

/// The snapshot pins the finished heads held: `$1`..`$4` the cursors'
/// sessions, consumers, stored lanes and slots.
const RELEASE_MANY: &str = "DELETE FROM pins p USING unnest($1::text[], $2::text[], \
       $3::text[], $4::bigint[]) AS k(session_id, consumer, lane, slot) \
     WHERE p.session_id = k.session_id AND p.consumer = k.consumer AND p.lane = k.lane \
       AND p.slot = k.slot";

/// The lanes' queued indexes up to the heads they finished: `$1`..`$3` the
/// lanes' sessions, consumers and stored lanes, `$4` the heads finished.
const TRIM_MANY: &str = "DELETE FROM lane_queue q USING unnest($1::text[], $2::text[], \
       $3::text[], $4::bigint[]) AS k(session_id, consumer, lane, done) \
     WHERE q.session_id = k.session_id AND q.consumer = k.consumer AND q.lane = k.lane \
       AND q.idx <= k.done";

/// The statements of batches that a new connection prepares before its
/// first call (see `crate::warm`).
pub(crate) fn hot_statements() -> [&'static str; 6] {
    [
        LOCK_MANY.as_str(),
        CLEARS,
        NEXT_MANY,
        RECORD_MANY,
        RELEASE_MANY,
        TRIM_MANY,
    ]
}

/// A completion of the batch: its request, its cursor's stored key and
/// its head as stored.
struct Item<'r> {
    request: &'r CompleteRequest,
    lane: &'r str,
    slot: i64,
    index: i64,
}

/// A completion decided `Apply`: its cursor moved past its head, the key
/// it had (for the pins' release), and whether its lane is trimmed.
struct Applied<'r> {
    item: &'r Item<'r>,
    cursor: CursorRow,
    trim: bool,
}

/// What a batch did: for each request (in the order given), whether it was
/// completed here (`true`: answer `Completed` with no events) or left to
/// the single path; and whether a work row was made ready.
#[derive(Debug, Default)]
pub(crate) struct Flushed {
    /// Per request: completed by the batch.
    pub done: Vec<bool>,
    /// A work row was made ready: waiting claimers are woken.
    pub work: bool,
}

/// Decides and writes `requests` (each [`batchable`], distinct cursors) in
/// the transaction `tx` at `now`, committing it when any was applied and
/// ending it otherwise. The rows remembered for the applied event cursors
/// are forgotten from `claimed`.
pub(crate) async fn flush(
    tx: &Tx<'_>,
    requests: &[&CompleteRequest],
    now: i64,
    claimed: &Claimed,
) -> TxResult<Flushed> {
    let mut done = vec![false; requests.len()];
    // Requests whose index no row can hold are left to the single path,
    // which answers them with its own error.
    let items: Vec<(usize, Item<'_>)> = requests
        .iter()
        .enumerate()
        .filter_map(|(at, request)| {
            let lane = request.lane.as_deref();
            Some((
                at,
                Item {
                    request,
                    lane: lane_key(lane),
                    slot: slot_key(lane, request.index).ok()?,
                    index: i64::try_from(request.index).ok()?,
                },
            ))
        })
        .collect();
    if items.is_empty() {
        return Ok(Flushed { done, work: false });
    }
    let pairs = Pairs::new(
        items.iter().map(|(_, item)| {
            let request = item.request;
            (
                request.session_id.as_str(),
                request.consumer.as_str(),
                item.lane,
                item.slot,
            )
        }),
        now,
    );
    let Read {
        rows,
        clears,
        queued,
        locked,
        probed,
    } = read(tx, &items, &pairs).await?;
    let mut applied: Vec<(usize, Applied<'_>)> = Vec::with_capacity(items.len());
    for (position, (at, item)) in items.iter().enumerate() {
        let Some(cursor) = rows.get(&position).cloned() else {
            continue;
        };
        let Some(&(clear, incarnation)) = clears.get(item.request.session_id.as_str()) else {
            continue;
        };
        let current = match incarnation {
            None => true,
            Some(incarnation) => u64::try_from(incarnation).is_ok_and(|incarnation| {
                incarnation_current(item.request.incarnation, Some(incarnation))
            }),
        };
        if !current
            || cursor.kind == CursorKind::Log
            || cleared(item.request.index, index_of(clear)?)
        {
            continue;
        }
        let on_head = cursor.head == Some(item.index);
        if cursor
            .dispatch
            .complete_verdict(on_head, item.request.attempt)
            != CompleteVerdict::Apply
        {
            continue;
        }
        let mut cursor = cursor;
        let next = (cursor.kind == CursorKind::Lane).then(|| queued.get(&position));
        let trim = advance_in_memory(tx, &item.request.session_id, &mut cursor, next).await?;
        applied.push((*at, Applied { item, cursor, trim }));
    }
    if applied.is_empty() {
        tx.end().await?;
        return Ok(Flushed { done, work: false });
    }
    let mut work_rows = Rows::default();
    pairs.decide(
        &locked,
        &probed,
        applied.iter().map(|(_, one)| {
            let request = one.item.request;
            (
                (request.session_id.as_str(), request.consumer.as_str()),
                &one.cursor,
            )
        }),
        Rule::Touched,
        &mut work_rows,
    )?;
    let work = write(tx, &applied, &work_rows).await?;
    for (at, one) in &applied {
        if let Some(flag) = done.get_mut(*at) {
            *flag = true;
        }
        let request = one.item.request;
        claimed.take_event(
            &request.session_id,
            &request.consumer,
            request.lane.as_deref(),
            request.index,
        );
    }
    Ok(Flushed { done, work })
}

/// The rows a batch decides on.
struct Read {
    /// By the item's position: its cursor (locked).
    rows: BTreeMap<usize, CursorRow>,
    /// The clear index and incarnation of each session.
    clears: BTreeMap<String, (i64, Option<i64>)>,
    /// By the item's position: its lane's next queued row.
    queued: BTreeMap<usize, Row>,
    /// The work rows of the pairs, locked ([`LOCK_PAIRS`]'s answer).
    locked: Vec<Row>,
    /// The heads deciding the pairs' rows ([`PROBE_PAIRS`]'s answer).
    probed: Vec<Row>,
}

/// The first round trip: `BEGIN`, [`LOCK_MANY`], [`CLEARS`], the pairs'
/// work rows locked ([`LOCK_PAIRS`]) and their heads probed
/// ([`PROBE_PAIRS`]) and, when the batch has lanes, [`NEXT_MANY`].
async fn read(tx: &Tx<'_>, items: &[(usize, Item<'_>)], pairs: &Pairs<'_>) -> TxResult<Read> {
    let sessions: Vec<&str> = items
        .iter()
        .map(|(_, i)| i.request.session_id.as_str())
        .collect();
    let consumers: Vec<&str> = items
        .iter()
        .map(|(_, i)| i.request.consumer.as_str())
        .collect();
    let lanes: Vec<&str> = items.iter().map(|(_, i)| i.lane).collect();
    let slots: Vec<i64> = items.iter().map(|(_, i)| i.slot).collect();
    let distinct: Vec<&str> = sessions
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // The lanes' keys, numbered by the item's position + 1 in `ordinals`.
    let mut lane_sessions = Vec::new();
    let mut lane_consumers = Vec::new();
    let mut lane_names = Vec::new();
    let mut lane_done = Vec::new();
    let mut ordinals = Vec::new();
    for (position, (_, item)) in items.iter().enumerate() {
        if item.request.lane.is_some() {
            lane_sessions.push(item.request.session_id.as_str());
            lane_consumers.push(item.request.consumer.as_str());
            lane_names.push(item.lane);
            lane_done.push(item.index);
            ordinals.push(position);
        }
    }
    let lock: [&(dyn ToSql + Sync); 4] = [&sessions, &consumers, &lanes, &slots];
    let clears: [&(dyn ToSql + Sync); 1] = [&distinct];
    let next: [&(dyn ToSql + Sync); 4] = [&lane_sessions, &lane_consumers, &lane_names, &lane_done];
    let lock_pairs = pairs.lock_params();
    let probe_pairs = pairs.probe_params();
    let mut statements = vec![
        Stmt::new(LOCK_MANY.as_str(), &lock),
        Stmt::new(CLEARS, &clears),
        Stmt::new(LOCK_PAIRS, &lock_pairs),
        Stmt::new(PROBE_PAIRS, &probe_pairs),
    ];
    if !ordinals.is_empty() {
        statements.push(Stmt::new(NEXT_MANY, &next));
    }
    let mut answers = tx.pipeline(&statements).await?.into_iter();
    let mut rows = BTreeMap::new();
    for row in answers.next().unwrap_or_default() {
        rows.insert(position_of(&row, 0)?, CursorRow::decode(&row, 1)?);
    }
    let mut by_session = BTreeMap::new();
    for row in answers.next().unwrap_or_default() {
        by_session.insert(
            row.try_get::<_, String>(0)?,
            (row.try_get::<_, i64>(1)?, row.try_get::<_, Option<i64>>(2)?),
        );
    }
    let locked = answers.next().unwrap_or_default();
    let probed = answers.next().unwrap_or_default();
    let mut queued = BTreeMap::new();
    for row in answers.next().unwrap_or_default() {
        let lane_at = position_of(&row, 2)?;
        if let Some(&position) = ordinals.get(lane_at) {
            queued.insert(position, row);
        }
    }
    Ok(Read {
        rows,
        clears: by_session,
        queued,
        locked,
        probed,
    })
}

/// The 0-based position of a row's 1-based ordinal in column `column`.
fn position_of(row: &Row, column: usize) -> TxResult<usize> {
    let ordinal: i64 = row.try_get(column)?;
    usize::try_from(ordinal - 1).map_err(|_| {
        a2_store_api::StoreError::corrupt_value("ordinal of a batched completion").into()
    })
}

/// The second round trip: every applied completion's writes and `COMMIT`.
/// Returns whether a work row was made ready.
async fn write(
    tx: &Tx<'_>,
    applied: &[(usize, Applied<'_>)],
    work_rows: &Rows<'_>,
) -> TxResult<bool> {
    let mut sessions = Vec::with_capacity(applied.len());
    let mut consumers = Vec::with_capacity(applied.len());
    let mut lanes = Vec::with_capacity(applied.len());
    let mut indexes = Vec::with_capacity(applied.len());
    let mut attempts = Vec::with_capacity(applied.len());
    let mut slots = Vec::with_capacity(applied.len());
    let mut trims: (Vec<&str>, Vec<&str>, Vec<&str>, Vec<i64>) = Default::default();
    for (_, one) in applied {
        let request = one.item.request;
        let session_id = request.session_id.as_str();
        sessions.push(session_id);
        consumers.push(request.consumer.as_str());
        lanes.push(one.item.lane);
        indexes.push(one.item.index);
        attempts.push(count_to_sql(request.attempt));
        slots.push(one.item.slot);
        if one.trim {
            trims.0.push(session_id);
            trims.1.push(request.consumer.as_str());
            trims.2.push(one.item.lane);
            trims.3.push(one.item.index);
        }
    }
    let writes = ManyCursorWrites::new(
        applied
            .iter()
            .map(|(_, one)| (one.item.request.session_id.as_str(), &one.cursor)),
    );
    let write_params = writes.as_ref().map(ManyCursorWrites::params);
    let record: [&(dyn ToSql + Sync); 5] = [&sessions, &consumers, &lanes, &indexes, &attempts];
    let release: [&(dyn ToSql + Sync); 4] = [&sessions, &consumers, &lanes, &slots];
    let trim: [&(dyn ToSql + Sync); 4] = [&trims.0, &trims.1, &trims.2, &trims.3];
    let work = work_rows.params();
    let mut statements = vec![
        Stmt::new(RECORD_MANY, &record),
        Stmt::new(RELEASE_MANY, &release),
    ];
    if !trims.0.is_empty() {
        statements.push(Stmt::new(TRIM_MANY, &trim));
    }
    if let Some(params) = &write_params {
        statements.push(Stmt::new(PUT_MANY, params));
    }
    // The pairs' work rows, locked in the first round trip.
    Rows::push(&work, &mut statements);
    tx.commit_with(&statements).await?;
    Ok(work_rows.ready)
}
