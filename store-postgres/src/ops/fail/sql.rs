//! The statement of `redrive_all` that finds the dead letters to redrive.
//!
//! A file of its own under `fail.rs`, with nothing but `std`, so the tests
//! can include it and `EXPLAIN` the very statement (`tests/redrive_all.rs`).
//! Every value is a bound parameter.

/// The dead letters above their session's clear matching a bulk redrive's
/// filters, in `order::compare_redriven` order, found through
/// `cursors_dead` (only dead letters are read, whatever the number of
/// cursors and sessions): `$1` consumer, `$2` session, `$3` lane, `$4` dead
/// since, `$5` dead before (each `NULL`: no filter), `$6` the sessions to
/// look in (`NULL`: every one), `$7` how many. `columns` is the select list
/// (`c` is `cursors`, `s` is `sessions`); `lock` locks the cursor rows.
pub(crate) fn bulk(columns: &str, lock: bool) -> String {
    let lock_clause = if lock { " FOR UPDATE OF c" } else { "" };
    format!(
        "SELECT {columns} FROM cursors c \
         JOIN sessions s ON s.session_id = c.session_id \
         WHERE c.head IS NOT NULL AND c.failed_at IS NOT NULL AND c.head > s.clear_index \
           AND ($1::text IS NULL OR c.consumer = $1) AND ($2::text IS NULL OR c.session_id = $2) \
           AND ($3::text IS NULL OR c.lane = $3) AND ($4::bigint IS NULL OR c.failed_at >= $4) \
           AND ($5::bigint IS NULL OR c.failed_at < $5) \
           AND ($6::text[] IS NULL OR c.session_id = ANY($6)) \
         ORDER BY c.session_id, c.head, c.consumer, c.lane, c.slot LIMIT $7{lock_clause}"
    )
}
