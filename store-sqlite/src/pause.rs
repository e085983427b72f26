//! `pause`, `resume` and `pauses`: the `pauses` table, one row per scope
//! `(consumer, session)`, the store-wide scope stored as session `''`
//! (session ids are never empty). Claims and `has_pending` read the pauses
//! covering a session with [`covering`] and ask `a2_store_api::pause` how
//! they hold each consumer; work rows are never changed by a pause.

use a2_store_api::order::compare_pauses;
use a2_store_api::{Pause, PauseRequest, ResumeRequest, ResumeResult, StoreError};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::errors::SqlContext;
use crate::session;
use crate::values::SqlIndex;

/// The stored session of a scope: the session id, `''` for every session.
fn scope(session_id: Option<&str>) -> &str {
    session_id.unwrap_or_default()
}

/// A row selected as `consumer, session, until_ms, paused_at`.
fn decode(row: &Row<'_>) -> rusqlite::Result<Pause> {
    let session: String = row.get(1)?;
    Ok(Pause::new(
        row.get::<_, String>(0)?,
        (!session.is_empty()).then_some(session),
        row.get(2)?,
        row.get(3)?,
    ))
}

/// The pauses covering the session `?1`: its own and the store-wide ones.
const COVERING: &str = "SELECT consumer, session, until_ms, paused_at FROM pauses \
     INDEXED BY pauses_by_session WHERE session IN ('', ?1)";

/// Every stored pause covering `session_id` (its own and the store-wide
/// ones), whether still in force or not (`a2_store_api::pause` ignores
/// those that ended).
pub(crate) fn covering(tx: &Connection, session_id: &str) -> Result<Vec<Pause>, StoreError> {
    tx.prepare_cached(COVERING)
        .and_then(|mut stmt| stmt.query_map([session_id], decode)?.collect())
        .ctx("reading pauses")
}

/// The store-wide pause of `consumer`, if one is stored.
pub(crate) fn everywhere(tx: &Connection, consumer: &str) -> Result<Option<Pause>, StoreError> {
    tx.prepare_cached(
        "SELECT consumer, session, until_ms, paused_at FROM pauses \
         WHERE consumer = ?1 AND session = ''",
    )
    .and_then(|mut stmt| stmt.query_row([consumer], decode).optional())
    .ctx("reading a pause")
}

/// Stores the pause `request` asks for at `now` (replacing the scope's
/// pause). A session's pause needs a cursor of the consumer there.
pub(crate) fn pause(
    tx: &Connection,
    request: &PauseRequest,
    now: i64,
) -> Result<Pause, StoreError> {
    let pause = request.pause_at(now)?;
    if let Some(session_id) = &request.session_id {
        if !has_cursor(tx, session_id, &request.consumer)? {
            return Err(StoreError::nothing_to_pause(&request.consumer, session_id));
        }
    }
    tx.prepare_cached(
        "INSERT INTO pauses (consumer, session, until_ms, paused_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (consumer, session) DO UPDATE SET until_ms = excluded.until_ms, \
         paused_at = excluded.paused_at",
    )
    .and_then(|mut stmt| {
        stmt.execute((
            &pause.consumer,
            scope(pause.session_id.as_deref()),
            pause.until_ms,
            pause.paused_at,
        ))
    })
    .ctx("storing a pause")?;
    Ok(pause)
}

/// Whether `consumer` has a cursor of the current generation in the
/// session: one `cursors()` lists, or a finished event cursor.
fn has_cursor(tx: &Connection, session_id: &str, consumer: &str) -> Result<bool, StoreError> {
    let Some(session) = session::find(tx, session_id)? else {
        return Ok(false);
    };
    let clear = SqlIndex::new("clear index", session.clear)?;
    tx.prepare_cached(
        "SELECT 1 FROM cursors WHERE sid = ?1 AND consumer = ?2 AND (kind = 2 OR born >= ?3) \
         LIMIT 1",
    )
    .and_then(|mut stmt| stmt.exists((session.sid, consumer, clear)))
    .ctx("looking for a consumer's cursors")
}

/// Lifts the pause of one scope; `resumed` when it was still in force at `now`.
pub(crate) fn resume(
    tx: &Connection,
    request: &ResumeRequest,
    now: i64,
) -> Result<ResumeResult, StoreError> {
    let removed: Option<Pause> = tx
        .prepare_cached(
            "DELETE FROM pauses WHERE consumer = ?1 AND session = ?2 \
             RETURNING consumer, session, until_ms, paused_at",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                (&request.consumer, scope(request.session_id.as_deref())),
                decode,
            )
            .optional()
        })
        .ctx("lifting a pause")?;
    Ok(ResumeResult::new(
        removed.is_some_and(|pause| pause.in_force(now)),
    ))
}

/// The pauses in force at `now`: the store-wide ones and `session_id`'s,
/// or every one without a session, in `order::compare_pauses` order.
pub(crate) fn pauses(
    tx: &Connection,
    session_id: Option<&str>,
    now: i64,
) -> Result<Vec<Pause>, StoreError> {
    let mut listed: Vec<Pause> = match session_id {
        Some(session_id) => covering(tx, session_id)?,
        None => tx
            .prepare_cached("SELECT consumer, session, until_ms, paused_at FROM pauses")
            .and_then(|mut stmt| stmt.query_map([], decode)?.collect())
            .ctx("reading pauses")?,
    };
    listed.retain(|pause| pause.in_force(now));
    listed.sort_by(compare_pauses);
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use crate::schema::query_plan as plan;

    #[test]
    fn a_claim_reads_only_the_pauses_covering_its_session() {
        let shown = plan(super::COVERING);
        assert!(
            shown.contains("USING INDEX pauses_by_session (session=?)"),
            "{shown}"
        );
    }
}
