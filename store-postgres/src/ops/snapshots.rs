//! Reducer snapshots: the head snapshot per reducer, and checkpoints kept
//! readable while a pin (a cursor still on that head) holds.

use a2_store_api::dispatch::cleared;
use a2_store_api::{Snapshot, StateRead, StateWrite};
use tokio_postgres::types::Json;

use crate::cursor_table::load_ref;
use crate::db::{bound, execute, query_opt, read_session, Tx};
use crate::error::TxResult;
use crate::rows::index_of;

/// The body of [`Store::write_state`](a2_store_api::Store::write_state):
/// writes below the clear are ignored; the last write (by index) becomes the
/// head snapshot; each write with a live pin is kept as a checkpoint. Pinned
/// cursors are locked shared so no concurrent advance can miss the pin.
pub(crate) async fn write_state(
    tx: &Tx<'_>,
    session_id: &str,
    reducer: &str,
    writes: &[StateWrite],
) -> TxResult<()> {
    let clear = read_session(tx, session_id).await?.clear;
    let cleared_through = index_of(clear)?;
    let mut ordered: Vec<&StateWrite> = writes.iter().collect();
    ordered.sort_by_key(|write| write.index);
    let mut head: Option<(i64, &StateWrite)> = None;
    for write in ordered {
        let Ok(index) = i64::try_from(write.index) else {
            continue;
        };
        if !write.kept(cleared_through) {
            continue;
        }
        head = Some((index, write));
        let mut pinned = Vec::new();
        for pin in &write.pins {
            // A cleared head's cursor is gone; one beyond any index never was.
            let Ok(pin_index) = i64::try_from(pin.index) else {
                continue;
            };
            if cleared(pin.index, cleared_through) {
                continue;
            }
            let cursor = load_ref(
                tx,
                session_id,
                &pin.consumer,
                pin.lane.as_deref(),
                pin.index,
                false,
            )
            .await?;
            let Some(cursor) = cursor else { continue };
            if !cursor.dispatch.holds_pin(cursor.head == Some(pin_index)) {
                continue;
            }
            // Lock the cursor row shared: an advance or dead-letter (which
            // releases pins) waits for this transaction, and vice versa.
            let locked = query_opt(
                tx,
                "SELECT head FROM cursors WHERE session_id = $1 AND consumer = $2 AND lane = $3 \
                 AND slot = $4 AND head = $5 AND failed_at IS NULL FOR SHARE",
                &[
                    &session_id,
                    &cursor.consumer,
                    &cursor.lane,
                    &cursor.slot,
                    &pin_index,
                ],
            )
            .await?;
            if locked.is_some() {
                pinned.push(cursor);
            }
        }
        if pinned.is_empty() {
            continue;
        }
        execute(
            tx,
            "INSERT INTO checkpoints (session_id, reducer, idx, state) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_id, reducer, idx) DO UPDATE SET state = EXCLUDED.state",
            &[&session_id, &reducer, &index, &Json(&write.state)],
        )
        .await?;
        for cursor in pinned {
            execute(
                tx,
                "INSERT INTO pins (session_id, consumer, lane, slot, reducer, idx) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                &[
                    &session_id,
                    &cursor.consumer,
                    &cursor.lane,
                    &cursor.slot,
                    &reducer,
                    &index,
                ],
            )
            .await?;
        }
    }
    if let Some((index, write)) = head {
        execute(
            tx,
            "INSERT INTO snapshots (session_id, reducer, idx, state) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_id, reducer) DO UPDATE SET idx = EXCLUDED.idx, \
             state = EXCLUDED.state",
            &[&session_id, &reducer, &index, &Json(&write.state)],
        )
        .await?;
    }
    Ok(())
}

/// The body of [`Store::read_state`](a2_store_api::Store::read_state): the
/// highest of the head snapshot and the pinned checkpoints with
/// `clear <= index <= at` (the head snapshot wins a tie: it is the newest).
pub(crate) async fn read_state(
    tx: &Tx<'_>,
    session_id: &str,
    reducer: &str,
    at: Option<u64>,
) -> TxResult<StateRead> {
    let clear = read_session(tx, session_id).await?.clear;
    let at = at.map_or(i64::MAX, bound);
    let head = query_opt(
        tx,
        "SELECT idx, state FROM snapshots WHERE session_id = $1 AND reducer = $2 \
         AND idx >= $3 AND idx <= $4",
        &[&session_id, &reducer, &clear, &at],
    )
    .await?;
    let pinned = query_opt(
        tx,
        "SELECT k.idx, k.state FROM checkpoints k WHERE k.session_id = $1 AND k.reducer = $2 \
         AND k.idx >= $3 AND k.idx <= $4 AND EXISTS (SELECT 1 FROM pins p \
           WHERE p.session_id = k.session_id AND p.reducer = k.reducer AND p.idx = k.idx) \
         ORDER BY k.idx DESC LIMIT 1",
        &[&session_id, &reducer, &clear, &at],
    )
    .await?;
    let mut best: Option<(i64, serde_json::Value)> = None;
    for row in [head, pinned].into_iter().flatten() {
        let index: i64 = row.try_get(0)?;
        let Json(state): Json<serde_json::Value> = row.try_get(1)?;
        if best.as_ref().is_none_or(|(best, _)| index > *best) {
            best = Some((index, state));
        }
    }
    let snapshot = match best {
        Some((index, state)) => Some(Snapshot::new(index_of(index)?, state)),
        None => None,
    };
    Ok(StateRead::new(snapshot, index_of(clear)?))
}
