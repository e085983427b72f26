//! `pause`, `resume` and `pauses`: the `pauses` table (schema version 9),
//! one row per paused scope, `session_id` `''` for a store-wide pause. The
//! claims, `has_pending` and the work queries read it (see
//! `ops::claims::sql::UNHELD`, `cursor_table::HAS_PENDING`,
//! `ops::work::sql`); `cursors()` reports the pause in force per cursor.

use a2_store_api::order::compare_pauses;
use a2_store_api::{Pause, PauseRequest, ResumeRequest, ResumeResult, StoreError};
use tokio_postgres::Row;

use crate::db::{execute, query, query_opt, Tx};
use crate::error::TxResult;

/// How a store-wide pause's session is stored (an empty session id is
/// invalid input, so no session has it).
pub(crate) const EVERY_SESSION: &str = "";

/// The columns [`decode_pause`] reads.
const PAUSE_COLUMNS: &str = "session_id, consumer, until_ms, paused_at";

/// A `pauses` row as the API spells it.
fn decode_pause(row: &Row) -> TxResult<Pause> {
    let session_id: String = row.try_get(0)?;
    Ok(Pause::new(
        row.try_get::<_, String>(1)?,
        (session_id != EVERY_SESSION).then_some(session_id),
        row.try_get(2)?,
        row.try_get(3)?,
    ))
}

/// The body of [`Store::pause`](a2_store_api::Store::pause) for a
/// validated request at `now`: the row `PauseRequest::pause_at` builds,
/// replacing the scope's pause. A session's pause needs a cursor of the
/// consumer there (listed or a finished event cursor; one primary-key
/// probe), else `StoreError::nothing_to_pause`.
pub(crate) async fn pause(tx: &Tx<'_>, request: &PauseRequest, now: i64) -> TxResult<Pause> {
    let pause = request.pause_at(now)?;
    if let Some(session_id) = &request.session_id {
        let cursor = query_opt(
            tx,
            "SELECT 1 FROM cursors WHERE session_id = $1 AND consumer = $2 LIMIT 1",
            &[session_id, &request.consumer],
        )
        .await?;
        if cursor.is_none() {
            return Err(StoreError::nothing_to_pause(&request.consumer, session_id).into());
        }
    }
    let scope = request.session_id.as_deref().unwrap_or(EVERY_SESSION);
    execute(
        tx,
        "INSERT INTO pauses (session_id, consumer, until_ms, paused_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (session_id, consumer) DO UPDATE \
         SET until_ms = EXCLUDED.until_ms, paused_at = EXCLUDED.paused_at",
        &[&scope, &pause.consumer, &pause.until_ms, &pause.paused_at],
    )
    .await?;
    Ok(pause)
}

/// The body of [`Store::resume`](a2_store_api::Store::resume) for a
/// validated request at `now`: removes the scope's pause; `resumed` when
/// it was still in force (`Pause::in_force`).
pub(crate) async fn resume(
    tx: &Tx<'_>,
    request: &ResumeRequest,
    now: i64,
) -> TxResult<ResumeResult> {
    let scope = request.session_id.as_deref().unwrap_or(EVERY_SESSION);
    let sql = format!(
        "DELETE FROM pauses WHERE session_id = $1 AND consumer = $2 RETURNING {PAUSE_COLUMNS}"
    );
    let row = query_opt(tx, &sql, &[&scope, &request.consumer]).await?;
    let lifted = row.as_ref().map(decode_pause).transpose()?;
    Ok(ResumeResult::new(
        lifted.is_some_and(|pause| pause.in_force(now)),
    ))
}

/// The stored pauses that may cover `session_id` (its own and the
/// store-wide ones; `None`: every pause), in force or not.
pub(crate) async fn stored(tx: &Tx<'_>, session_id: Option<&str>) -> TxResult<Vec<Pause>> {
    let rows = match session_id {
        Some(session_id) => {
            let sql = format!(
                "SELECT {PAUSE_COLUMNS} FROM pauses WHERE session_id = $1 OR session_id = $2"
            );
            query(tx, &sql, &[&session_id, &EVERY_SESSION]).await?
        }
        None => query(tx, &format!("SELECT {PAUSE_COLUMNS} FROM pauses"), &[]).await?,
    };
    rows.iter().map(decode_pause).collect()
}

/// The body of [`Store::pauses`](a2_store_api::Store::pauses) at `now`:
/// the pauses in force (`Pause::in_force`) in `order::compare_pauses` order.
pub(crate) async fn pauses(
    tx: &Tx<'_>,
    session_id: Option<&str>,
    now: i64,
) -> TxResult<Vec<Pause>> {
    let mut pauses: Vec<Pause> = stored(tx, session_id)
        .await?
        .into_iter()
        .filter(|pause| pause.in_force(now))
        .collect();
    pauses.sort_by(compare_pauses);
    Ok(pauses)
}
