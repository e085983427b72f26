//! `renew_claims`: extending the leases a holder still holds.

use a2_store_api::dispatch::cleared;
use a2_store_api::order::compare_refs;
use a2_store_api::{RenewRequest, RenewResult, RenewVerdict, StoreError};
use rusqlite::Connection;

use crate::cursor_rows;
use crate::pool::Ctx;
use crate::session;
use crate::work::{self, Wake};

/// Extends the leases `holder` still holds; reports claims that can never
/// complete. The work rows of the consumers whose leases moved are
/// rewritten from their heads, so a shortened lease is found when it ends.
pub(crate) fn renew(
    tx: &Connection,
    ctx: &Ctx,
    request: &RenewRequest,
) -> Result<(RenewResult, Wake), StoreError> {
    let now = ctx.clock.now_ms();
    let expires_at = request.lease_expiry(now)?;
    let session = session::find(tx, &request.session_id)?;
    let clear = session.as_ref().map_or(0, |session| session.clear);
    let mut claims = request.claims.clone();
    claims.sort_by(|a, b| compare_refs(&a.cursor, &b.cursor));
    let mut result = RenewResult::default();
    if session
        .as_ref()
        .is_some_and(|session| !session.incarnation_current(request.incarnation))
    {
        // Claims of another incarnation (the session was deleted since) can
        // never complete.
        result.superseded = claims.into_iter().map(|claim| claim.cursor).collect();
        return Ok((result, Wake::default()));
    }
    let mut renewed_consumers: Vec<String> = Vec::new();
    for claim in claims {
        let r = &claim.cursor;
        if cleared(r.index, clear) {
            result.superseded.push(claim.cursor);
            continue;
        }
        let Some(session) = &session else { continue };
        let Some(mut found) =
            cursor_rows::find(tx, session, &r.consumer, r.lane.as_deref(), r.index)?
        else {
            continue;
        };
        let verdict =
            found
                .dispatch
                .renew_verdict(found.head, found.position, &claim, &request.holder, now);
        match verdict {
            RenewVerdict::Renew => {
                found.dispatch.renew(expires_at);
                cursor_rows::save_claim(tx, &found)?;
                if !renewed_consumers.contains(&claim.cursor.consumer) {
                    renewed_consumers.push(claim.cursor.consumer.clone());
                }
                result.renewed.push(claim.cursor);
            }
            RenewVerdict::Superseded => result.superseded.push(claim.cursor),
            RenewVerdict::Skip => {}
        }
    }
    let mut wake = Wake::default();
    if let Some(session) = &session {
        for consumer in &renewed_consumers {
            work::touch(tx, session, consumer, now, &mut wake)?;
        }
    }
    Ok((result, wake))
}
