//! [`WorkSource`] for [`PostgresStore`]: what `a2_store_api::work::claim_work`
//! runs `Store::claim_work` with, each step one transaction over the work
//! index (`ops::work`), one session's claim (`ops::claims::claim_session`)
//! or the claims of the next ready sessions, one or several, at once
//! (`ops::claims::claim_next_many`).

use std::time::Duration;

use a2_store_api::work::{NextClaim, ReadyWork, WorkSignal, WorkSource};
use a2_store_api::{ClaimRequest, ClaimResult, ClaimWorkRequest, Clock, Result};
use async_trait::async_trait;

use crate::ops;
use crate::store::PostgresStore;

pub(crate) use crate::notify::FALLBACK_POLL;

#[async_trait]
impl WorkSource for PostgresStore {
    async fn ready_sessions(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        limit: usize,
    ) -> Result<Vec<String>> {
        transact!(self.inner, "finding ready sessions", |tx| {
            ops::work::ready_sessions(&tx, request, now_ms, skip, limit).await?
        })
    }

    /// One statement: the ready sessions, or the earliest time when there
    /// are none.
    async fn ready_or_earliest(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        limit: usize,
    ) -> Result<ReadyWork> {
        transact!(self.inner, "finding ready sessions", |tx| {
            ops::work::ready_or_earliest(&tx, request, now_ms, skip, limit).await?
        })
    }

    async fn claim_session(&self, request: ClaimRequest) -> Result<ClaimResult> {
        a2_store_api::validate::claim_available(&request)?;
        let now = self.inner.clock.now_ms();
        let expires_at = request.lease_expiry(now)?;
        transact!(self.inner, "claiming heads of a session", |tx| {
            ops::claims::claim_session(&tx, &request, now, expires_at, &self.inner.claimed).await?
        })
    }

    async fn earliest_ready(&self, request: &ClaimWorkRequest) -> Result<Option<i64>> {
        let now = self.inner.clock.now_ms();
        transact!(self.inner, "finding the earliest ready work", |tx| {
            ops::work::earliest_ready(&tx, request, now).await?
        })
    }

    /// One targeted consumer in every session: the pick and the session's
    /// claim in the same two round trips, as the claim of several sessions
    /// with one wanted (`ops::claims::claim_next_many`); other requests
    /// read ready sessions first.
    async fn claim_next(
        &self,
        request: &ClaimWorkRequest,
        now_ms: i64,
        skip: &[String],
        head_limit: usize,
    ) -> Result<NextClaim> {
        let mut answers = self
            .claim_next_many(request, now_ms, skip, 1, head_limit)
            .await?;
        // One session wanted: one answer (`Exhausted` only follows a
        // session when fewer were picked than wanted, which one cannot be).
        Ok(if answers.is_empty() {
            NextClaim::Unsupported
        } else {
            answers.swap_remove(0)
        })
    }

    /// One targeted consumer in every session: every picked session's
    /// pick, walk, lease writes and work rows in one transaction of two
    /// round trips (`ops::claims::claim_next_many`), whether one session is
    /// wanted or several; other requests answer `Unsupported`, and
    /// `claim_work` reads ready sessions first.
    async fn claim_next_many(
        &self,
        request: &ClaimWorkRequest,
        _now_ms: i64,
        skip: &[String],
        sessions_wanted: usize,
        head_limit: usize,
    ) -> Result<Vec<NextClaim>> {
        if !ops::claims::one_step(request) {
            return Ok(vec![NextClaim::Unsupported]);
        }
        let now = self.inner.clock.now_ms();
        let expires_at = request.lease_expiry(now)?;
        let wanted = ops::claims::Wanted {
            skip,
            sessions: sessions_wanted.max(1),
            heads: head_limit,
        };
        transact!(self.inner, "claiming ready sessions", |tx| {
            ops::claims::claim_next_many(
                &tx,
                request,
                now,
                expires_at,
                &wanted,
                &self.inner.claimed,
            )
            .await?
        })
    }

    fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    fn signal(&self) -> &WorkSignal {
        &self.inner.signal
    }

    fn fallback_poll(&self) -> Option<Duration> {
        Some(FALLBACK_POLL)
    }
}
