//! `renew_claims`: extending the leases a holder still holds, and
//! reporting the claims that can never complete.

use a2_store_api::{order, RenewRequest, RenewResult, RenewVerdict, Result};

use crate::cursor_table::Lookup;
use crate::session::{Env, Session};

impl Session {
    /// Extends leases still held by `holder`; reports claims that can never
    /// complete ([`Dispatch::renew_verdict`] decides each live one). Refs are
    /// processed in `(index, consumer, lane)` order.
    ///
    /// [`Dispatch::renew_verdict`]: a2_store_api::Dispatch::renew_verdict
    pub fn renew(&mut self, env: Env<'_>, request: RenewRequest) -> Result<RenewResult> {
        let now = env.clock.now_ms();
        let expires_at = request.lease_expiry(now)?;
        let mut claims = request.claims;
        if !self.incarnation_current(request.incarnation) {
            claims.sort_by(|a, b| order::compare_refs(&a.cursor, &b.cursor));
            let superseded = claims.into_iter().map(|claim| claim.cursor).collect();
            return Ok(RenewResult::new(Vec::new(), superseded));
        }
        claims.sort_by(|a, b| order::compare_refs(&a.cursor, &b.cursor));
        let clear = self.log.clear_index();
        let mut result = RenewResult::default();
        for claim in claims {
            let verdict = if claim.cursor.index <= clear {
                RenewVerdict::Superseded
            } else {
                let cursor = &claim.cursor;
                match self
                    .cursors
                    .lookup(&cursor.consumer, cursor.lane.as_deref(), cursor.index)
                {
                    Lookup::Missing => RenewVerdict::Skip,
                    Lookup::Finished(_) => RenewVerdict::Superseded,
                    Lookup::Live(id, cursor) => {
                        let verdict = cursor.dispatch.renew_verdict(
                            cursor.head,
                            cursor.position,
                            &claim,
                            &request.holder,
                            now,
                        );
                        if verdict == RenewVerdict::Renew {
                            self.cursors.modify(id, |cursor| {
                                cursor.dispatch.renew(expires_at);
                            });
                        }
                        verdict
                    }
                }
            };
            match verdict {
                RenewVerdict::Renew => result.renewed.push(claim.cursor),
                RenewVerdict::Superseded => result.superseded.push(claim.cursor),
                RenewVerdict::Skip => {}
            }
        }
        Ok(result)
    }
}
