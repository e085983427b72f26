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
pub(crate) const READY: &str = "SELECT r.session_id FROM unnest($1::text[]) AS k(consumer) \
    CROSS JOIN LATERAL (SELECT w.session_id, w.ready_at FROM work w \
      WHERE w.consumer = k.consumer AND w.ready_at IS NOT NULL AND w.ready_at <= $2 \
        AND NOT (w.session_id = ANY($3)) \
      ORDER BY w.ready_at, w.session_id LIMIT $4) AS r \
    ORDER BY r.ready_at, r.session_id, k.consumer";

/// The ready rows of listed sessions: `$1` sessions, `$2` consumers, `$3`
/// now, `$4` sessions to leave out, `$5` limit; primary-key probes, each
/// session by its earliest ready row.
pub(crate) const READY_LISTED: &str = "SELECT w.session_id FROM work w \
    WHERE w.session_id = ANY($1) AND w.consumer = ANY($2) \
      AND w.ready_at IS NOT NULL AND w.ready_at <= $3 AND NOT (w.session_id = ANY($4)) \
    GROUP BY w.session_id ORDER BY min(w.ready_at), w.session_id LIMIT $5";

/// The earliest ready row of `$1` consumers: one ordered probe of
/// `work_ready` per consumer.
pub(crate) const EARLIEST: &str = "SELECT min(r.ready_at) FROM unnest($1::text[]) AS k(consumer) \
    CROSS JOIN LATERAL (SELECT w.ready_at FROM work w \
      WHERE w.consumer = k.consumer AND w.ready_at IS NOT NULL \
      ORDER BY w.ready_at LIMIT 1) AS r";

/// The earliest ready row of `$2` consumers in `$1` sessions.
pub(crate) const EARLIEST_LISTED: &str = "SELECT min(w.ready_at) FROM work w \
    WHERE w.session_id = ANY($1) AND w.consumer = ANY($2) AND w.ready_at IS NOT NULL";

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
