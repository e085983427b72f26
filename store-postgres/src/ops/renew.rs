//! `renew_claims`: extends the leases of the claims the holder still holds
//! and reports the ones that can never complete. It takes no session lock:
//! it locks the named cursor rows, then reads the clear index.

use std::collections::{BTreeSet, HashMap};

use a2_store_api::dispatch::cleared;
use a2_store_api::order::compare_refs;
use a2_store_api::{HeldClaim, RenewResult, RenewVerdict};

use crate::cursor_table::{load_many, put_all};
use crate::db::{read_session, Tx};
use crate::error::TxResult;
use crate::ops::work::Touched;
use crate::rows::{index_of, key_of, CursorKey, CursorRow};

/// The body of [`Store::renew_claims`](a2_store_api::Store::renew_claims)
/// for a validated request, with `now` and the new `expires_at`; the
/// renewed consumers' work rows are rewritten from their heads (a lease
/// ended sooner is found when it ends). Also returns whether a work row was
/// made ready.
pub(crate) async fn renew(
    tx: &Tx<'_>,
    session_id: &str,
    holder: &str,
    claims: &[HeldClaim],
    now: i64,
    expires_at: i64,
) -> TxResult<(RenewResult, bool)> {
    let mut ordered: Vec<&HeldClaim> = claims.iter().collect();
    ordered.sort_by(|a, b| compare_refs(&a.cursor, &b.cursor));
    let key = |claim: &HeldClaim| {
        let r = &claim.cursor;
        key_of(&r.consumer, r.lane.as_deref(), r.index)
    };
    let keys: BTreeSet<CursorKey> = ordered.iter().filter_map(|claim| key(claim)).collect();
    let keys: Vec<CursorKey> = keys.into_iter().collect();
    let mut cursors: HashMap<CursorKey, CursorRow> = load_many(tx, session_id, &keys, true)
        .await?
        .into_iter()
        .map(|cursor| (cursor.key(), cursor))
        .collect();
    // Read after the rows are locked: a clear that touched them has
    // committed, none can start.
    let clear = index_of(read_session(tx, session_id).await?.clear)?;
    let mut result = RenewResult::default();
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
    put_all(
        tx,
        session_id,
        renewed.iter().filter_map(|key| cursors.get(key)),
    )
    .await?;
    // A lease renewed shorter or longer moves its consumer's row with it.
    let mut touched = Touched::new(now);
    for cursor in renewed.iter().filter_map(|key| cursors.get(key)) {
        touched.rewrite(cursor);
    }
    let ready = touched.flush(tx, session_id).await?;
    Ok((result, ready))
}
