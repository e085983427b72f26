//! The cursor table's queries shared by several operations: load and store
//! cursor rows, find the head an attempt names, advance a cursor (and a log
//! follower's next head), the fence of causes, pending checks and declared
//! log types.

use std::collections::BTreeMap;

use a2_store_api::log::{self, takes};
use a2_store_api::sql::count_to_sql;
use a2_store_api::{
    dispatch, Cause, ConsumerDeclaration, CursorKind, Dispatch, StoreError, CLEAR_EVENT_TYPE,
};
use tokio_postgres::types::{Json, ToSql};

use crate::db::{
    decode_state, execute, lock_session, query, query_opt, read_session, SessionState, Stmt, Tx,
    READ_SESSION,
};
use crate::error::TxResult;
use crate::rows::{index_of, kind_code, lane_key, slot_key, CursorKey, CursorRow, CURSOR_COLUMNS};

/// Loads one cursor by key; `lock` takes its row lock (`FOR UPDATE`).
pub(crate) async fn load(
    tx: &Tx<'_>,
    session_id: &str,
    consumer: &str,
    lane: &str,
    slot: i64,
    lock: bool,
) -> TxResult<Option<CursorRow>> {
    let lock_clause = if lock { " FOR UPDATE" } else { "" };
    let sql = format!(
        "SELECT {CURSOR_COLUMNS} FROM cursors c WHERE c.session_id = $1 \
         AND c.consumer = $2 AND c.lane = $3 AND c.slot = $4{lock_clause}"
    );
    let row = query_opt(tx, &sql, &[&session_id, &consumer, &lane, &slot]).await?;
    row.map(|row| CursorRow::decode(&row, 0)).transpose()
}

/// Loads the cursor a `(consumer, lane, index)` ref names.
pub(crate) async fn load_ref(
    tx: &Tx<'_>,
    session_id: &str,
    consumer: &str,
    lane: Option<&str>,
    index: u64,
    lock: bool,
) -> TxResult<Option<CursorRow>> {
    let slot = slot_key(lane, index)?;
    load(tx, session_id, consumer, lane_key(lane), slot, lock).await
}

/// The head a completion or failure names: its cursor's consumer and lane,
/// its index, and the session incarnation the request names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Named<'a> {
    pub consumer: &'a str,
    pub lane: Option<&'a str>,
    pub index: u64,
    pub incarnation: Option<u64>,
}

/// The head a completion or failure of `(consumer, lane, index)` names.
pub(crate) struct Attempted {
    /// The session's row: locked before the cursor row by a writer, else
    /// read after it.
    pub state: SessionState,
    /// `index` as stored.
    pub index: i64,
    /// The cursor, locked; `None` when the head is superseded (at or below
    /// the clear, an event whose cursor is gone, or the request names
    /// another incarnation of the session).
    pub cursor: Option<CursorRow>,
    /// With [`attempted_pipelined`]'s `next_queued`: the lane's first
    /// queued index after `index` ([`NEXT_QUEUED`], read after the lock),
    /// for [`advance_in_memory`].
    pub queued: Option<Option<tokio_postgres::Row>>,
}

/// Finds and locks the cursor a completion or failure names, locking the
/// session row first when `lock` (a writer). Without the session lock the
/// clear is read after the cursor row is locked: a clear that touched the
/// row has committed, none can start. `NoSuchEvent` when no event is at
/// `index` (unless the request names another incarnation: superseded).
pub(crate) async fn attempted(
    tx: &Tx<'_>,
    session_id: &str,
    named: Named<'_>,
    lock: bool,
) -> TxResult<Attempted> {
    let Named {
        consumer,
        lane,
        index,
        ..
    } = named;
    let Ok(stored) = i64::try_from(index) else {
        return Err(StoreError::no_such_event(session_id, index).into());
    };
    let locked = if lock {
        Some(lock_session(tx, session_id).await?)
    } else {
        None
    };
    let cursor = load_ref(tx, session_id, consumer, lane, index, true).await?;
    let state = match locked {
        Some(state) => state,
        None => read_session(tx, session_id).await?,
    };
    settle_attempted(tx, session_id, named, stored, state, cursor).await
}

/// [`attempted`] for a claimer (no session lock) in one round trip: the
/// cursor's lock and the session read after it are pipelined (with `BEGIN`
/// when nothing ran yet). A missing cursor costs one more (whether an event
/// is at `index`), and so do declared log types to `refresh`: they are
/// sent once the session read shows the request may refresh them
/// ([`completion_types_refreshed`]). With
/// `next_queued` and a lane, the lane's next queued index after `index` is
/// read in the same round trip (what moving a lane cursor past `index`
/// needs, see [`advance_in_memory`]).
pub(crate) async fn attempted_pipelined(
    tx: &Tx<'_>,
    session_id: &str,
    named: Named<'_>,
    refresh: &TypeRefresh<'_>,
    next_queued: bool,
) -> TxResult<Attempted> {
    let Named {
        consumer,
        lane,
        index,
        ..
    } = named;
    let Ok(stored) = i64::try_from(index) else {
        return Err(StoreError::no_such_event(session_id, index).into());
    };
    let slot = slot_key(lane, index)?;
    let lane_stored = lane_key(lane);
    let load = format!(
        "SELECT {CURSOR_COLUMNS} FROM cursors c WHERE c.session_id = $1 \
         AND c.consumer = $2 AND c.lane = $3 AND c.slot = $4 FOR UPDATE"
    );
    let load_params: [&(dyn ToSql + Sync); 4] = [&session_id, &consumer, &lane_stored, &slot];
    let read_params: [&(dyn ToSql + Sync); 1] = [&session_id];
    let next_params: [&(dyn ToSql + Sync); 4] = [&session_id, &consumer, &lane_stored, &stored];
    let mut statements = vec![
        Stmt::new(&load, &load_params),
        Stmt::new(READ_SESSION, &read_params),
    ];
    let next_queued = next_queued && lane.is_some();
    if next_queued {
        statements.push(Stmt::new(NEXT_QUEUED, &next_params));
    }
    let mut answers = tx.pipeline(&statements).await?;
    let queued = if next_queued {
        Some(answers.get_mut(2).and_then(|rows| rows.drain(..).next()))
    } else {
        None
    };
    let cursor = answers
        .first()
        .and_then(|rows| rows.first())
        .map(|row| CursorRow::decode(row, 0))
        .transpose()?;
    let state = answers
        .get(1)
        .and_then(|rows| rows.first())
        .map(decode_state)
        .transpose()?
        .unwrap_or_default();
    let mut attempted = settle_attempted(tx, session_id, named, stored, state, cursor).await?;
    attempted.queued = queued;
    let refresh_params = refresh.params();
    if !refresh_params.is_empty() && completion_types_refreshed(&attempted.state, named.incarnation)
    {
        let statements: Vec<Stmt<'_>> = refresh_params
            .iter()
            .map(|params| Stmt::new(REFRESH_TYPES, params))
            .collect();
        tx.pipeline(&statements).await?;
    }
    Ok(attempted)
}

/// Whether a completion naming incarnation `requested` of the session read
/// as `state` refreshes its declared log types, as
/// [`log::completion_refreshes_types`] decides (not when it names another
/// incarnation of the session).
pub(crate) fn completion_types_refreshed(state: &SessionState, requested: Option<u64>) -> bool {
    log::completion_refreshes_types(requested, state.exists.then(|| state.incarnation()))
}

/// The end of [`attempted`] and [`attempted_pipelined`]: a head of
/// another incarnation of the session, or at or before the session's
/// clear, has no cursor; a missing cursor is `NoSuchEvent` unless an event
/// is stored at `index` (one more query).
async fn settle_attempted(
    tx: &Tx<'_>,
    session_id: &str,
    named: Named<'_>,
    stored: i64,
    state: SessionState,
    cursor: Option<CursorRow>,
) -> TxResult<Attempted> {
    let index = named.index;
    let cursor = match cursor {
        _ if !state.current(named.incarnation) => None,
        _ if dispatch::cleared(index, index_of(state.clear)?) => None,
        Some(cursor) => Some(cursor),
        None => {
            let exists = query_opt(
                tx,
                "SELECT 1 FROM events WHERE session_id = $1 AND idx = $2",
                &[&session_id, &stored],
            )
            .await?;
            dispatch::without_cursor(session_id, index, exists.is_some())?;
            None
        }
    };
    Ok(Attempted {
        state,
        index: stored,
        cursor,
        queued: None,
    })
}

/// Moves a cursor past its head in memory as [`advance`] does, sending
/// only the statements whose answers decide its next head (a lane's queue,
/// a log follower's next event): none for an event cursor, and none for a
/// lane cursor whose next queued index was read already (`queued`, the
/// [`NEXT_QUEUED`] row after this head; the lane's trim, [`TRIM_LANE`], is
/// then left to the caller). The caller then sends the old head's pin
/// release ([`RELEASE_PINS`], with the key) and the cursor's write
/// ([`PUT_ALL`]), as [`advance`] does. Returns whether the caller must
/// send [`TRIM_LANE`] with the finished head.
pub(crate) async fn advance_in_memory(
    tx: &Tx<'_>,
    session_id: &str,
    cursor: &mut CursorRow,
    queued: Option<Option<&tokio_postgres::Row>>,
) -> TxResult<bool> {
    let Some(done) = cursor.head else {
        return Ok(false);
    };
    cursor.position = done;
    cursor.fresh_dispatch();
    let mut trim = false;
    cursor.head = match cursor.kind {
        CursorKind::Event => None,
        CursorKind::Lane if queued.is_some() => {
            trim = true;
            next_queued(cursor, queued.flatten())?
        }
        CursorKind::Lane => {
            let params: [&(dyn ToSql + Sync); 4] =
                [&session_id, &cursor.consumer, &cursor.lane, &done];
            let answers = tx
                .pipeline(&[
                    Stmt::new(TRIM_LANE, &params),
                    Stmt::new(NEXT_QUEUED, &params),
                ])
                .await?;
            next_queued(cursor, answers.get(1).and_then(|rows| rows.first()))?
        }
        CursorKind::Log => next_log_head(tx, session_id, done, cursor.types.as_deref()).await?,
    };
    Ok(trim)
}

/// The cursor statements that a new connection prepares before its first
/// call (see `crate::warm`).
pub(crate) const HOT_STATEMENTS: [&str; 5] =
    [PUT_ALL, RELEASE_PINS, NEXT_QUEUED, TRIM_LANE, HAS_PENDING];

/// Drops a lane's queued indexes up to the head it finished: `$1` session,
/// `$2` consumer, `$3` lane, `$4` the finished head.
pub(crate) const TRIM_LANE: &str = "DELETE FROM lane_queue WHERE session_id = $1 \
    AND consumer = $2 AND lane = $3 AND idx <= $4";

/// A lane's first queued index after the head it finished, with its
/// not-before time: `$1` session, `$2` consumer, `$3` lane, `$4` the
/// finished head.
pub(crate) const NEXT_QUEUED: &str = "SELECT idx, not_before FROM lane_queue \
    WHERE session_id = $1 AND consumer = $2 AND lane = $3 AND idx > $4 ORDER BY idx LIMIT 1";

/// The lane's next head from [`NEXT_QUEUED`]'s row (`None`: the queue is
/// empty); a scheduled one is busy until its time (`Dispatch::scheduled`).
fn next_queued(cursor: &mut CursorRow, row: Option<&tokio_postgres::Row>) -> TxResult<Option<i64>> {
    let Some(row) = row else {
        return Ok(None);
    };
    cursor.dispatch = Dispatch::scheduled(row.try_get(1)?);
    Ok(Some(row.try_get(0)?))
}

/// The statement of [`load_many`]: `$1` session, `$2`..`$4` the keys'
/// consumers, lanes and slots; `lock` locks the rows (in key order).
pub(crate) fn load_many_sql(lock: bool) -> String {
    let lock_clause = if lock { " FOR UPDATE OF c" } else { "" };
    format!(
        "SELECT {CURSOR_COLUMNS} FROM cursors c \
         JOIN unnest($2::text[], $3::text[], $4::bigint[]) AS k(consumer, lane, slot) \
           ON c.consumer = k.consumer AND c.lane = k.lane AND c.slot = k.slot \
         WHERE c.session_id = $1 ORDER BY c.consumer, c.lane, c.slot{lock_clause}"
    )
}

/// Loads the cursors with the given keys (missing ones are left out).
pub(crate) async fn load_many(
    tx: &Tx<'_>,
    session_id: &str,
    keys: &[CursorKey],
    lock: bool,
) -> TxResult<Vec<CursorRow>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let consumers: Vec<&str> = keys.iter().map(|key| key.0.as_str()).collect();
    let lanes: Vec<&str> = keys.iter().map(|key| key.1.as_str()).collect();
    let slots: Vec<i64> = keys.iter().map(|key| key.2).collect();
    let sql = load_many_sql(lock);
    let rows = query(tx, &sql, &[&session_id, &consumers, &lanes, &slots]).await?;
    rows.iter().map(|row| CursorRow::decode(row, 0)).collect()
}

/// A statement writing whole cursor rows from `$source` (the 18 columns in
/// order): every field overwritten, and the row's `expired` mark cleared.
macro_rules! upsert_cursors {
    ($source:literal) => {
        concat!(
            "INSERT INTO cursors (session_id, consumer, lane, slot, kind, position, head, types, \
               attempt_count, first_claimed_at, last_claimed_at, claim_holder, claim_expires_at, \
               failure_count, last_failed_at, last_failed_attempt, last_error, failed_at) ",
            $source,
            " ON CONFLICT (session_id, consumer, lane, slot) DO UPDATE SET \
               kind = EXCLUDED.kind, position = EXCLUDED.position, head = EXCLUDED.head, \
               types = EXCLUDED.types, attempt_count = EXCLUDED.attempt_count, \
               first_claimed_at = EXCLUDED.first_claimed_at, last_claimed_at = EXCLUDED.last_claimed_at, \
               claim_holder = EXCLUDED.claim_holder, claim_expires_at = EXCLUDED.claim_expires_at, \
               failure_count = EXCLUDED.failure_count, last_failed_at = EXCLUDED.last_failed_at, \
               last_failed_attempt = EXCLUDED.last_failed_attempt, last_error = EXCLUDED.last_error, \
               failed_at = EXCLUDED.failed_at, expired = false"
        )
    };
}

/// Inserts or overwrites a cursor row with every field of `cursor`.
///
/// Clears the row's `expired` mark (a promoted head's claim ran out), as
/// [`PUT_ALL`] does: the expiry written may be a new claim or retry delay,
/// and a head left unpromoted is only promoted again by the next claim,
/// while a mark kept on a new expiry would leave a busy head on the walk.
pub(crate) async fn put(tx: &Tx<'_>, session_id: &str, cursor: &CursorRow) -> TxResult<()> {
    let d = &cursor.dispatch;
    execute(
        tx,
        upsert_cursors!(
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        ),
        &[
            &session_id,
            &cursor.consumer,
            &cursor.lane,
            &cursor.slot,
            &kind_code(cursor.kind),
            &cursor.position,
            &cursor.head,
            &cursor.types.as_ref().map(Json),
            &count_to_sql(d.attempt_count),
            &d.first_claimed_at,
            &d.last_claimed_at,
            &d.claim_holder,
            &d.claim_expires_at,
            &count_to_sql(d.failure_count),
            &d.last_failed_at,
            &d.last_failed_attempt.map(count_to_sql),
            &d.last_error,
            &d.failed_at,
        ],
    )
    .await?;
    Ok(())
}

/// Stores several cursors (inserting or overwriting every field) with one
/// statement, over the columns of [`CursorWrites`]: when a key is given
/// twice, the last one is stored. Rows are written in key order, so
/// concurrent callers lock them in the same order. Clears each row's
/// `expired` mark, as [`put`] does.
pub(crate) const PUT_ALL: &str = upsert_cursors!(
    "SELECT $1, r.* FROM unnest($2::text[], $3::text[], $4::bigint[], $5::smallint[], \
       $6::bigint[], $7::bigint[], $8::jsonb[], $9::bigint[], $10::bigint[], $11::bigint[], \
       $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::text[], \
       $18::bigint[]) AS r"
);

/// The bound columns of [`PUT_ALL`] for several cursors, in key order (the
/// last of a repeated key), so the statement can be sent in a pipeline.
pub(crate) struct CursorWrites<'c> {
    session_id: &'c str,
    consumers: Vec<&'c str>,
    lanes: Vec<&'c str>,
    slots: Vec<i64>,
    kinds: Vec<i16>,
    positions: Vec<i64>,
    heads: Vec<Option<i64>>,
    types: Vec<Option<Json<&'c Vec<String>>>>,
    attempts: Vec<i64>,
    first_claimed: Vec<Option<i64>>,
    last_claimed: Vec<Option<i64>>,
    holders: Vec<Option<&'c str>>,
    expires: Vec<Option<i64>>,
    failures: Vec<i64>,
    last_failed: Vec<Option<i64>>,
    failed_attempts: Vec<Option<i64>>,
    errors: Vec<Option<&'c str>>,
    failed_at: Vec<Option<i64>>,
}

impl<'c> CursorWrites<'c> {
    /// The columns of `cursors`; `None` when there is none.
    pub(crate) fn new(
        session_id: &'c str,
        cursors: impl IntoIterator<Item = &'c CursorRow>,
    ) -> Option<Self> {
        let mut by_key: BTreeMap<(&str, &str, i64), &CursorRow> = BTreeMap::new();
        for cursor in cursors {
            by_key.insert(
                (cursor.consumer.as_str(), cursor.lane.as_str(), cursor.slot),
                cursor,
            );
        }
        if by_key.is_empty() {
            return None;
        }
        Some(Self::of_rows(session_id, by_key.into_values().collect()))
    }

    /// The columns of `rows`, taken in the order given.
    fn of_rows(session_id: &'c str, rows: Vec<&'c CursorRow>) -> Self {
        let column = |field: fn(&CursorRow) -> Option<i64>| -> Vec<Option<i64>> {
            rows.iter().map(|c| field(c)).collect()
        };
        Self {
            session_id,
            consumers: rows.iter().map(|c| c.consumer.as_str()).collect(),
            lanes: rows.iter().map(|c| c.lane.as_str()).collect(),
            slots: rows.iter().map(|c| c.slot).collect(),
            kinds: rows.iter().map(|c| kind_code(c.kind)).collect(),
            positions: rows.iter().map(|c| c.position).collect(),
            heads: column(|c| c.head),
            types: rows.iter().map(|c| c.types.as_ref().map(Json)).collect(),
            attempts: rows
                .iter()
                .map(|c| count_to_sql(c.dispatch.attempt_count))
                .collect(),
            first_claimed: column(|c| c.dispatch.first_claimed_at),
            last_claimed: column(|c| c.dispatch.last_claimed_at),
            holders: rows
                .iter()
                .map(|c| c.dispatch.claim_holder.as_deref())
                .collect(),
            expires: column(|c| c.dispatch.claim_expires_at),
            failures: rows
                .iter()
                .map(|c| count_to_sql(c.dispatch.failure_count))
                .collect(),
            last_failed: column(|c| c.dispatch.last_failed_at),
            failed_attempts: column(|c| c.dispatch.last_failed_attempt.map(count_to_sql)),
            errors: rows
                .iter()
                .map(|c| c.dispatch.last_error.as_deref())
                .collect(),
            failed_at: column(|c| c.dispatch.failed_at),
        }
    }

    /// The parameters of [`PUT_ALL`].
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 18] {
        [
            &self.session_id,
            &self.consumers,
            &self.lanes,
            &self.slots,
            &self.kinds,
            &self.positions,
            &self.heads,
            &self.types,
            &self.attempts,
            &self.first_claimed,
            &self.last_claimed,
            &self.holders,
            &self.expires,
            &self.failures,
            &self.last_failed,
            &self.failed_attempts,
            &self.errors,
            &self.failed_at,
        ]
    }

    /// The first row's columns as scalars, in [`PUT_ALL`]'s order (`$1` the
    /// session, `$2`..`$18` the columns); `None` without rows.
    pub(crate) fn first_row(&self) -> Option<[&(dyn ToSql + Sync); 18]> {
        Some([
            &self.session_id,
            self.consumers.first()?,
            self.lanes.first()?,
            self.slots.first()?,
            self.kinds.first()?,
            self.positions.first()?,
            self.heads.first()?,
            self.types.first()?,
            self.attempts.first()?,
            self.first_claimed.first()?,
            self.last_claimed.first()?,
            self.holders.first()?,
            self.expires.first()?,
            self.failures.first()?,
            self.last_failed.first()?,
            self.failed_attempts.first()?,
            self.errors.first()?,
            self.failed_at.first()?,
        ])
    }
}

/// [`PUT_ALL`] across sessions: `$1` each row's session, `$2`..`$18` the
/// columns of [`CursorWrites`]. Rows are written in key order (session
/// first), so concurrent callers lock them in the same order.
pub(crate) const PUT_MANY: &str = upsert_cursors!(
    "SELECT r.* FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::smallint[], \
       $6::bigint[], $7::bigint[], $8::jsonb[], $9::bigint[], $10::bigint[], $11::bigint[], \
       $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::text[], \
       $18::bigint[]) AS r"
);

/// The bound columns of [`PUT_MANY`]: cursors of several sessions in key
/// order (the last of a repeated key), for one statement of a batch.
pub(crate) struct ManyCursorWrites<'c> {
    sessions: Vec<&'c str>,
    columns: CursorWrites<'c>,
}

impl<'c> ManyCursorWrites<'c> {
    /// The columns of `rows`, each a session and one of its cursors; `None`
    /// when there is none.
    pub(crate) fn new(rows: impl IntoIterator<Item = (&'c str, &'c CursorRow)>) -> Option<Self> {
        let mut by_key: BTreeMap<(&str, &str, &str, i64), (&str, &CursorRow)> = BTreeMap::new();
        for (session_id, cursor) in rows {
            by_key.insert(
                (
                    session_id,
                    cursor.consumer.as_str(),
                    cursor.lane.as_str(),
                    cursor.slot,
                ),
                (session_id, cursor),
            );
        }
        if by_key.is_empty() {
            return None;
        }
        let (sessions, rows): (Vec<&str>, Vec<&CursorRow>) = by_key.into_values().unzip();
        Some(Self {
            sessions,
            columns: CursorWrites::of_rows("", rows),
        })
    }

    /// The parameters of [`PUT_MANY`].
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 18] {
        let mut params = self.columns.params();
        params[0] = &self.sessions;
        params
    }
}

/// The statement of [`release_pins`]: `$1` session, `$2`..`$4` the cursor key.
pub(crate) const RELEASE_PINS: &str =
    "DELETE FROM pins WHERE session_id = $1 AND consumer = $2 AND lane = $3 AND slot = $4";

/// Releases every snapshot pin held by the cursor's current head.
pub(crate) async fn release_pins(
    tx: &Tx<'_>,
    session_id: &str,
    cursor: &CursorRow,
) -> TxResult<()> {
    execute(
        tx,
        RELEASE_PINS,
        &[&session_id, &cursor.consumer, &cursor.lane, &cursor.slot],
    )
    .await?;
    Ok(())
}

/// The next event after `after` a log cursor taking `types` takes (`None`
/// types: every type but the clear marker). One index probe per type.
pub(crate) async fn next_log_head(
    tx: &Tx<'_>,
    session_id: &str,
    after: i64,
    types: Option<&[String]>,
) -> TxResult<Option<i64>> {
    let row = match types {
        None => {
            query_opt(
                tx,
                "SELECT idx FROM events WHERE session_id = $1 AND idx > $2 AND type <> $3 \
                 ORDER BY idx LIMIT 1",
                &[&session_id, &after, &CLEAR_EVENT_TYPE],
            )
            .await?
        }
        Some(types) => {
            // The clear marker is never taken, whatever the declaration says.
            let types: Vec<&str> = types
                .iter()
                .map(String::as_str)
                .filter(|t| takes(None, t))
                .collect();
            if types.is_empty() {
                return Ok(None);
            }
            query_opt(
                tx,
                "SELECT min(n.idx) FROM unnest($3::text[]) AS t(type) \
                 CROSS JOIN LATERAL (SELECT e.idx FROM events e WHERE e.session_id = $1 \
                   AND e.type = t.type AND e.idx > $2 ORDER BY e.idx LIMIT 1) AS n",
                &[&session_id, &after, &types],
            )
            .await?
        }
    };
    match row {
        Some(row) => Ok(row.try_get(0)?),
        None => Ok(None),
    }
}

/// Moves a cursor past its head (releasing the head's pins) to its next head
/// with fresh bookkeeping, and stores it.
pub(crate) async fn advance(tx: &Tx<'_>, session_id: &str, cursor: &mut CursorRow) -> TxResult<()> {
    let Some(done) = cursor.head else {
        return Ok(());
    };
    release_pins(tx, session_id, cursor).await?;
    cursor.position = done;
    cursor.fresh_dispatch();
    cursor.head = match cursor.kind {
        CursorKind::Event => None,
        CursorKind::Lane => {
            execute(
                tx,
                "DELETE FROM lane_queue WHERE session_id = $1 AND consumer = $2 AND lane = $3 \
                 AND idx <= $4",
                &[&session_id, &cursor.consumer, &cursor.lane, &done],
            )
            .await?;
            let row = query_opt(
                tx,
                NEXT_QUEUED,
                &[&session_id, &cursor.consumer, &cursor.lane, &done],
            )
            .await?;
            next_queued(cursor, row.as_ref())?
        }
        CursorKind::Log => next_log_head(tx, session_id, done, cursor.types.as_deref()).await?,
    };
    put(tx, session_id, cursor).await
}

/// The attempt-currency fence of appends and clears
/// ([`dispatch::fence`]): the cause's cursor, locked, must be on the cause's
/// head with its attempt, above the clear and not dead-lettered.
pub(crate) async fn fence(
    tx: &Tx<'_>,
    session_id: &str,
    clear: i64,
    cause: &Cause,
) -> TxResult<()> {
    let clear = index_of(clear)?;
    // A cause at or below the clear, or beyond any index, has no cursor to lock.
    let cursor = if !dispatch::cleared(cause.index, clear) && i64::try_from(cause.index).is_ok() {
        let lane = cause.lane.as_deref();
        load_ref(tx, session_id, &cause.consumer, lane, cause.index, true).await?
    } else {
        None
    };
    let head = cursor.as_ref().map(CursorRow::head_index).transpose()?;
    let named = head
        .zip(cursor.as_ref())
        .map(|(head, c)| (head, &c.dispatch));
    Ok(dispatch::fence(session_id, clear, cause, named)?)
}

/// The consumer names a call serves (`None`: every consumer).
pub(crate) fn served_names(consumers: Option<&[ConsumerDeclaration]>) -> Option<Vec<&str>> {
    consumers.map(|consumers| consumers.iter().map(|c| c.name.as_str()).collect())
}

/// Whether `$1` has a live head of `$2` consumers (`NULL`: any) that no
/// pause in force at `$3` holds (the session's own pauses and the
/// store-wide ones, stored with session `''`), from the work index: a
/// pair's row has a `ready_at` exactly when the pair has a head that is not
/// dead-lettered, and every cursor change rewrites its pair's row in its
/// own transaction (`a2_store_api::work`), before this runs.
pub(crate) const HAS_PENDING: &str = "SELECT EXISTS (SELECT 1 FROM work w \
    WHERE w.session_id = $1 AND w.ready_at IS NOT NULL AND ($2::text[] IS NULL OR w.consumer = ANY($2)) \
      AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.session_id IN ($1, '') \
        AND p.consumer = w.consumer \
        AND (p.until_ms IS NULL OR p.until_ms > $3)))";

/// Whether a served cursor has a head that is not dead-lettered and whose
/// consumer no pause holds at `now` (`pause::hold`), counting this
/// transaction's own cursor changes (its work rows are rewritten first).
///
/// Reads the session's work rows (one per consumer with unfinished heads),
/// so its cost does not grow with the session's finished cursors.
pub(crate) async fn has_pending(
    tx: &Tx<'_>,
    session_id: &str,
    consumers: Option<&[ConsumerDeclaration]>,
    now: i64,
) -> TxResult<bool> {
    let served = served_names(consumers);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&session_id, &served, &now];
    match query_opt(tx, HAS_PENDING, &params).await? {
        Some(row) => Ok(row.try_get(0)?),
        None => Ok(false),
    }
}

/// Gives a loaded log cursor the types its declaration among `consumers`
/// names, as [`refresh_log_types`] did to its row.
pub(crate) fn refresh_loaded_types(
    cursor: &mut CursorRow,
    consumers: Option<&[ConsumerDeclaration]>,
) {
    if cursor.kind != CursorKind::Log {
        return;
    }
    let declared = consumers
        .unwrap_or_default()
        .iter()
        .filter(|c| c.name == cursor.consumer)
        .find_map(|c| c.log.as_ref().filter(|log| log.lane == cursor.lane));
    if let Some(log) = declared {
        cursor.types = log.types.clone();
    }
}

/// The statement of [`refresh_log_types`]: `$1` session, `$2` consumer,
/// `$3` lane, `$4` types (`NULL`: every type). Writes (and locks) the row
/// only when its types differ.
pub(crate) const REFRESH_TYPES: &str = "UPDATE cursors SET types = $4 WHERE session_id = $1 \
    AND consumer = $2 AND lane = $3 AND slot = 0 AND kind = 2 AND types IS DISTINCT FROM $4 \
    RETURNING 1";

/// One declared log consumer's refresh: its name, lane and types.
type LogRefresh<'c> = (&'c str, &'c str, Option<Json<&'c Vec<String>>>);

/// The bound values of [`REFRESH_TYPES`], one statement per declared log
/// consumer, so a call can send them in a pipeline.
pub(crate) struct TypeRefresh<'c> {
    session_id: &'c str,
    logs: Vec<LogRefresh<'c>>,
}

impl<'c> TypeRefresh<'c> {
    /// The refreshes the declarations `consumers` ask for.
    pub(crate) fn new(session_id: &'c str, consumers: Option<&'c [ConsumerDeclaration]>) -> Self {
        let logs = consumers
            .unwrap_or_default()
            .iter()
            .filter_map(|consumer| {
                let log = consumer.log.as_ref()?;
                Some((
                    consumer.name.as_str(),
                    log.lane.as_str(),
                    log.types.as_ref().map(Json),
                ))
            })
            .collect();
        Self { session_id, logs }
    }

    /// The parameters of each [`REFRESH_TYPES`] statement, in declaration order.
    pub(crate) fn params(&self) -> Vec<[&(dyn ToSql + Sync); 4]> {
        self.logs
            .iter()
            .map(|(name, lane, types)| {
                let params: [&(dyn ToSql + Sync); 4] = [&self.session_id, name, lane, types];
                params
            })
            .collect()
    }
}

/// Refreshes the types of the existing log cursors the declarations name;
/// the current head is kept, the new types apply from the next advance.
pub(crate) async fn refresh_log_types(
    tx: &Tx<'_>,
    session_id: &str,
    consumers: Option<&[ConsumerDeclaration]>,
) -> TxResult<()> {
    let refresh = TypeRefresh::new(session_id, consumers);
    for params in refresh.params() {
        execute(tx, REFRESH_TYPES, &params).await?;
    }
    Ok(())
}
