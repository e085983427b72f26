//! The statements that find work across sessions, over the `work` table
//! (schema version 7): `work_ready (consumer, ready_at, session_id) WHERE
//! ready_at IS NOT NULL` serves the fairness order, `work_listed (consumer,
//! session_id)` the listing, the primary key `(session_id, consumer)` the
//! session lists.
//!
//! A file of its own under `work.rs`, with nothing but `std`, so the tests
//! can include it and `EXPLAIN` the very statements (`tests/work.rs`). Every
//! value is a bound parameter.

/// The ready rows of every session: `$1` served consumers, `$2` now, `$3`
/// sessions to leave out, `$4` how many sessions are wanted. Per consumer,
/// its first `$4` ready rows in `(ready_at, session_id)` order (an ordered
/// range scan of `work_ready`), merged in fairness order. Enough: a session
/// among the first `$4` overall is among the first `$4` of the consumer of
/// its earliest row.
///
/// Pairs a pause in force at `$2` holds are left out (`pause::hold`): a
/// consumer paused store-wide (session `''` in `pauses`) is not scanned at
/// all, a row of a session where it is paused is passed over (one `pauses`
/// primary-key probe per row read). Work rows are not changed by pauses.
pub(crate) const READY: &str = concat!(
    ready_rows!(),
    " ORDER BY r.ready_at, r.session_id, k.consumer"
);

/// The rows of [`READY`], unordered: `session_id`, `ready_at`, `consumer`.
macro_rules! ready_rows {
    () => {
        "SELECT r.session_id, r.ready_at, k.consumer FROM unnest($1::text[]) AS k(consumer) \
    CROSS JOIN LATERAL (SELECT w.session_id, w.ready_at FROM work w \
      WHERE w.consumer = k.consumer AND w.ready_at IS NOT NULL AND w.ready_at <= $2 \
        AND NOT (w.session_id = ANY($3)) \
        AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.session_id = w.session_id \
          AND p.consumer = k.consumer AND (p.until_ms IS NULL OR p.until_ms > $2)) \
      ORDER BY w.ready_at, w.session_id LIMIT $4) AS r \
    WHERE NOT EXISTS (SELECT 1 FROM pauses p WHERE p.session_id = '' \
      AND p.consumer = k.consumer AND (p.until_ms IS NULL OR p.until_ms > $2))"
    };
}
use ready_rows;

/// [`READY`] and, only when it finds no row, [`EARLIEST`], in one
/// statement (same parameters): rows `(session_id, ready_at, consumer,
/// NULL)` in fairness order, or one row `(NULL, NULL, NULL, earliest)`. The
/// earliest probe is an init plan under a one-time filter, so it runs only
/// when nothing is ready.
pub(crate) const READY_OR_EARLIEST: &str = concat!(
    "WITH ready AS MATERIALIZED (",
    ready_rows!(),
    ") SELECT session_id, ready_at, consumer, NULL::bigint FROM ready \
    UNION ALL SELECT NULL, NULL, NULL, (",
    earliest!(),
    ") WHERE NOT EXISTS (SELECT 1 FROM ready) ORDER BY 2, 1, 3"
);

/// The ready rows of listed sessions: `$1` sessions, `$2` consumers, `$3`
/// now, `$4` sessions to leave out, `$5` limit; primary-key probes, each
/// session by its earliest ready row. Pairs a pause in force at `$3` holds
/// (the session's or a store-wide one) are left out.
pub(crate) const READY_LISTED: &str = ready_listed_rows!();

/// The rows of [`READY_LISTED`]: `session_id` and its earliest ready
/// `ready_at`, in fairness order.
macro_rules! ready_listed_rows {
    () => {
        "SELECT w.session_id, min(w.ready_at) AS ready_at FROM work w \
    WHERE w.session_id = ANY($1) AND w.consumer = ANY($2) \
      AND w.ready_at IS NOT NULL AND w.ready_at <= $3 AND NOT (w.session_id = ANY($4)) \
      AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.session_id IN (w.session_id, '') \
        AND p.consumer = w.consumer AND (p.until_ms IS NULL OR p.until_ms > $3)) \
    GROUP BY w.session_id ORDER BY min(w.ready_at), w.session_id LIMIT $5"
    };
}
use ready_listed_rows;

/// [`READY_LISTED`] and, only when it finds no row, [`EARLIEST_LISTED`],
/// in one statement (same parameters), as [`READY_OR_EARLIEST`]: rows
/// `(session_id, ready_at, NULL)` or one row `(NULL, NULL, earliest)`.
pub(crate) const READY_OR_EARLIEST_LISTED: &str = concat!(
    "WITH ready AS MATERIALIZED (",
    ready_listed_rows!(),
    ") SELECT session_id, ready_at, NULL::bigint FROM ready \
    UNION ALL SELECT NULL, NULL, (",
    earliest_listed!(),
    ") WHERE NOT EXISTS (SELECT 1 FROM ready) ORDER BY 2, 1"
);

/// The earliest time a ready row of `$1` consumers may be claimed, at `$2`
/// now: per consumer, one ordered probe of `work_ready` for its first row
/// in a session where it is not paused, and its rows in the sessions where
/// a pause with an end holds it (`pauses_by_consumer`, then primary-key
/// probes). A pair held by an open-ended pause (`Hold::Indefinite`) is
/// left out, one held until an end counts from `max(ready_at, end)` (the
/// latest end in force of its store-wide and session pauses), so a waiter
/// wakes when a pause ends.
pub(crate) const EARLIEST: &str = earliest!();

/// The text of [`EARLIEST`].
macro_rules! earliest {
    () => {
        "SELECT min(r.at) FROM unnest($1::text[]) AS k(consumer) \
    CROSS JOIN LATERAL (SELECT max(p.until_ms) AS until_ms, \
        bool_or(p.until_ms IS NULL) AS open FROM pauses p \
      WHERE p.session_id = '' AND p.consumer = k.consumer \
        AND (p.until_ms IS NULL OR p.until_ms > $2)) AS g \
    CROSS JOIN LATERAL ( \
      (SELECT GREATEST(w.ready_at, g.until_ms) AS at FROM work w \
        WHERE w.consumer = k.consumer AND w.ready_at IS NOT NULL \
          AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.session_id = w.session_id \
            AND p.consumer = k.consumer AND (p.until_ms IS NULL OR p.until_ms > $2)) \
        ORDER BY w.ready_at LIMIT 1) \
      UNION ALL \
      (SELECT GREATEST(w.ready_at, g.until_ms, p.until_ms) FROM pauses p \
        JOIN work w ON w.session_id = p.session_id AND w.consumer = p.consumer \
        WHERE p.consumer = k.consumer AND p.session_id <> '' AND p.until_ms > $2 \
          AND w.ready_at IS NOT NULL)) AS r \
    WHERE g.open IS NOT TRUE"
    };
}
use earliest;

/// The earliest time a ready row of `$2` consumers in `$1` sessions may be
/// claimed, at `$3` now, as [`EARLIEST`] counts it.
pub(crate) const EARLIEST_LISTED: &str = earliest_listed!();

/// The text of [`EARLIEST_LISTED`].
macro_rules! earliest_listed {
    () => {
        "SELECT min(GREATEST(w.ready_at, h.until_ms)) \
    FROM work w CROSS JOIN LATERAL (SELECT max(p.until_ms) AS until_ms, \
        bool_or(p.until_ms IS NULL) AS open FROM pauses p \
      WHERE p.session_id IN (w.session_id, '') AND p.consumer = w.consumer \
        AND (p.until_ms IS NULL OR p.until_ms > $3)) AS h \
    WHERE w.session_id = ANY($1) AND w.consumer = ANY($2) AND w.ready_at IS NOT NULL \
      AND h.open IS NOT TRUE"
    };
}
use earliest_listed;

/// Up to `$3` sessions after `$2` (or from the first, `NULL`: every id sorts
/// after `''`, an empty id is invalid) with a row of `$1` consumers, by id,
/// each with its earliest `ready_at`: per consumer a range scan of
/// `work_listed` starting at `$2`, merged.
pub(crate) const LISTED_AFTER: &str = "SELECT r.session_id, min(r.ready_at) \
    FROM unnest($1::text[]) AS k(consumer) \
    CROSS JOIN LATERAL (SELECT w.session_id, w.ready_at FROM work w \
      WHERE w.consumer = k.consumer AND w.session_id > COALESCE($2::text, '') \
      ORDER BY w.session_id LIMIT $3) AS r \
    GROUP BY r.session_id ORDER BY r.session_id LIMIT $3";

/// `claim_work`'s pick of the next sessions for one targeted consumer,
/// for a claim of one or several sessions in one transaction
/// (`claims::batch`): `$1` (an array of that one name), `$2` now, `$3`
/// sessions to leave out, `$4` how many sessions are wanted (at most
/// 1,000, `MAX_WORK_LIMIT`). The consumer's first `$4` free ready rows in
/// fairness order (an ordered scan of `work_ready`, `(ready_at,
/// session_id)`) of sessions where no pause in force holds them (the
/// store-wide pause is an uncorrelated one-time filter: correlated, it was
/// planned as a hash anti-join under a sort of every ready row), locked
/// `FOR UPDATE SKIP LOCKED`, so rows other claimers hold are passed over
/// instead of read and found held. Each row locked is its session's only
/// served work row, what [`TRY_LOCK`] would lock.
///
/// `$4` cuts an inner pick of at most 1,000 rows written out (the work
/// limit): the executor pulls rows, and so locks them, only as the outer
/// `LIMIT` asks, while the planner plans the inner ordered scan of
/// `work_ready` for a known bound (with `LIMIT $4` alone a generic plan
/// assumes a tenth of the table and may sort every ready row).
///
/// One row always: the sessions picked, in fairness order (`text[]`,
/// empty when none), and the transaction-local `a2.claim_sessions` set to
/// them, which the claim's first statements, sent after it in the same
/// round trip, read in place of a sessions parameter
/// (`claims::sql::PICKED_SESSIONS`); then, only when it picked none (both
/// are init plans behind a `CASE`, run only then), whether a ready row (any
/// session but `$3`) is left, which other claimers then hold, and
/// [`EARLIEST`]'s answer.
pub(crate) const PICK_MANY: &str = concat!(
    "WITH picked AS MATERIALIZED (SELECT x.session_id, x.ready_at FROM ( \
      SELECT w.session_id, w.ready_at FROM work w \
      WHERE w.consumer = ($1::text[])[1] AND w.ready_at IS NOT NULL AND w.ready_at <= $2 \
        AND NOT (w.session_id = ANY($3)) \
        AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.session_id = w.session_id \
          AND p.consumer = ($1::text[])[1] AND (p.until_ms IS NULL OR p.until_ms > $2)) \
        AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.session_id = '' \
          AND p.consumer = ($1::text[])[1] AND (p.until_ms IS NULL OR p.until_ms > $2)) \
      ORDER BY w.ready_at, w.session_id LIMIT 1000 FOR UPDATE OF w SKIP LOCKED) AS x LIMIT $4), \
    listed AS MATERIALIZED (SELECT COALESCE(array_agg(p.session_id ORDER BY p.ready_at, p.session_id), \
      '{}'::text[]) AS ids FROM picked p) \
    SELECT l.ids, set_config('a2.claim_sessions', l.ids::text, true), \
      CASE WHEN cardinality(l.ids) = 0 THEN EXISTS (",
    ready_rows!(),
    ") END, CASE WHEN cardinality(l.ids) = 0 THEN (",
    earliest!(),
    ") END FROM listed l"
);

/// Locks what it can of a session's rows (`$1`) of `$2` consumers (`NULL`:
/// every one), in consumer order, passing over rows another transaction
/// holds, and counts the rows there are, locked or not, in one statement:
/// rows `(consumer, ready_at, NULL, NULL)` for the rows locked, then one
/// row `(NULL, NULL, count, held)` (read by `TryLocked::read` in
/// `ops::work`, which needs only the first three columns). Only when one
/// of those rows is ready by `$3` (now) in the statement's snapshot (an
/// uncorrelated `EXISTS`: a one-time filter); else nothing is locked and
/// the count is 0. A session another claimer served since it was read as
/// ready has nothing to claim (the work index's invariant), and locking
/// its rows would only cost a transaction id and WAL for a transaction
/// that is rolled back. The count's row also sets (and answers as `held`)
/// the transaction-local `a2.claim_held`: whether a row was passed over,
/// which keeps the statements sent after it in the same round trip from
/// locking any head (`claims::sql::UNCONTENDED`).
pub(crate) const TRY_LOCK: &str = concat!(
    "WITH locked AS (SELECT consumer, ready_at FROM work WHERE session_id = $1 \
    AND ($2::text[] IS NULL OR consumer = ANY($2)) AND ",
    ready_by!(),
    " ORDER BY consumer FOR UPDATE SKIP LOCKED) \
    SELECT consumer, ready_at, NULL::bigint, NULL::text FROM locked \
    UNION ALL SELECT NULL, NULL, v.n, \
      set_config('a2.claim_held', (v.n > (SELECT count(*) FROM locked))::text, true) \
    FROM (SELECT count(*) AS n FROM work WHERE session_id = $1 \
      AND ($2::text[] IS NULL OR consumer = ANY($2)) AND ",
    ready_by!(),
    ") AS v"
);

/// The condition [`TRY_LOCK`] locks and counts under: one of session
/// `$1`'s rows of `$2` consumers is ready by `$3`.
macro_rules! ready_by {
    () => {
        "EXISTS (SELECT 1 FROM work r WHERE r.session_id = $1 \
        AND ($2::text[] IS NULL OR r.consumer = ANY($2)) AND r.ready_at <= $3)"
    };
}
use ready_by;
