//! What every case works with: the [`Cx`] (a fresh store, its manual clock,
//! fresh session ids) and short helpers to build events and read outcomes.

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, AppendResult, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, Cursor, CursorKind, CursorRef, Dispatch, FailRequest, FailResult, Head,
    ManualClock, NewEvent, ReadOptions, Result as StoreResult, Store, StoreError, StoredEvent,
    Target,
};
use serde_json::json;

use crate::factory::Capabilities;

/// The instant every case's manual clock starts at (ms since the epoch).
pub(crate) const T0: i64 = 1_700_000_000_000;

/// The lease length cases claim with, ms.
pub(crate) const TTL: i64 = 1_000;

/// The prefix of the ids the suite's id generator hands the store.
pub(crate) const GENERATED: &str = "gen-";

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The backend broke the contract; the text says where and how.
    Fail(String),
    /// The case needs a capability the backend does not declare.
    Skip(String),
}

impl From<StoreError> for Failure {
    /// An unexpected store error fails the case, naming where `?` met it.
    #[track_caller]
    fn from(error: StoreError) -> Self {
        let at = std::panic::Location::caller();
        Failure::Fail(format!(
            "{}:{}: unexpected store error {}: {error}",
            at.file(),
            at.line(),
            error.code()
        ))
    }
}

/// What a case returns: `Ok(())` when the backend behaved.
pub(crate) type CaseResult = std::result::Result<(), Failure>;

/// The observable state of one session, compared before and after calls
/// that must change nothing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct State {
    /// Every readable row.
    pub events: Vec<StoredEvent>,
    /// Every listed cursor with its bookkeeping.
    pub cursors: Vec<Cursor>,
    /// Every dead-lettered head.
    pub dead: Vec<Head>,
}

/// The context of one case: a fresh store built on the suite's manual clock
/// and counter ids, and a random prefix for the session ids it uses.
pub(crate) struct Cx {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// The clock the store reads; only the case moves it.
    pub clock: ManualClock,
    /// What the backend declared it supports.
    pub caps: Capabilities,
    /// Two stores over one fresh database, for multi-instance cases.
    pub pair: Option<[Arc<dyn Store>; 2]>,
    /// Makes the case's session ids unique in a shared database.
    pub prefix: String,
}

impl Cx {
    /// A session id unique to this case.
    pub fn session_id(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// The store clock's time.
    pub fn now(&self) -> i64 {
        a2_store_api::Clock::now_ms(&self.clock)
    }

    /// Moves the store clock forward.
    pub fn advance(&self, ms: i64) -> i64 {
        self.clock.advance(ms)
    }

    /// Appends with default options.
    pub async fn append(&self, session: &str, events: Vec<NewEvent>) -> StoreResult<AppendResult> {
        self.store
            .append(session, events, AppendOptions::default())
            .await
    }

    /// Appends declaring `consumers`.
    pub async fn append_for(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        consumers: Vec<ConsumerDeclaration>,
    ) -> StoreResult<AppendResult> {
        self.store
            .append(
                session,
                events,
                AppendOptions {
                    consumers: Some(consumers),
                    origin_index: None,
                },
            )
            .await
    }

    /// A claim request by `holder` with the suite's TTL and nothing else set.
    pub fn req(&self, session: &str, holder: &str) -> ClaimRequest {
        ClaimRequest {
            session_id: session.to_owned(),
            holder: holder.to_owned(),
            ttl_ms: Some(TTL),
            ..ClaimRequest::default()
        }
    }

    /// Claims everything claimable for `holder`.
    pub async fn claim(&self, session: &str, holder: &str) -> StoreResult<ClaimResult> {
        self.store.claim_available(self.req(session, holder)).await
    }

    /// Claims and insists something was claimed; returns the claimed heads.
    pub async fn claim_heads(
        &self,
        session: &str,
        holder: &str,
    ) -> std::result::Result<Vec<Head>, Failure> {
        let (heads, _, _) = claimed(self.claim(session, holder).await?)?;
        Ok(heads)
    }

    /// Completes `head` with its own attempt, returning `events`.
    pub async fn complete(
        &self,
        session: &str,
        head: &Head,
        events: Vec<NewEvent>,
    ) -> StoreResult<CompleteResult> {
        self.complete_at(
            session,
            &head.cause().cursor_ref(),
            head.dispatch.attempt_count,
            events,
        )
        .await
    }

    /// Completes `(consumer, lane, index)` with `attempt`, returning `events`.
    pub async fn complete_at(
        &self,
        session: &str,
        at: &CursorRef,
        attempt: u32,
        events: Vec<NewEvent>,
    ) -> StoreResult<CompleteResult> {
        self.store
            .complete_attempt(CompleteRequest {
                incarnation: None,
                session_id: session.to_owned(),
                consumer: at.consumer.clone(),
                lane: at.lane.clone(),
                index: at.index,
                attempt,
                events,
                consumers: None,
            })
            .await
    }

    /// A failure request for `head`'s attempt.
    pub fn fail_req(&self, session: &str, head: &Head, error: &str) -> FailRequest {
        FailRequest {
            incarnation: None,
            session_id: session.to_owned(),
            consumer: head.consumer.clone(),
            lane: head.lane.clone(),
            index: head.event.index,
            attempt: head.dispatch.attempt_count,
            error: error.to_owned(),
            max_failures: None,
            retry_after_ms: None,
        }
    }

    /// Fails `head`'s attempt with `max_failures` and no retry delay.
    pub async fn fail(
        &self,
        session: &str,
        head: &Head,
        max_failures: Option<u32>,
    ) -> StoreResult<FailResult> {
        let mut request = self.fail_req(session, head, "boom");
        request.max_failures = max_failures;
        self.store.fail_attempt(request).await
    }

    /// Every readable row of the session.
    pub async fn read_all(&self, session: &str) -> StoreResult<Vec<StoredEvent>> {
        self.store.read(session, ReadOptions::default()).await
    }

    /// The session's cursors.
    pub async fn cursors(&self, session: &str) -> StoreResult<Vec<Cursor>> {
        self.store.cursors(session).await
    }

    /// The session's observable state (rows, cursors, dead letters).
    pub async fn state(&self, session: &str) -> StoreResult<State> {
        Ok(State {
            events: self.read_all(session).await?,
            cursors: self.cursors(session).await?,
            dead: self.store.dead_letters(session).await?,
        })
    }

    /// The two stores of a multi-instance case, or a skip when the backend
    /// cannot open two stores on one database.
    pub fn pair(&self) -> std::result::Result<[Arc<dyn Store>; 2], Failure> {
        if !self.caps.shared_database {
            return Err(Failure::Skip(
                "the backend does not declare `shared_database`".to_owned(),
            ));
        }
        self.pair.clone().ok_or_else(|| {
            Failure::Fail(
                "the backend declares `shared_database` but `create_pair` returned None".to_owned(),
            )
        })
    }
}

/// An event of type `ty` with id `id` and payload `{"id": id}`.
pub(crate) fn ev(ty: &str, id: &str) -> NewEvent {
    NewEvent::new(ty, json!({ "id": id })).with_id(id)
}

/// A `msg` event with id `id`.
pub(crate) fn msg(id: &str) -> NewEvent {
    ev("msg", id)
}

/// A `msg` event with id `id` targeted at `(consumer, lane)`.
pub(crate) fn to_lane(id: &str, consumer: &str, lane: &str) -> NewEvent {
    msg(id).with_target(Target::lane(consumer, lane))
}

/// A `msg` event with id `id` targeted at `consumer`'s own event cursor.
pub(crate) fn to_event(id: &str, consumer: &str) -> NewEvent {
    msg(id).with_target(Target::event(consumer))
}

/// A log consumer declaration.
pub(crate) fn log_consumer(
    name: &str,
    lane: &str,
    types: Option<&[&str]>,
    backfill: bool,
) -> ConsumerDeclaration {
    ConsumerDeclaration::log(
        name,
        lane,
        types.map(|types| types.iter().map(|t| (*t).to_owned()).collect()),
        backfill,
    )
}

/// A cursor ref.
pub(crate) fn at(consumer: &str, lane: Option<&str>, index: u64) -> CursorRef {
    CursorRef::new(consumer, lane, index)
}

/// The heads, dead letters and log head of a `Claimed` result; any other
/// outcome fails the case.
pub(crate) fn claimed(
    result: ClaimResult,
) -> std::result::Result<(Vec<Head>, Vec<Head>, u64), Failure> {
    match result {
        ClaimResult::Claimed {
            heads,
            dead_lettered,
            head,
        } => Ok((heads, dead_lettered, head)),
        other => Err(Failure::Fail(format!("expected Claimed, got {other:?}"))),
    }
}

/// The `retry_at` of a `Busy` result; any other outcome fails the case.
pub(crate) fn busy(result: ClaimResult) -> std::result::Result<i64, Failure> {
    match result {
        ClaimResult::Busy { retry_at } => Ok(retry_at),
        other => Err(Failure::Fail(format!("expected Busy, got {other:?}"))),
    }
}

/// Passes on `Settled`; any other outcome fails the case.
pub(crate) fn settled(result: ClaimResult) -> CaseResult {
    match result {
        ClaimResult::Settled => Ok(()),
        other => Err(Failure::Fail(format!("expected Settled, got {other:?}"))),
    }
}

/// The events of a `Completed` result; `Superseded` fails the case.
pub(crate) fn completed(result: CompleteResult) -> std::result::Result<Vec<StoredEvent>, Failure> {
    match result {
        CompleteResult::Completed { events } => Ok(events),
        other => Err(Failure::Fail(format!("expected Completed, got {other:?}"))),
    }
}

/// The bookkeeping of a head claimed once, by `holder` at [`T0`], under a
/// [`TTL`] lease, and never failed.
pub(crate) fn claimed_once(holder: &str) -> Dispatch {
    let mut dispatch = Dispatch::default();
    dispatch.attempt_count = 1;
    dispatch.first_claimed_at = Some(T0);
    dispatch.last_claimed_at = Some(T0);
    dispatch.claim_holder = Some(holder.into());
    dispatch.claim_expires_at = Some(T0 + TTL);
    dispatch
}

/// The head at position `n` of `heads`, or a failure naming what was there.
pub(crate) fn nth(heads: &[Head], n: usize) -> std::result::Result<Head, Failure> {
    heads.get(n).cloned().ok_or_else(|| {
        Failure::Fail(format!(
            "expected at least {} heads, got {:?}",
            n + 1,
            head_summaries(heads)
        ))
    })
}

/// The only cursor of `cursors`, or a failure listing them.
pub(crate) fn only(cursors: &[Cursor]) -> std::result::Result<Cursor, Failure> {
    match cursors {
        [cursor] => Ok(cursor.clone()),
        other => Err(Failure::Fail(format!(
            "expected exactly one cursor, got {:?}",
            cursor_summaries(other)
        ))),
    }
}

fn lane_text(lane: &Option<String>) -> &str {
    lane.as_deref().unwrap_or("-")
}

/// Heads as `"index consumer/lane #attempt"` (`-` for no lane), for compact comparisons.
pub(crate) fn head_summaries(heads: &[Head]) -> Vec<String> {
    heads
        .iter()
        .map(|head| {
            format!(
                "{} {}/{} #{}",
                head.event.index,
                head.consumer,
                lane_text(&head.lane),
                head.dispatch.attempt_count
            )
        })
        .collect()
}

/// Cursors as `"consumer/lane kind pos=P head=H"` (`head=-` when none).
pub(crate) fn cursor_summaries(cursors: &[Cursor]) -> Vec<String> {
    cursors
        .iter()
        .map(|cursor| {
            let kind = match cursor.kind {
                CursorKind::Event => "event",
                CursorKind::Lane => "lane",
                CursorKind::Log => "log",
            };
            let head = cursor
                .head
                .map_or_else(|| "-".to_owned(), |head| head.to_string());
            format!(
                "{}/{} {kind} pos={} head={head}",
                cursor.consumer,
                lane_text(&cursor.lane),
                cursor.position
            )
        })
        .collect()
}

/// Refs as `"index consumer/lane"`.
pub(crate) fn ref_summaries(refs: &[CursorRef]) -> Vec<String> {
    refs.iter()
        .map(|r| format!("{} {}/{}", r.index, r.consumer, lane_text(&r.lane)))
        .collect()
}

/// The indexes of `events`.
pub(crate) fn idx(events: &[StoredEvent]) -> Vec<u64> {
    events.iter().map(|event| event.index).collect()
}

/// The ids of `events`.
pub(crate) fn ids(events: &[StoredEvent]) -> Vec<String> {
    events.iter().map(|event| event.id.clone()).collect()
}

/// Turns a list of `&str` into owned strings, for comparing with [`head_summaries`] and friends.
pub(crate) fn strs(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

impl Cx {
    /// Rows with `after < index <= through`.
    pub async fn read(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
    ) -> StoreResult<Vec<StoredEvent>> {
        self.store
            .read(
                session,
                ReadOptions {
                    after: Some(after),
                    through,
                    limit: None,
                },
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fails_with_store_error() -> CaseResult {
        Err(StoreError::invalid_input("bad"))?;
        Ok(())
    }

    #[test]
    fn store_errors_name_the_line_of_the_question_mark() {
        match fails_with_store_error() {
            Err(Failure::Fail(reason)) => {
                assert!(reason.contains("support.rs:"), "{reason}");
                assert!(reason.contains("INVALID_INPUT"), "{reason}");
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn summaries_are_compact() {
        let cursor = Cursor::new("agent", None, CursorKind::Event, 2).with_head(Some(3));
        assert_eq!(cursor_summaries(&[cursor]), ["agent/- event pos=2 head=3"]);
        assert_eq!(ref_summaries(&[at("c", Some("L"), 4)]), ["4 c/L"]);
    }
}
