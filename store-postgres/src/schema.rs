//! The tables and indexes, created by versioned migrations on connect.
//!
//! Text keys use the `"C"` collation so `ORDER BY` sorts like Rust's byte
//! order. Lane `NULL` (an event cursor) is stored as `''` (an empty lane is
//! invalid input), and an event cursor's `slot` is its index (0 for lane
//! and log cursors), so `(session_id, consumer, lane, slot)` names any cursor.

use a2_store_api::StoreError;
use tokio_postgres::Client;

use crate::error::{db_error, TxResult};

/// The schema version this build writes. A database at a higher version is
/// refused with `IncompatibleSchema`.
pub const SCHEMA_VERSION: i32 = 15;

/// Migration `n` (1-based) brings the schema from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE sessions (
    session_id        text COLLATE "C" PRIMARY KEY,
    head              bigint NOT NULL DEFAULT 0,
    clear_index       bigint NOT NULL DEFAULT 0,
    reclaimed_through bigint NOT NULL DEFAULT 0
);
CREATE TABLE events (
    session_id     text COLLATE "C" NOT NULL,
    idx            bigint NOT NULL,
    id             text COLLATE "C" NOT NULL,
    type           text COLLATE "C" NOT NULL,
    payload        jsonb NOT NULL,
    created_at     bigint NOT NULL,
    cause_consumer text COLLATE "C",
    cause_lane     text COLLATE "C",
    cause_index    bigint,
    cause_attempt  bigint,
    PRIMARY KEY (session_id, idx)
);
CREATE INDEX events_by_id ON events (session_id, id, idx);
CREATE INDEX events_by_type ON events (session_id, type, idx);
CREATE TABLE cursors (
    session_id          text COLLATE "C" NOT NULL,
    consumer            text COLLATE "C" NOT NULL,
    lane                text COLLATE "C" NOT NULL,
    slot                bigint NOT NULL,
    kind                smallint NOT NULL,
    position            bigint NOT NULL,
    head                bigint,
    types               jsonb,
    attempt_count       bigint NOT NULL DEFAULT 0,
    first_claimed_at    bigint,
    last_claimed_at     bigint,
    claim_holder        text COLLATE "C",
    claim_expires_at    bigint,
    failure_count       bigint NOT NULL DEFAULT 0,
    last_failed_at      bigint,
    last_failed_attempt bigint,
    last_error          text,
    failed_at           bigint,
    PRIMARY KEY (session_id, consumer, lane, slot)
);
CREATE INDEX cursors_with_head ON cursors (session_id, head) WHERE head IS NOT NULL;
CREATE TABLE lane_queue (
    session_id text COLLATE "C" NOT NULL,
    consumer   text COLLATE "C" NOT NULL,
    lane       text COLLATE "C" NOT NULL,
    idx        bigint NOT NULL,
    PRIMARY KEY (session_id, consumer, lane, idx)
);
CREATE TABLE completions (
    session_id   text COLLATE "C" NOT NULL,
    consumer     text COLLATE "C" NOT NULL,
    lane         text COLLATE "C" NOT NULL,
    idx          bigint NOT NULL,
    attempt      bigint NOT NULL,
    returned_ids jsonb NOT NULL,
    PRIMARY KEY (session_id, consumer, lane, idx)
);
CREATE TABLE snapshots (
    session_id text COLLATE "C" NOT NULL,
    reducer    text COLLATE "C" NOT NULL,
    idx        bigint NOT NULL,
    state      jsonb NOT NULL,
    PRIMARY KEY (session_id, reducer)
);
CREATE TABLE checkpoints (
    session_id text COLLATE "C" NOT NULL,
    reducer    text COLLATE "C" NOT NULL,
    idx        bigint NOT NULL,
    state      jsonb NOT NULL,
    PRIMARY KEY (session_id, reducer, idx)
);
CREATE TABLE pins (
    session_id text COLLATE "C" NOT NULL,
    consumer   text COLLATE "C" NOT NULL,
    lane       text COLLATE "C" NOT NULL,
    slot       bigint NOT NULL,
    reducer    text COLLATE "C" NOT NULL,
    idx        bigint NOT NULL,
    PRIMARY KEY (session_id, consumer, lane, slot, reducer, idx)
);
CREATE INDEX pins_by_checkpoint ON pins (session_id, reducer, idx);
CREATE TABLE presence (
    session_id  text COLLATE "C" NOT NULL,
    participant text COLLATE "C" NOT NULL,
    field       text COLLATE "C" NOT NULL,
    value       jsonb NOT NULL,
    seen        bigint,
    at          bigint NOT NULL,
    expires_at  bigint NOT NULL,
    PRIMARY KEY (session_id, participant, field)
);
"#,
    // Version 2: partial cursor indexes shaped like the queries (as in the
    // SQLite backend): claims walk ready heads in claim order without a
    // sort, `retry_at` and `has_pending` and dead letters each have theirs.
    r#"
DROP INDEX cursors_with_head;
CREATE INDEX cursors_ready ON cursors (session_id, head, consumer, lane)
    WHERE head IS NOT NULL AND failed_at IS NULL;
CREATE INDEX cursors_busy ON cursors (session_id, claim_expires_at)
    WHERE head IS NOT NULL AND failed_at IS NULL AND claim_expires_at IS NOT NULL;
CREATE INDEX cursors_pending ON cursors (session_id, consumer)
    WHERE head IS NOT NULL AND failed_at IS NULL;
CREATE INDEX cursors_dead ON cursors (session_id, head)
    WHERE head IS NOT NULL AND failed_at IS NOT NULL;
"#,
    // Version 3: live subscriptions per session, so only commits to
    // sessions someone follows pay for NOTIFY (whose commits PostgreSQL
    // serializes cluster-wide).
    r#"
CREATE TABLE subscribers (
    session_id text COLLATE "C" NOT NULL,
    token      text COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, token)
);
"#,
    // Version 4: `cursors()` lists only unfinished cursors without visiting
    // the finished event cursors kept for replay (as SQLite's `cursors_listed`).
    r#"
CREATE INDEX cursors_listed ON cursors (session_id, consumer, lane, slot)
    WHERE kind <> 0 OR head IS NOT NULL;
"#,
    // Version 5: `has_pending` reads a count of live heads per session and
    // consumer instead of probing `cursors_pending`, whose entries for
    // finished cursors stay until vacuum (a probe walked every one of them).
    // Triggers keep the count in the transaction that changes a cursor;
    // they are deferred to commit (or to `has_pending`, which sets them
    // immediate), so a transaction takes the count row's lock after every
    // cursor lock it waits for.
    r#"
CREATE TABLE pending_counts (
    session_id text COLLATE "C" NOT NULL,
    consumer   text COLLATE "C" NOT NULL,
    live       bigint NOT NULL,
    PRIMARY KEY (session_id, consumer)
);
INSERT INTO pending_counts (session_id, consumer, live)
    SELECT session_id, consumer, count(*) FROM cursors
    WHERE head IS NOT NULL AND failed_at IS NULL
    GROUP BY session_id, consumer;
CREATE FUNCTION count_pending() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.head IS NOT NULL AND OLD.failed_at IS NULL THEN
            UPDATE pending_counts SET live = live - 1
                WHERE session_id = OLD.session_id AND consumer = OLD.consumer;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.head IS NOT NULL AND NEW.failed_at IS NULL THEN
            INSERT INTO pending_counts AS p (session_id, consumer, live)
                VALUES (NEW.session_id, NEW.consumer, 1)
                ON CONFLICT (session_id, consumer) DO UPDATE SET live = p.live + 1;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER cursors_count_insert AFTER INSERT ON cursors
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.head IS NOT NULL AND NEW.failed_at IS NULL)
    EXECUTE FUNCTION count_pending();
CREATE CONSTRAINT TRIGGER cursors_count_update AFTER UPDATE ON cursors
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.head IS NOT NULL AND OLD.failed_at IS NULL)
            <> (NEW.head IS NOT NULL AND NEW.failed_at IS NULL)
        OR ((OLD.head IS NOT NULL AND OLD.failed_at IS NULL)
            AND (OLD.session_id <> NEW.session_id OR OLD.consumer <> NEW.consumer)))
    EXECUTE FUNCTION count_pending();
CREATE CONSTRAINT TRIGGER cursors_count_delete AFTER DELETE ON cursors
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.head IS NOT NULL AND OLD.failed_at IS NULL)
    EXECUTE FUNCTION count_pending();
DROP INDEX cursors_pending;
"#,
    // Version 6: busy heads leave the claim walk. `cursors_ready` held every
    // live head, so a claim stepped over each head in flight below the
    // first free one. Now it holds the idle heads and the promoted ones
    // (`expired`: a claim found their expiry passed), and `cursors_busy`
    // holds every head with an expiry, unpromoted first in expiry order
    // (claims promote from its front; the `Busy` answer probes both parts).
    // Every cursor write that sets an expiry clears `expired`. Existing busy
    // heads start unpromoted; the first claim promotes those already over.
    r#"
ALTER TABLE cursors ADD COLUMN expired boolean NOT NULL DEFAULT false;
DROP INDEX cursors_ready;
DROP INDEX cursors_busy;
CREATE INDEX cursors_ready ON cursors (session_id, head, consumer, lane)
    WHERE head IS NOT NULL AND failed_at IS NULL AND (claim_expires_at IS NULL OR expired);
CREATE INDEX cursors_busy ON cursors (session_id, expired, claim_expires_at)
    WHERE head IS NOT NULL AND failed_at IS NULL AND claim_expires_at IS NOT NULL;
"#,
    // Version 7: the work index (`a2_store_api::work`): one row per
    // (session, consumer) with an unfinished head, `ready_at` NULL when only
    // dead letters are left. `work_ready` finds ready rows per served
    // consumer in fairness order, `work_listed` pages them by session id.
    // Existing heads are indexed from the cursors: a pair is ready since 0
    // (or its earliest expiry) unless only dead letters are left.
    r#"
CREATE TABLE work (
    session_id text COLLATE "C" NOT NULL,
    consumer   text COLLATE "C" NOT NULL,
    ready_at   bigint,
    PRIMARY KEY (session_id, consumer)
);
CREATE INDEX work_ready ON work (consumer, ready_at, session_id) WHERE ready_at IS NOT NULL;
CREATE INDEX work_listed ON work (consumer, session_id);
INSERT INTO work (session_id, consumer, ready_at)
    SELECT session_id, consumer,
        min(COALESCE(claim_expires_at, 0)) FILTER (WHERE failed_at IS NULL)
    FROM cursors WHERE head IS NOT NULL
    GROUP BY session_id, consumer;
"#,
    // Version 8: `rewrite_work`, the work-row rewrite of claims,
    // completions ending a cursor, failures and renewals as one statement,
    // so it is sent with the call's `COMMIT` (one round trip for the two).
    // It does what `ops::work::lock_and_rewrite` does in two: lock the
    // pairs' rows (waiting, in consumer order), then, in a statement of its
    // own (a fresh snapshot, after the lock), sum their heads and store
    // `WorkSummary::served_row` (`p_served`) or `touched_row` for each. It
    // returns the summary and the row it stored, and the caller checks them
    // against those Rust rules (`debug_assert`). Its statements use generic
    // plans: planned anew for each call's values (PostgreSQL's default
    // choice here), the function cost about 1 ms even for a session without
    // work, against 0.15 to 0.25 ms (every statement keys on the session and
    // the partial indexes' fixed predicates, so the generic plan is the
    // custom one).
    // Also: `sessions` (its head, written by every append) and
    // `pending_counts` (its count, by every head started or finished) are
    // updated in place in columns no index holds, so their updates are HOT
    // whenever the row's page has room: a fill factor of 80 leaves that room
    // on pages filled from now on, so those updates leave no index entries
    // and their dead versions are pruned without vacuum.
    r#"
ALTER TABLE sessions SET (fillfactor = 80);
ALTER TABLE pending_counts SET (fillfactor = 80);
CREATE OR REPLACE FUNCTION rewrite_work(p_session text, p_consumers text[], p_now bigint, p_served boolean)
RETURNS TABLE (r_consumer text, r_locked boolean, r_old_at bigint, r_claimable bigint,
    r_busy bigint, r_dead bigint, r_next_expiry bigint, r_keep boolean, r_new_at bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    l_names text[];
    l_at bigint[];
BEGIN
    SELECT COALESCE(array_agg(l.consumer ORDER BY l.consumer), '{}'),
           COALESCE(array_agg(l.ready_at ORDER BY l.consumer), '{}')
      INTO l_names, l_at
      FROM (SELECT w.consumer, w.ready_at FROM work w WHERE w.session_id = p_session
              AND (p_consumers IS NULL OR w.consumer = ANY(p_consumers))
            ORDER BY w.consumer FOR UPDATE) AS l;
    RETURN QUERY
    WITH names AS (
        SELECT DISTINCT n.consumer FROM unnest(COALESCE(p_consumers, l_names)) AS n(consumer)
    ), held AS (
        SELECT h.consumer, h.ready_at FROM unnest(l_names, l_at) AS h(consumer, ready_at)
    ), summed AS (
        SELECT h.consumer,
            count(*) FILTER (WHERE h.failed_at IS NULL
                AND (h.claim_expires_at IS NULL OR h.claim_expires_at <= p_now)) AS claimable,
            count(*) FILTER (WHERE h.failed_at IS NULL AND h.claim_expires_at > p_now) AS busy,
            count(*) FILTER (WHERE h.failed_at IS NOT NULL) AS dead,
            min(h.claim_expires_at) FILTER (WHERE h.failed_at IS NULL
                AND h.claim_expires_at > p_now) AS next_expiry
        FROM (
            SELECT c.consumer, c.claim_expires_at, c.failed_at FROM cursors c
              WHERE c.session_id = p_session AND c.consumer IN (SELECT consumer FROM names)
                AND c.head IS NOT NULL AND c.failed_at IS NULL
                AND (c.claim_expires_at IS NULL OR c.expired)
            UNION ALL
            SELECT c.consumer, c.claim_expires_at, c.failed_at FROM cursors c
              WHERE c.session_id = p_session AND c.consumer IN (SELECT consumer FROM names)
                AND c.head IS NOT NULL AND c.failed_at IS NULL
                AND c.claim_expires_at IS NOT NULL AND NOT c.expired
            UNION ALL
            SELECT c.consumer, c.claim_expires_at, c.failed_at FROM cursors c
              WHERE c.session_id = p_session AND c.consumer IN (SELECT consumer FROM names)
                AND c.head IS NOT NULL AND c.failed_at IS NOT NULL
        ) AS h GROUP BY h.consumer
    ), decided AS (
        SELECT n.consumer, held.consumer IS NOT NULL AS locked, held.ready_at AS old_at,
            COALESCE(s.claimable, 0) AS claimable, COALESCE(s.busy, 0) AS busy,
            COALESCE(s.dead, 0) AS dead, s.next_expiry,
            (COALESCE(s.claimable, 0) > 0 OR s.next_expiry IS NOT NULL
                OR COALESCE(s.dead, 0) > 0) AS keep,
            CASE WHEN COALESCE(s.claimable, 0) > 0 THEN
                    CASE WHEN p_served THEN p_now ELSE LEAST(held.ready_at, p_now) END
                ELSE s.next_expiry END AS new_at
        FROM names n LEFT JOIN held ON held.consumer = n.consumer
            LEFT JOIN summed s ON s.consumer = n.consumer
    ), gone AS (
        DELETE FROM work w USING decided d
        WHERE w.session_id = p_session AND w.consumer = d.consumer AND d.locked AND NOT d.keep
    ), moved AS (
        UPDATE work w SET ready_at = d.new_at FROM decided d
        WHERE w.session_id = p_session AND w.consumer = d.consumer AND d.locked AND d.keep
            AND w.ready_at IS DISTINCT FROM d.new_at
    ), added AS (
        INSERT INTO work AS w (session_id, consumer, ready_at)
        SELECT p_session, d.consumer, d.new_at FROM decided d
        WHERE NOT d.locked AND d.keep ORDER BY d.consumer
        ON CONFLICT (session_id, consumer) DO UPDATE
        SET ready_at = LEAST(w.ready_at, EXCLUDED.ready_at)
    )
    SELECT d.consumer::text, d.locked, d.old_at, d.claimable, d.busy, d.dead, d.next_expiry,
        d.keep, d.new_at
    FROM decided d ORDER BY d.consumer;
END
$$;
"#,
    // Version 9: time and control. `lane_queue.not_before`: a scheduled
    // target's time, kept with its queued index until the lane reaches it
    // (`Dispatch::scheduled`); a cursor's scheduled head is an ordinary
    // `claim_expires_at`, so `rewrite_work` needs no change. `pauses`: one
    // row per paused scope, `session_id` `''` for a store-wide pause (an
    // empty session id is invalid input), read by the claims, `has_pending`
    // and the work queries; `pauses_by_consumer` finds a consumer's
    // per-session pauses for `earliest_ready`. `sessions.forked_*`: where a
    // fork came from. `cursors_dead` is keyed in `redrive_all`'s order
    // (`order::compare_redriven`: session, index, consumer, lane): a bulk
    // redrive reads dead letters only (the partial index), whatever the
    // number of cursors and sessions.
    r#"
ALTER TABLE lane_queue ADD COLUMN not_before bigint;
CREATE TABLE pauses (
    session_id text COLLATE "C" NOT NULL,
    consumer   text COLLATE "C" NOT NULL,
    until_ms   bigint,
    paused_at  bigint NOT NULL,
    PRIMARY KEY (session_id, consumer)
);
CREATE INDEX pauses_by_consumer ON pauses (consumer, session_id);
ALTER TABLE sessions ADD COLUMN forked_session text COLLATE "C",
    ADD COLUMN forked_index bigint;
DROP INDEX cursors_dead;
CREATE INDEX cursors_dead ON cursors (session_id, head, consumer, lane, slot)
    WHERE head IS NOT NULL AND failed_at IS NOT NULL;
"#,
    // Version 10: the guard of a completion decided on the cursor row this
    // store's claim wrote (`ops::claims::claimed`): it raises SQLSTATE
    // A2S01, aborting the transaction, unless the row read after the lock
    // is still the one remembered. It reads no table itself.
    r#"
CREATE FUNCTION expect_unchanged(p_unchanged boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_unchanged IS NOT TRUE THEN
        RAISE EXCEPTION 'the cursor changed since this store claimed it'
            USING ERRCODE = 'A2S01';
    END IF;
    RETURN true;
END
$$;
"#,
    // Version 11: `rewrite_work` decides each pair's row from at most one
    // head of each kind instead of counting them all. The row depends only
    // on whether the pair has a claimable head, the earliest end of a busy
    // one and whether it has a dead letter (`WorkSummary::served_row`,
    // `touched_row`), so each of those is one ordered `LIMIT 1` probe of the
    // partial index holding it, and the counts it returns are 0 or 1. Version
    // 8 counted every live head of the pair, so a claim or completion in a
    // session with a backlog read (and sorted) the whole backlog.
    r#"
CREATE OR REPLACE FUNCTION rewrite_work(p_session text, p_consumers text[], p_now bigint, p_served boolean)
RETURNS TABLE (r_consumer text, r_locked boolean, r_old_at bigint, r_claimable bigint,
    r_busy bigint, r_dead bigint, r_next_expiry bigint, r_keep boolean, r_new_at bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    l_names text[];
    l_at bigint[];
BEGIN
    SELECT COALESCE(array_agg(l.consumer ORDER BY l.consumer), '{}'),
           COALESCE(array_agg(l.ready_at ORDER BY l.consumer), '{}')
      INTO l_names, l_at
      FROM (SELECT w.consumer, w.ready_at FROM work w WHERE w.session_id = p_session
              AND (p_consumers IS NULL OR w.consumer = ANY(p_consumers))
            ORDER BY w.consumer FOR UPDATE) AS l;
    RETURN QUERY
    WITH names AS (
        SELECT DISTINCT n.consumer FROM unnest(COALESCE(p_consumers, l_names)) AS n(consumer)
    ), held AS (
        SELECT h.consumer, h.ready_at FROM unnest(l_names, l_at) AS h(consumer, ready_at)
    ), probed AS MATERIALIZED (
        SELECT n.consumer,
            COALESCE((SELECT true FROM cursors c
                WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                  AND (c.claim_expires_at IS NULL OR c.expired) AND c.consumer = n.consumer
                  AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= p_now)
                ORDER BY c.head LIMIT 1), (SELECT true FROM cursors c
                WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                  AND c.claim_expires_at IS NOT NULL AND NOT c.expired
                  AND c.claim_expires_at <= p_now AND c.consumer = n.consumer
                ORDER BY c.claim_expires_at LIMIT 1), false) AS claimable,
            LEAST(
                (SELECT c.claim_expires_at FROM cursors c
                  WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                    AND c.claim_expires_at IS NOT NULL AND NOT c.expired
                    AND c.claim_expires_at > p_now AND c.consumer = n.consumer
                  ORDER BY c.claim_expires_at LIMIT 1),
                (SELECT c.claim_expires_at FROM cursors c
                  WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                    AND c.claim_expires_at IS NOT NULL AND c.expired
                    AND c.claim_expires_at > p_now AND c.consumer = n.consumer
                  ORDER BY c.claim_expires_at LIMIT 1)) AS next_expiry,
            COALESCE((SELECT true FROM cursors c
                WHERE c.session_id = p_session AND c.head IS NOT NULL
                  AND c.failed_at IS NOT NULL AND c.consumer = n.consumer
                ORDER BY c.head LIMIT 1), false) AS dead
        FROM names n
    ), decided AS (
        SELECT p.consumer, held.consumer IS NOT NULL AS locked, held.ready_at AS old_at,
            p.claimable::int::bigint AS claimable,
            (p.next_expiry IS NOT NULL)::int::bigint AS busy,
            p.dead::int::bigint AS dead, p.next_expiry,
            (p.claimable OR p.next_expiry IS NOT NULL OR p.dead) AS keep,
            CASE WHEN p.claimable THEN
                    CASE WHEN p_served THEN p_now ELSE LEAST(held.ready_at, p_now) END
                ELSE p.next_expiry END AS new_at
        FROM probed p LEFT JOIN held ON held.consumer = p.consumer
    ), gone AS (
        DELETE FROM work w USING decided d
        WHERE w.session_id = p_session AND w.consumer = d.consumer AND d.locked AND NOT d.keep
    ), moved AS (
        UPDATE work w SET ready_at = d.new_at FROM decided d
        WHERE w.session_id = p_session AND w.consumer = d.consumer AND d.locked AND d.keep
            AND w.ready_at IS DISTINCT FROM d.new_at
    ), added AS (
        INSERT INTO work AS w (session_id, consumer, ready_at)
        SELECT p_session, d.consumer, d.new_at FROM decided d
        WHERE NOT d.locked AND d.keep ORDER BY d.consumer
        ON CONFLICT (session_id, consumer) DO UPDATE
        SET ready_at = LEAST(w.ready_at, EXCLUDED.ready_at)
    )
    SELECT d.consumer::text, d.locked, d.old_at, d.claimable, d.busy, d.dead, d.next_expiry,
        d.keep, d.new_at
    FROM decided d ORDER BY d.consumer;
END
$$;
"#,
    // Version 12: `has_pending` reads the work index, and `pending_counts`
    // with its triggers is gone. A pair's work row has a `ready_at` exactly
    // when the pair has a live head (`WorkSummary::touched_row`: `NULL`
    // only when dead letters alone are left), and every transaction that
    // changes a cursor rewrites its pair's row before it commits, so the
    // rows already answer what the counts did. The counts cost every head
    // started or finished a deferred trigger and a write to a row that all
    // completions of the consumer in the session updated at commit.
    r#"
DROP TRIGGER cursors_count_insert ON cursors;
DROP TRIGGER cursors_count_update ON cursors;
DROP TRIGGER cursors_count_delete ON cursors;
DROP FUNCTION count_pending();
DROP TABLE pending_counts;
"#,
    // Version 13: `rewrite_work` decides each pair in PL/pgSQL statements of
    // its own (same signature, same rows stored) instead of one statement
    // with a `CTE` per step. That statement's generic plan held every probe
    // and all three writes (delete, update, upsert), and starting its
    // executor was over a third of the function's time on every call,
    // though a call runs one write at most. Now each pair runs the probes it
    // needs, in order, and stops at the first that decides: a claimable
    // head (then the busy and dead-letter probes are skipped, and reported
    // as 0), else the earliest busy end, else a dead letter; then the one
    // write the decision asks for. The probes are version 11's.
    r#"
CREATE OR REPLACE FUNCTION rewrite_work(p_session text, p_consumers text[], p_now bigint, p_served boolean)
RETURNS TABLE (r_consumer text, r_locked boolean, r_old_at bigint, r_claimable bigint,
    r_busy bigint, r_dead bigint, r_next_expiry bigint, r_keep boolean, r_new_at bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l_names text[];
    l_at bigint[];
    l_name text;
    l_pos integer;
    l_claimable boolean;
    l_next bigint;
    l_dead boolean;
BEGIN
    SELECT COALESCE(array_agg(l.consumer ORDER BY l.consumer), '{}'),
           COALESCE(array_agg(l.ready_at ORDER BY l.consumer), '{}')
      INTO l_names, l_at
      FROM (SELECT w.consumer, w.ready_at FROM work w WHERE w.session_id = p_session
              AND (p_consumers IS NULL OR w.consumer = ANY(p_consumers))
            ORDER BY w.consumer FOR UPDATE) AS l;
    FOR l_name IN
        SELECT DISTINCT n.consumer COLLATE "C" FROM unnest(COALESCE(p_consumers, l_names)) AS n(consumer)
        ORDER BY 1
    LOOP
        l_pos := array_position(l_names, l_name);
        r_consumer := l_name;
        r_locked := l_pos IS NOT NULL;
        r_old_at := CASE WHEN l_pos IS NULL THEN NULL ELSE l_at[l_pos] END;
        l_claimable := COALESCE((SELECT true FROM cursors c
                WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                  AND (c.claim_expires_at IS NULL OR c.expired) AND c.consumer = l_name
                  AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= p_now)
                ORDER BY c.head LIMIT 1), false)
            OR COALESCE((SELECT true FROM cursors c
                WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                  AND c.claim_expires_at IS NOT NULL AND NOT c.expired
                  AND c.claim_expires_at <= p_now AND c.consumer = l_name
                ORDER BY c.claim_expires_at LIMIT 1), false);
        l_next := NULL;
        l_dead := false;
        IF NOT l_claimable THEN
            l_next := LEAST(
                (SELECT c.claim_expires_at FROM cursors c
                  WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                    AND c.claim_expires_at IS NOT NULL AND NOT c.expired
                    AND c.claim_expires_at > p_now AND c.consumer = l_name
                  ORDER BY c.claim_expires_at LIMIT 1),
                (SELECT c.claim_expires_at FROM cursors c
                  WHERE c.session_id = p_session AND c.head IS NOT NULL AND c.failed_at IS NULL
                    AND c.claim_expires_at IS NOT NULL AND c.expired
                    AND c.claim_expires_at > p_now AND c.consumer = l_name
                  ORDER BY c.claim_expires_at LIMIT 1));
            IF l_next IS NULL THEN
                l_dead := COALESCE((SELECT true FROM cursors c
                    WHERE c.session_id = p_session AND c.head IS NOT NULL
                      AND c.failed_at IS NOT NULL AND c.consumer = l_name
                    ORDER BY c.head LIMIT 1), false);
            END IF;
        END IF;
        r_claimable := l_claimable::integer;
        r_busy := (l_next IS NOT NULL)::integer;
        r_dead := l_dead::integer;
        r_next_expiry := l_next;
        r_keep := l_claimable OR l_next IS NOT NULL OR l_dead;
        r_new_at := CASE WHEN l_claimable THEN
                CASE WHEN p_served THEN p_now ELSE LEAST(r_old_at, p_now) END
            ELSE l_next END;
        IF r_locked AND NOT r_keep THEN
            DELETE FROM work w WHERE w.session_id = p_session AND w.consumer = l_name;
        ELSIF r_locked AND r_old_at IS DISTINCT FROM r_new_at THEN
            UPDATE work w SET ready_at = r_new_at
                WHERE w.session_id = p_session AND w.consumer = l_name;
        ELSIF NOT r_locked AND r_keep THEN
            INSERT INTO work AS w (session_id, consumer, ready_at)
                VALUES (p_session, l_name, r_new_at)
                ON CONFLICT (session_id, consumer) DO UPDATE
                SET ready_at = LEAST(w.ready_at, EXCLUDED.ready_at);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
"#,
    // Version 14: `rotate_table`, which reclaims a state table whatever
    // holds vacuum back (`crate::rotate`): it takes the table's exclusive
    // lock (waiting at most `p_lock_timeout_ms`), keeps its live rows,
    // `TRUNCATE`s it (new files for the table and its indexes; the old ones,
    // with every dead version and index entry, are removed at commit) and
    // inserts the kept rows back. It refuses a table of more than
    // `p_max_live` rows (-1, nothing changed) and any table but the
    // mutable state ones. `TRUNCATE` is not MVCC-safe: a transaction whose
    // snapshot predates the rotation sees the table empty, so the store
    // reads and writes only in read-committed transactions, each statement
    // of which takes its snapshot after its locks.
    r#"
CREATE FUNCTION rotate_table(p_table text, p_max_live bigint, p_lock_timeout_ms bigint)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_kept bigint;
    v_rows text;
BEGIN
    IF p_table <> ALL (ARRAY['sessions', 'cursors', 'lane_queue', 'work', 'presence',
            'snapshots', 'checkpoints', 'pins', 'subscribers', 'pauses']) THEN
        RAISE EXCEPTION 'rotate_table: % is not a state table', p_table
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_table);
    EXECUTE format('SELECT count(*) FROM (SELECT FROM %I LIMIT $1) r', p_table)
        INTO v_kept USING p_max_live + 1;
    IF v_kept > p_max_live THEN
        RETURN -1;
    END IF;
    EXECUTE format('SELECT array_agg(r)::text FROM %I r', p_table) INTO v_rows;
    EXECUTE format('TRUNCATE %I', p_table);
    IF v_kept > 0 THEN
        EXECUTE format('INSERT INTO %I SELECT * FROM unnest($1::%I[])', p_table, p_table)
            USING v_rows;
    END IF;
    RETURN v_kept;
END
$$;
"#,
    // Version 15: retention (`a2_store_api::retention`). `incarnation`: a
    // number from a sequence of the schema, drawn when a session row is
    // made, so no two sessions of the schema ever share one (not after a
    // delete, not across store instances); existing sessions draw theirs
    // here (a volatile default rewrites the table, one draw per row).
    // `last_activity`: the store clock's ms at the session's last append of
    // any kind (or at its creation: its first rows, a fork's copy, its
    // first presence field), which every append writes with the head;
    // `NULL` while nothing was stored (a row made only to be locked, by a
    // subscription or a call on a session never written: no session yet).
    // Existing sessions take their head event's time; sessions holding
    // only presence get a row, active since their latest field's time.
    // `sessions_idle` pages `prune`'s candidates in `(last_activity,
    // session_id)` order, so a page costs its own rows. The index makes
    // appends' session updates non-HOT (see the README's Retention
    // section). `presence_expiry` finds expired presence fields for
    // `prune`'s sweep without a scan. `rotate_table` (version 14's, same
    // body) also takes the append-only `events` and `completions`: deleted
    // and pruned sessions leave their dead rows there, which a transaction
    // holding vacuum back keeps (see `crate::rotate::LOG_TABLES`).
    r#"
CREATE SEQUENCE session_incarnations;
ALTER TABLE sessions
    ADD COLUMN incarnation bigint NOT NULL DEFAULT nextval('session_incarnations'),
    ADD COLUMN last_activity bigint;
ALTER SEQUENCE session_incarnations OWNED BY sessions.incarnation;
UPDATE sessions s SET last_activity = e.created_at FROM events e
    WHERE e.session_id = s.session_id AND e.idx = s.head;
INSERT INTO sessions (session_id) SELECT DISTINCT session_id FROM presence
    ON CONFLICT DO NOTHING;
UPDATE sessions s SET last_activity = p.at
    FROM (SELECT session_id, max(at) AS at FROM presence GROUP BY session_id) p
    WHERE p.session_id = s.session_id AND s.last_activity IS NULL;
CREATE INDEX sessions_idle ON sessions (last_activity, session_id);
CREATE INDEX presence_expiry ON presence (expires_at);
CREATE OR REPLACE FUNCTION rotate_table(p_table text, p_max_live bigint, p_lock_timeout_ms bigint)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_kept bigint;
    v_rows text;
BEGIN
    IF p_table <> ALL (ARRAY['sessions', 'cursors', 'lane_queue', 'work', 'presence',
            'snapshots', 'checkpoints', 'pins', 'subscribers', 'pauses',
            'events', 'completions']) THEN
        RAISE EXCEPTION 'rotate_table: % is not a rotated table', p_table
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_table);
    EXECUTE format('SELECT count(*) FROM (SELECT FROM %I LIMIT $1) r', p_table)
        INTO v_kept USING p_max_live + 1;
    IF v_kept > p_max_live THEN
        RETURN -1;
    END IF;
    EXECUTE format('SELECT array_agg(r)::text FROM %I r', p_table) INTO v_rows;
    EXECUTE format('TRUNCATE %I', p_table);
    IF v_kept > 0 THEN
        EXECUTE format('INSERT INTO %I SELECT * FROM unnest($1::%I[])', p_table, p_table)
            USING v_rows;
    END IF;
    RETURN v_kept;
END
$$;
"#,
];

/// Creates the schema if needed and applies the missing migrations, under a
/// transaction-scoped advisory lock so concurrent connects migrate once.
/// Refuses a database written by a newer schema version.
pub(crate) async fn migrate(client: &mut Client, schema: &str) -> Result<(), StoreError> {
    run(client, schema)
        .await
        .map_err(|error| error.into_store("migrating the PostgreSQL schema"))
}

async fn run(client: &mut Client, schema: &str) -> TxResult<()> {
    let tx = client.transaction().await?;
    // One lock key per schema; hashtext is stable across sessions.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('a2-store-migrate:' || $1::text))",
        &[&schema],
    )
    .await?;
    // The schema name was validated as a plain identifier (see options.rs);
    // identifiers cannot be bound as parameters.
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\"; SET LOCAL search_path TO \"{schema}\";
         CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL);"
    ))
    .await?;
    let row = tx
        .query_one("SELECT COALESCE(max(version), 0) FROM schema_version", &[])
        .await?;
    let found: i32 = row.try_get(0)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema {
            message: format!(
                "schema '{schema}' is at version {found}, this build knows up to {SCHEMA_VERSION}: upgrade a2-store-postgres or use another schema"
            ),
        }
        .into());
    }
    for (version, sql) in (1..).zip(MIGRATIONS) {
        if version <= found {
            continue;
        }
        tx.batch_execute(sql).await?;
        tx.execute("DELETE FROM schema_version", &[]).await?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// For a read-only connect: `Ok` when `schema` exists at [`SCHEMA_VERSION`];
/// creates and migrates nothing. A missing schema (or one without the
/// version table) is `Backend`, another version `IncompatibleSchema`.
pub(crate) async fn check_version(client: &Client, schema: &str) -> Result<(), StoreError> {
    let doing = "checking the PostgreSQL schema (read-only)";
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables \
             WHERE table_schema = $1 AND table_name = 'schema_version')",
            &[&schema],
        )
        .await
        .map_err(|error| db_error(doing, error))?;
    let present: bool = row.try_get(0).map_err(|error| db_error(doing, error))?;
    if !present {
        return Err(StoreError::Backend {
            message: format!(
                "schema '{schema}' holds no a2-store tables (or does not exist); a read-only open never creates it"
            ),
            source: None,
        });
    }
    // `search_path` is the schema (set at connect).
    let row = client
        .query_one("SELECT COALESCE(max(version), 0) FROM schema_version", &[])
        .await
        .map_err(|error| db_error(doing, error))?;
    let found: i32 = row.try_get(0).map_err(|error| db_error(doing, error))?;
    if found != SCHEMA_VERSION {
        let relation = if found > SCHEMA_VERSION {
            "newer"
        } else {
            "older"
        };
        return Err(StoreError::IncompatibleSchema {
            message: format!(
                "schema '{schema}' is at version {found}, {relation} than version {SCHEMA_VERSION} this build reads; a read-only open never migrates"
            ),
        });
    }
    Ok(())
}

/// Drops `schema` and everything in it (used by tests that made a fresh one).
pub(crate) async fn drop_schema(client: &Client, schema: &str) -> Result<(), StoreError> {
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .map_err(|error| db_error("dropping the PostgreSQL schema", error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_migration_per_version() {
        assert_eq!(MIGRATIONS.len(), usize::try_from(SCHEMA_VERSION).unwrap());
    }
}
