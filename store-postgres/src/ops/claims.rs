//! `claim_available` and `renew_claims`: the lease operations. They take no
//! session lock: each locks only the cursor rows it changes (claims skip
//! rows another transaction holds), then reads the clear index.
//!
//! A claim promotes the busy heads whose expiry passed, then walks only the
//! ready ones (see [`sql`] for the statements and indexes), so the
//! heads other holders have in flight cost it nothing.

use a2_store_api::order::{compare_heads, compare_refs};
use a2_store_api::{ClaimRequest, ClaimResult, ClaimStep, HeldClaim, RenewResult, RenewVerdict};

use crate::cursor_table::{
    load_many, put_all, refresh_log_types, release_pins, served_names, CursorKey,
};
use crate::db::{execute, query, query_opt, read_state, sql_index, Tx};
use crate::error::TxResult;
mod sql;
use crate::rows::{
    decode_event, lane_key, slot_key, CursorRow, CURSOR_COLUMNS, CURSOR_WIDTH, EVENT_COLUMNS,
};

/// The body of [`Store::claim_available`](a2_store_api::Store::claim_available)
/// for a validated request, with `now` and the lease `expires_at`.
pub(crate) async fn claim(
    tx: &Tx<'_>,
    request: &ClaimRequest,
    now: i64,
    expires_at: i64,
) -> TxResult<ClaimResult> {
    let session_id = request.session_id.as_str();
    let consumers = request.consumers.as_deref();
    let served = served_names(consumers);
    let through = request.through.map(crate::db::bound);
    let mut ex_consumers = Vec::with_capacity(request.exclude.len());
    let mut ex_lanes = Vec::with_capacity(request.exclude.len());
    let mut ex_slots = Vec::with_capacity(request.exclude.len());
    for excluded in &request.exclude {
        // An event cursor beyond any index cannot exist: nothing to exclude.
        let Ok(slot) = slot_key(excluded.lane.as_deref(), excluded.index) else {
            continue;
        };
        ex_consumers.push(excluded.consumer.clone());
        ex_lanes.push(lane_key(excluded.lane.as_deref()).to_owned());
        ex_slots.push(slot);
    }
    // Promote before the walk, so it sees the heads whose claim ran out.
    // Independent of the type refresh: pipelined.
    futures::try_join!(
        refresh_log_types(tx, session_id, consumers),
        promote(tx, session_id, now),
    )?;
    let sql = sql::walk(&format!("{CURSOR_COLUMNS}, {EVENT_COLUMNS}"));
    let mut heads = Vec::new();
    let mut dead_lettered = Vec::new();
    // Lock only as many heads as the limit still needs (dead letters do not
    // count, so fetch again after them), lowest first; heads other claimers
    // hold are skipped, so workers pass each other.
    loop {
        let wanted = request
            .limit
            .map(|limit| i64::try_from(limit.saturating_sub(heads.len())).unwrap_or(i64::MAX));
        let rows = query(
            tx,
            &sql,
            &[
                &session_id,
                &through,
                &served,
                &ex_consumers,
                &ex_lanes,
                &ex_slots,
                &now,
                &wanted,
            ],
        )
        .await?;
        let mut claimable = Vec::with_capacity(rows.len());
        for row in &rows {
            let cursor = CursorRow::decode(row, 0)?;
            let event = decode_event(row, CURSOR_WIDTH, session_id)?;
            claimable.push((cursor, event));
        }
        claimable.sort_by(|(a, _), (b, _)| {
            (a.head, &a.consumer, &a.lane).cmp(&(b.head, &b.consumer, &b.lane))
        });
        let mut changed = Vec::with_capacity(claimable.len());
        let mut dead_now = 0;
        for (mut cursor, event) in claimable {
            // Never visit a head twice in this call (a lease may already be
            // over when `expires_at_ms` is in the past).
            ex_consumers.push(cursor.consumer.clone());
            ex_lanes.push(cursor.lane.clone());
            ex_slots.push(cursor.slot);
            // The walk's `FREE` is this rule: only heads free at `now` come back.
            debug_assert_eq!(cursor.dispatch.busy_until(now), None);
            let holder = request.holder.clone();
            let step = cursor
                .dispatch
                .take(holder, now, expires_at, request.max_failures);
            let head = cursor.to_head(event, 0)?;
            match step {
                ClaimStep::Claim => heads.push(head),
                ClaimStep::DeadLetter => {
                    release_pins(tx, session_id, &cursor).await?;
                    dead_lettered.push(head);
                    dead_now += 1;
                }
            }
            changed.push(cursor);
        }
        put_all(tx, session_id, &changed).await?;
        // Without a limit one pass took every candidate; with one, fetch
        // again only when dead letters used up part of the rows fetched.
        let full = wanted.is_some_and(|wanted| i64::try_from(rows.len()).unwrap_or(0) >= wanted);
        if wanted.is_none() || dead_now == 0 || !full {
            break;
        }
    }
    if !heads.is_empty() || !dead_lettered.is_empty() {
        // Read after the heads are locked: any clear that touched them has
        // committed, so the clear index reported is the one they live under.
        let state = read_state(tx, session_id).await?;
        let clear_index = (state.clear > 0)
            .then(|| crate::rows::index_of(state.clear))
            .transpose()?;
        for head in heads.iter_mut().chain(dead_lettered.iter_mut()) {
            head.clear_index = clear_index;
        }
        heads.sort_by(compare_heads);
        dead_lettered.sort_by(compare_heads);
        return Ok(ClaimResult::Claimed {
            heads,
            dead_lettered,
            head: crate::rows::index_of(state.head)?,
        });
    }
    // Nothing taken: busy heads free at their expiry; a head another
    // transaction holds locked right now may free now.
    let busy = query_opt(
        tx,
        &sql::retry_at(),
        &[
            &session_id,
            &through,
            &served,
            &ex_consumers,
            &ex_lanes,
            &ex_slots,
            &now,
        ],
    )
    .await?;
    let retry_at: Option<i64> = match busy {
        Some(row) => row.try_get(0)?,
        None => None,
    };
    Ok(match retry_at {
        Some(retry_at) => ClaimResult::Busy { retry_at },
        None => ClaimResult::Settled,
    })
}

/// Moves the session's busy heads whose expiry passed by `now` to the ready
/// heads (see [`sql::DUE`]). Nothing is written when none is due,
/// the usual case.
async fn promote(tx: &Tx<'_>, session_id: &str, now: i64) -> TxResult<()> {
    let due = query(tx, sql::DUE, &[&session_id, &now]).await?;
    if due.is_empty() {
        return Ok(());
    }
    let mut consumers = Vec::with_capacity(due.len());
    let mut lanes = Vec::with_capacity(due.len());
    let mut slots = Vec::with_capacity(due.len());
    for row in &due {
        consumers.push(row.try_get::<_, String>(0)?);
        lanes.push(row.try_get::<_, String>(1)?);
        slots.push(row.try_get::<_, i64>(2)?);
    }
    execute(tx, sql::PROMOTE, &[&session_id, &consumers, &lanes, &slots]).await?;
    Ok(())
}

/// The body of [`Store::renew_claims`](a2_store_api::Store::renew_claims)
/// for a validated request, with `now` and the new `expires_at`.
pub(crate) async fn renew(
    tx: &Tx<'_>,
    session_id: &str,
    holder: &str,
    claims: &[HeldClaim],
    now: i64,
    expires_at: i64,
) -> TxResult<RenewResult> {
    let mut ordered: Vec<&HeldClaim> = claims.iter().collect();
    ordered.sort_by(|a, b| compare_refs(&a.cursor, &b.cursor));
    let mut keys: Vec<CursorKey> = Vec::new();
    for claim in &ordered {
        let r = &claim.cursor;
        if let Ok(slot) = slot_key(r.lane.as_deref(), r.index) {
            keys.push((
                r.consumer.clone(),
                lane_key(r.lane.as_deref()).to_owned(),
                slot,
            ));
        }
    }
    keys.sort();
    keys.dedup();
    let mut cursors: std::collections::HashMap<CursorKey, CursorRow> =
        load_many(tx, session_id, &keys, true)
            .await?
            .into_iter()
            .map(|c| ((c.consumer.clone(), c.lane.clone(), c.slot), c))
            .collect();
    // Read after the rows are locked (see `fail`).
    let clear = read_state(tx, session_id).await?.clear;
    let mut result = RenewResult::default();
    let mut renewed_keys = std::collections::BTreeSet::new();
    for claim in ordered {
        let r = &claim.cursor;
        let Ok(index) = sql_index("index", r.index) else {
            continue;
        };
        if index <= clear {
            result.superseded.push(r.clone());
            continue;
        }
        let Ok(slot) = slot_key(r.lane.as_deref(), r.index) else {
            continue;
        };
        let key = (
            r.consumer.clone(),
            lane_key(r.lane.as_deref()).to_owned(),
            slot,
        );
        let Some(cursor) = cursors.get_mut(&key) else {
            continue;
        };
        let head = cursor.head_index()?;
        let position = crate::rows::index_of(cursor.position)?;
        match cursor
            .dispatch
            .renew_verdict(head, position, claim, holder, now)
        {
            RenewVerdict::Renew => {
                cursor.dispatch.claim_expires_at = Some(expires_at);
                renewed_keys.insert(key);
                result.renewed.push(r.clone());
            }
            RenewVerdict::Superseded => result.superseded.push(r.clone()),
            RenewVerdict::Skip => {}
        }
    }
    let changed = renewed_keys.iter().filter_map(|key| cursors.get(key));
    put_all(tx, session_id, changed).await?;
    Ok(result)
}
