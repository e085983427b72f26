//! `renew_claims`: extends the leases of the claims the holder still holds
//! and reports the ones that can never complete. It takes no session lock:
//! it locks the named cursor rows, then reads the clear index.

use std::collections::{BTreeSet, HashMap};

use a2_store_api::dispatch::cleared;
use a2_store_api::order::compare_refs;
use a2_store_api::{HeldClaim, RenewRequest, RenewResult, RenewVerdict};

use tokio_postgres::types::ToSql;

use crate::cursor_table::{load_many_sql, CursorWrites, PUT_ALL};
use crate::db::{decode_state, Stmt, Tx, READ_SESSION};
use crate::error::TxResult;
use crate::ops::claims::claimed::Claimed;
use crate::ops::work::{Touched, TouchedPlan};
use crate::rows::{index_of, key_of, CursorKey, CursorRow};

/// The body of [`Store::renew_claims`](a2_store_api::Store::renew_claims)
/// for a validated request, with `now` and the new `expires_at`; the
/// renewed consumers' work rows are rewritten from their heads (a lease
/// ended sooner is found when it ends). Also returns whether a work row was
/// made ready. The rows renewed are remembered in `claimed` once committed.
/// A request naming another `incarnation` than the session's has every
/// claim superseded and changes nothing.
pub(crate) async fn renew(
    tx: &Tx<'_>,
    request: &RenewRequest,
    now: i64,
    expires_at: i64,
    claimed: &Claimed,
) -> TxResult<(RenewResult, bool)> {
    let session_id = request.session_id.as_str();
    let (incarnation, holder) = (request.incarnation, request.holder.as_str());
    let claims = request.claims.as_slice();
    let mut ordered: Vec<&HeldClaim> = claims.iter().collect();
    ordered.sort_by(|a, b| compare_refs(&a.cursor, &b.cursor));
    let key = |claim: &HeldClaim| {
        let r = &claim.cursor;
        key_of(&r.consumer, r.lane.as_deref(), r.index)
    };
    let keys: BTreeSet<CursorKey> = ordered.iter().filter_map(|claim| key(claim)).collect();
    let keys: Vec<CursorKey> = keys.into_iter().collect();
    // The locks and the session read in one round trip; read after the
    // rows are locked: a clear that touched them has committed, none can start.
    let consumers: Vec<&str> = keys.iter().map(|key| key.0.as_str()).collect();
    let lanes: Vec<&str> = keys.iter().map(|key| key.1.as_str()).collect();
    let slots: Vec<i64> = keys.iter().map(|key| key.2).collect();
    let load_params: [&(dyn ToSql + Sync); 4] = [&session_id, &consumers, &lanes, &slots];
    let read_params: [&(dyn ToSql + Sync); 1] = [&session_id];
    let load = load_many_sql(true);
    let mut answers = tx
        .pipeline(&[
            Stmt::new(&load, &load_params),
            Stmt::new(READ_SESSION, &read_params),
        ])
        .await?;
    let state = answers
        .pop()
        .unwrap_or_default()
        .first()
        .map(decode_state)
        .transpose()?
        .unwrap_or_default();
    let mut cursors: HashMap<CursorKey, CursorRow> = HashMap::new();
    for row in answers.pop().unwrap_or_default() {
        let cursor = CursorRow::decode(&row, 0)?;
        cursors.insert(cursor.key(), cursor);
    }
    let clear = index_of(state.clear)?;
    let mut result = RenewResult::default();
    if !state.current(incarnation) {
        // Another incarnation of the session: nothing it names is held.
        result.superseded = ordered.iter().map(|claim| claim.cursor.clone()).collect();
        return Ok((result, false));
    }
    let mut renewed = BTreeSet::new();
    for claim in ordered {
        let r = &claim.cursor;
        if cleared(r.index, clear) {
            result.superseded.push(r.clone());
            continue;
        }
        // No cursor can hold an index beyond any stored one: not reported.
        let Some(key) = key(claim) else { continue };
        let Some(cursor) = cursors.get_mut(&key) else {
            continue;
        };
        let head = cursor.head_index()?;
        let position = index_of(cursor.position)?;
        match cursor
            .dispatch
            .renew_verdict(head, position, claim, holder, now)
        {
            RenewVerdict::Renew => {
                cursor.dispatch.renew(expires_at);
                renewed.insert(key);
                result.renewed.push(r.clone());
            }
            RenewVerdict::Superseded => result.superseded.push(r.clone()),
            RenewVerdict::Skip => {}
        }
    }
    // The writes, the work rows and `COMMIT` in one round trip. A lease
    // renewed shorter or longer moves its consumer's row with it.
    let writes = CursorWrites::new(
        session_id,
        renewed.iter().filter_map(|key| cursors.get(key)),
    );
    let write_params = writes.as_ref().map(CursorWrites::params);
    let mut touched = Touched::new(now);
    for cursor in renewed.iter().filter_map(|key| cursors.get(key)) {
        touched.rewrite(cursor);
    }
    let plan = touched.plan(session_id);
    let work = plan.params();
    let mut statements = Vec::with_capacity(2);
    if let Some(params) = &write_params {
        statements.push(Stmt::new(PUT_ALL, params));
    }
    TouchedPlan::push(&work, &mut statements);
    let mut answers = tx.commit_with(&statements).await?;
    let ready = plan.finish(&mut answers, &work)?;
    for cursor in renewed.iter().filter_map(|key| cursors.get(key)) {
        claimed.remember(session_id, cursor, &state);
    }
    Ok((result, ready))
}
