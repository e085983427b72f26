//! The statements of a claim: promoting the busy heads whose expiry passed,
//! walking the ready heads, and the `Busy` answer.
//!
//! A file of its own under `claims.rs`, with nothing but `std`, so the tests
//! can include this file and `EXPLAIN` the very statements a claim runs
//! (`tests/claim_walk.rs`). Every value is a bound parameter; the walk and
//! the `Busy` answer take `$1` session, `$2` through (or `NULL`), `$3`
//! served consumers (or `NULL`), `$4`..`$6` the excluded `(consumer, lane,
//! slot)` keys, `$7` now, and for the walk `$8` the limit (or `NULL`).
//!
//! A live head (set, not dead-lettered) is on exactly one of two partial
//! indexes (schema version 6): `cursors_ready` holds the idle heads and the
//! promoted ones (`expired`), `cursors_busy` holds every head with an expiry,
//! keyed by `(session_id, expired, claim_expires_at)`, so the unpromoted
//! busy heads come first in expiry order. A claim promotes the unpromoted
//! heads whose expiry has passed, then walks `cursors_ready`: heads still
//! busy are never on the walk, however many are in flight.

/// The heads a claim may take: live, within `through`, of a served
/// consumer, not excluded. (`c` is `cursors`.)
pub(crate) const CANDIDATES: &str = "c.session_id = $1 AND c.head IS NOT NULL \
    AND c.failed_at IS NULL \
    AND ($2::bigint IS NULL OR c.head <= $2) \
    AND ($3::text[] IS NULL OR c.consumer = ANY($3)) \
    AND NOT EXISTS (SELECT 1 FROM unnest($4::text[], $5::text[], $6::bigint[]) \
      AS x(consumer, lane, slot) \
      WHERE x.consumer = c.consumer AND x.lane = c.lane AND x.slot = c.slot)";

/// A candidate whose consumer no pause in force at `$7` holds in session
/// `$1` (its own pauses and the store-wide ones, stored with session
/// `''`): `pause::hold` is `Free`. An anti-join probing the `pauses` primary
/// key, which keeps the walk an ordered scan of `cursors_ready` and the
/// `Busy` probes ordered scans of `cursors_busy`, pauses or not (an
/// uncorrelated array of the held consumers made the planner sort every
/// busy head instead).
pub(crate) const UNHELD: &str = "NOT EXISTS (SELECT 1 FROM pauses p \
    WHERE p.session_id IN ($1, '') AND p.consumer = c.consumer \
      AND (p.until_ms IS NULL OR p.until_ms > $7))";

/// The predicate of `cursors_ready` beyond a live head: idle, or promoted.
pub(crate) const READY: &str = "(c.claim_expires_at IS NULL OR c.expired)";

/// A ready head whose claim (if any) is over at `$7`. A promoted head whose
/// expiry is in the future again (the clock moved back) is busy.
pub(crate) const FREE: &str = "(c.claim_expires_at IS NULL OR c.claim_expires_at <= $7)";

/// The text of [`UNCONTENDED`].
macro_rules! uncontended {
    () => {
        "COALESCE(current_setting('a2.claim_held', true), '') <> 'true'"
    };
}

/// Whether this transaction has not found the session's work rows held by
/// another claimer: `claim_work`'s lock of them (`TRY_LOCK` in
/// `ops::work::sql`) sets the transaction-local `a2.claim_held` to `true` when
/// it passed over one. The promotion's selection ([`DUE`]) and the walk
/// are sent in the same round trip after that lock, and take row locks
/// without waiting; gated by this (a one-time filter, read once per
/// statement), a claimer leaving the session to its holder locks none of
/// its heads, which the holder's own walk would otherwise skip (the
/// holder then took nothing and answered `Busy`, and both claimers left
/// the work for later). Outside `claim_work` the setting is never `true`.
pub(crate) const UNCONTENDED: &str = uncontended!();

/// Selects and locks the session's busy heads whose claim or retry delay
/// expired at or before `$2` (`$1` the session), not promoted yet, from the
/// front of `cursors_busy`; [`PROMOTE`] then marks them.
///
/// Every such head of the session, not only this claim's candidates: each
/// is promoted once, and a head no claimer serves does not stay at the
/// front for every later claim to step over. It takes only the row locks it
/// gets without waiting (`SKIP LOCKED`): a head another transaction holds
/// (completing, renewing or claiming it) is left as it is, and that
/// transaction's commit decides its state. So promotion never waits and
/// adds no lock wait or deadlock to a claim. When a commit changed a row
/// since the statement's snapshot, the lock re-checks the `WHERE` on the
/// newest version, so a head completed or renewed meanwhile is left alone.
///
/// Like the walk, it locks nothing in a transaction that found the
/// session's work rows held by another claimer ([`UNCONTENDED`]).
pub(crate) const DUE: &str = concat!(
    "SELECT c.consumer, c.lane, c.slot FROM cursors c \
    WHERE c.session_id = $1 AND c.head IS NOT NULL AND c.failed_at IS NULL \
      AND c.claim_expires_at IS NOT NULL AND NOT c.expired AND c.claim_expires_at <= $2 AND ",
    uncontended!(),
    " ORDER BY c.claim_expires_at FOR UPDATE OF c SKIP LOCKED"
);

/// Marks the cursors [`DUE`] locked as promoted, which moves them from
/// `cursors_busy`'s unpromoted part to `cursors_ready`: `$1` session, `$2`,
/// `$3`, `$4` their consumers, lanes and slots. A separate statement (not
/// a join with the selection in one) so its snapshot, taken after the
/// locks, sees every row it marks, and each is one primary-key probe.
pub(crate) const PROMOTE: &str = "UPDATE cursors c SET expired = true \
    FROM unnest($2::text[], $3::text[], $4::bigint[]) AS k(consumer, lane, slot) \
    WHERE c.session_id = $1 AND c.consumer = k.consumer AND c.lane = k.lane AND c.slot = k.slot";

/// The walk: up to `$8` free ready candidates in claim order, locked, each
/// joined to its event; rows another transaction holds are skipped. The
/// row selected is re-checked against the newest committed version, so a
/// head claimed or completed meanwhile is not taken. `columns` is the
/// select list (`c` is `cursors`, `e` is `events`).
pub(crate) fn walk(columns: &str) -> String {
    format!(
        "SELECT {columns} FROM cursors c \
         JOIN events e ON e.session_id = c.session_id AND e.idx = c.head \
         WHERE {CANDIDATES} AND {UNHELD} AND {READY} AND {FREE} AND {UNCONTENDED} \
         ORDER BY c.head, c.consumer, c.lane LIMIT $8 FOR UPDATE OF c SKIP LOCKED"
    )
}

/// The text of [`PICKED_SESSIONS`].
macro_rules! picked_sessions {
    () => {
        "COALESCE($1::text[], NULLIF(current_setting('a2.claim_sessions', true), '')::text[])"
    };
}

/// The sessions of a batch claim's statements (`claims::batch`): `$1` (a
/// `text[]`) when bound, else the transaction-local `a2.claim_sessions`
/// that `claim_work`'s batch pick (`ops::work::sql::PICK_MANY`) set, sent
/// before them in the same round trip (none when it is unset or `''`).
pub(crate) const PICKED_SESSIONS: &str = picked_sessions!();

/// `sql` (one of [`DUE`], [`walk`]) run for each of several sessions
/// ([`PICKED_SESSIONS`], in their order): every use of `$1` as the session
/// reads the session of a `LATERAL` over them, so each session is the same
/// ordered, limited, `SKIP LOCKED` scan of its own as in a claim of one.
/// Each row is `sql`'s columns, then the session (so the columns are where
/// a claim of one reads them).
pub(crate) fn over_sessions(sql: &str) -> String {
    let inner = sql
        .replace("c.session_id = $1 ", "c.session_id = s.session_id ")
        .replace(
            "p.session_id IN ($1, '')",
            "p.session_id IN (s.session_id, '')",
        );
    format!(
        "SELECT x.*, s.session_id FROM unnest({PICKED_SESSIONS}) AS s(session_id) \
         CROSS JOIN LATERAL ({inner}) AS x"
    )
}

/// [`PROMOTE`] across sessions: marks the cursors [`DUE`] locked (run over
/// several sessions) as promoted, `$1`..`$4` their sessions, consumers,
/// lanes and slots.
pub(crate) const PROMOTE_MANY: &str = "UPDATE cursors c SET expired = true \
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS k(session_id, consumer, lane, slot) \
    WHERE c.session_id = k.session_id AND c.consumer = k.consumer AND c.lane = k.lane \
      AND c.slot = k.slot";

/// The session rows of `$1` sessions without a lock, as `db::READ_SESSION`
/// reads one (its [`STATE_WIDTH`](crate::db::STATE_WIDTH) columns), each with its session
/// last; a session never written has no row.
pub(crate) const READ_SESSIONS: &str =
    "SELECT head, clear_index, reclaimed_through, incarnation, last_activity IS NOT NULL, \
    session_id \
    FROM sessions WHERE session_id = ANY($1)";

/// Whether session `$1` has a work row with a time (`ready_at` set) of a
/// served consumer (`$2`, `NULL`: any): one probe of the primary key. None
/// means no head of those consumers is claimable, busy or scheduled (the
/// work index's invariant): a claim finding none answers `Settled`.
pub(crate) const ANY_WORK: &str = "SELECT EXISTS (SELECT 1 FROM work \
    WHERE session_id = $1 AND ready_at IS NOT NULL AND ($2::text[] IS NULL OR consumer = ANY($2)))";

/// The `Busy` answer once a claim took nothing: `$7` when a free ready
/// candidate is left (another transaction holds it locked, it may be free
/// now), else the earliest of the unpromoted busy heads' expiries (`$7` for
/// one already over: it could not be promoted because another transaction
/// holds it) and the promoted heads' expiries still in the future (the clock
/// moved back); `NULL` when there is no candidate at all (settled).
///
/// Each part is an ordered `LIMIT 1` probe of one partial index, which keeps
/// the planner on it (a bare `EXISTS` or `min()` can be planned as a scan of
/// every finished cursor).
///
/// Heads a pause holds are none of those: an open-ended pause hides them
/// (`Hold::hides`), and the candidates of a consumer held only by pauses
/// with an end are busy until the latest end at least
/// (`Dispatch::busy_until_held`: `GREATEST` of their own expiry, when it is
/// later, and that end), the last part, which reads no cursor when no
/// pause is in force.
pub(crate) fn retry_at() -> String {
    format!(
        "SELECT CASE WHEN {ready} THEN $7 ELSE {later} END",
        ready = ready_left(),
        later = later_free()
    )
}

/// Whether a free ready candidate is left (another transaction may hold
/// it locked): the first part of [`retry_at`].
fn ready_left() -> String {
    format!(
        "EXISTS (SELECT 1 FROM (SELECT 1 FROM cursors c \
             WHERE {CANDIDATES} AND {UNHELD} AND {READY} AND {FREE} \
             ORDER BY c.head, c.consumer, c.lane LIMIT 1) AS ready)"
    )
}

/// The earliest time a busy candidate frees (`NULL`: none): the rest of
/// [`retry_at`], when no free ready candidate is left.
fn later_free() -> String {
    format!(
        "LEAST( \
             (SELECT GREATEST(c.claim_expires_at, $7) FROM cursors c WHERE {CANDIDATES} \
               AND {UNHELD} AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
               ORDER BY c.claim_expires_at LIMIT 1), \
             (SELECT c.claim_expires_at FROM cursors c WHERE {CANDIDATES} \
               AND {UNHELD} AND c.claim_expires_at IS NOT NULL AND c.expired \
               AND c.claim_expires_at > $7 \
               ORDER BY c.claim_expires_at LIMIT 1), \
             (SELECT min(x.at) \
               FROM (SELECT p.consumer, max(p.until_ms) AS until_ms FROM pauses p \
                 WHERE p.session_id IN ($1, '') AND (p.until_ms IS NULL OR p.until_ms > $7) \
                 GROUP BY p.consumer HAVING bool_and(p.until_ms IS NOT NULL)) AS h \
               CROSS JOIN LATERAL (SELECT GREATEST(c.claim_expires_at, h.until_ms) AS at \
                 FROM cursors c WHERE {CANDIDATES} AND c.consumer = h.consumer) AS x))"
    )
}

/// The empty claim's answer, sent with the walk in the claim's first round
/// trip (the same parameters as [`retry_at`]), so a claim that finds
/// nothing needs no second one when it has nothing to write. One row: `ready`
/// (a free ready candidate is left: the claim may not be empty, and nothing
/// else is computed), then [`retry_at`]'s answer; and, unless `ready`, one
/// row per served consumer (`$3`, or `NULL`: those with a work row, as
/// `rewrite_work` takes them) with its stored work row (whether there is
/// one, its `ready_at`) and the summary of its heads as `rewrite_work`
/// (schema version 11) takes it: whether it has a claimable head, the
/// earliest end of a busy one and whether it has a dead letter, each one
/// ordered `LIMIT 1` probe of a partial index, so each count is 0 or 1 (the
/// row depends on nothing more). The caller skips the rewrite only when
/// `WorkSummary::served_row` of every summary is the row stored: then the
/// claim changed nothing and its rewrite would change nothing.
///
/// All in one statement, so the answer, the rows and the summaries are of
/// one snapshot. The summary's probes are gated by `ready` (a one-time
/// filter: a claim that walks a backlog never probes it).
pub(crate) fn empty_answer() -> String {
    format!(
        "WITH e AS MATERIALIZED (SELECT {ready} AS ready), \
         names AS ( \
           SELECT x.consumer FROM unnest($3::text[]) AS x(consumer) \
           UNION SELECT w.consumer FROM work w WHERE w.session_id = $1 AND $3::text[] IS NULL), \
         probed AS MATERIALIZED ( \
           SELECT names.consumer, \
             COALESCE((SELECT true FROM cursors c WHERE c.session_id = $1 \
                 AND c.head IS NOT NULL AND c.failed_at IS NULL \
                 AND (c.claim_expires_at IS NULL OR c.expired) AND c.consumer = names.consumer \
                 AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= $7) \
               ORDER BY c.head LIMIT 1), \
               (SELECT true FROM cursors c WHERE c.session_id = $1 \
                 AND c.head IS NOT NULL AND c.failed_at IS NULL \
                 AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
                 AND c.claim_expires_at <= $7 AND c.consumer = names.consumer \
               ORDER BY c.claim_expires_at LIMIT 1), false) AS claimable, \
             LEAST( \
               (SELECT c.claim_expires_at FROM cursors c WHERE c.session_id = $1 \
                 AND c.head IS NOT NULL AND c.failed_at IS NULL \
                 AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
                 AND c.claim_expires_at > $7 AND c.consumer = names.consumer \
               ORDER BY c.claim_expires_at LIMIT 1), \
               (SELECT c.claim_expires_at FROM cursors c WHERE c.session_id = $1 \
                 AND c.head IS NOT NULL AND c.failed_at IS NULL \
                 AND c.claim_expires_at IS NOT NULL AND c.expired \
                 AND c.claim_expires_at > $7 AND c.consumer = names.consumer \
               ORDER BY c.claim_expires_at LIMIT 1)) AS next_expiry, \
             COALESCE((SELECT true FROM cursors c WHERE c.session_id = $1 \
                 AND c.head IS NOT NULL AND c.failed_at IS NOT NULL \
                 AND c.consumer = names.consumer \
               ORDER BY c.head LIMIT 1), false) AS dead \
           FROM names WHERE NOT (SELECT e.ready FROM e)) \
         SELECT e.ready, CASE WHEN e.ready THEN $7 ELSE {later} END, \
           n.consumer::text, n.stored, n.ready_at, n.claimable, n.busy, n.dead, n.next_expiry \
         FROM e LEFT JOIN ( \
           SELECT names.consumer, w.consumer IS NOT NULL AS stored, w.ready_at, \
             COALESCE(s.claimable::int::bigint, 0) AS claimable, \
             COALESCE((s.next_expiry IS NOT NULL)::int::bigint, 0) AS busy, \
             COALESCE(s.dead::int::bigint, 0) AS dead, s.next_expiry \
           FROM names LEFT JOIN work w ON w.session_id = $1 AND w.consumer = names.consumer \
             LEFT JOIN probed s ON s.consumer = names.consumer) AS n ON NOT e.ready",
        ready = ready_left(),
        later = later_free()
    )
}

/// The probes of one kind of head of [`SERVED_PROBE`]: `kind` its number,
/// `condition` what it adds to a live head of consumer `$2` in session
/// `s.session_id`, `order` its order, `limit` how many it reads.
macro_rules! served_kind {
    ($kind:literal, $condition:literal, $order:literal, $limit:literal) => {
        concat!(
            "(SELECT ",
            $kind,
            "::int AS kind, c.lane, c.slot, c.claim_expires_at, c.failed_at FROM cursors c \
             WHERE c.session_id = s.session_id AND c.head IS NOT NULL AND c.consumer = $2::text AND ",
            $condition,
            " ORDER BY ",
            $order,
            " LIMIT ",
            $limit,
            ")"
        )
    };
}

/// The heads that decide the work rows of the pairs a batch claim serves
/// (`claims::served`), read in the claim's first round trip after the walk,
/// in place of `rewrite_work`'s probes at its end: `$1` the sessions
/// (`NULL`: the picked ones, [`PICKED_SESSIONS`]), `$2` the consumer, `$3`
/// now, `$4` how many claimable heads of each kind to read (the walk's
/// limit plus one; `NULL`: all). Per session one row per head found, or
/// one row with no head: the session, whether its pair has a work row and
/// its `ready_at`, then the head's kind (1: ready and free, 2: due and not
/// promoted yet, both claimable; 3 and 4: the earliest future end of a
/// lease or delay, not promoted and promoted; 5: a dead letter; `NULL`: no
/// head found), lane, slot, `claim_expires_at` and `failed_at`.
///
/// These are `rewrite_work`'s probes (schema version 13), each an ordered
/// scan of the partial index its predicate matches, but read before the
/// claim's writes: the claimable kinds read up to `$4` rows instead of
/// one, so a head the claim then takes (at most the walk's limit of them,
/// all of kind 1 or 2 when read) leaves another to be seen, and Rust sums
/// the heads read without the ones the claim changed plus their new states.
/// No probe locks: the claim holds its pairs' work rows (the pick locked
/// them), and every writer of a pair's cursors locks its row before it
/// commits, so none of them commits a change to these heads before the
/// claim does.
pub(crate) const SERVED_PROBE: &str = concat!(
    "SELECT s.session_id, w.session_id IS NOT NULL, w.ready_at, \
       p.kind, p.lane, p.slot, p.claim_expires_at, p.failed_at \
     FROM unnest(",
    picked_sessions!(),
    ") AS s(session_id) \
     LEFT JOIN work w ON w.session_id = s.session_id AND w.consumer = $2::text \
     LEFT JOIN LATERAL (",
    served_kind!(
        "1",
        "c.failed_at IS NULL AND (c.claim_expires_at IS NULL OR c.expired) \
         AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= $3::bigint)",
        "c.head",
        "$4::bigint"
    ),
    " UNION ALL ",
    served_kind!(
        "2",
        "c.failed_at IS NULL AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
         AND c.claim_expires_at <= $3::bigint",
        "c.claim_expires_at",
        "$4::bigint"
    ),
    " UNION ALL ",
    served_kind!(
        "3",
        "c.failed_at IS NULL AND c.claim_expires_at IS NOT NULL AND NOT c.expired \
         AND c.claim_expires_at > $3::bigint",
        "c.claim_expires_at",
        "1"
    ),
    " UNION ALL ",
    served_kind!(
        "4",
        "c.failed_at IS NULL AND c.claim_expires_at IS NOT NULL AND c.expired \
         AND c.claim_expires_at > $3::bigint",
        "c.claim_expires_at",
        "1"
    ),
    " UNION ALL ",
    served_kind!("5", "c.failed_at IS NOT NULL", "c.head", "1"),
    ") AS p ON true"
);
