//! What every body shares: the payload, the store and session a body runs
//! on (rotated so sessions stay bounded), and the claim/complete steps.

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, ConsumerDeclaration,
    Head, ManualClock, NewEvent, RandomIds, Result, Store, Target,
};
use serde_json::{json, Value};

use crate::StoreFactory;

/// The manual clock's start: 2023-11-14, ms since the epoch.
pub const START_MS: i64 = 1_700_000_000_000;

/// The lease every body claims with; the manual clock never reaches it
/// unless a body moves time on purpose.
pub const LEASE_MS: i64 = 60_000;

/// The approximate size of one event's JSON payload, in bytes.
pub const PAYLOAD_BYTES: usize = 200;

/// Rows one benchmark session may hold before the body moves to a fresh one.
pub(crate) const SESSION_ROWS: u64 = 20_000;

/// Rows one store may hold before the body opens a fresh one (bounds memory).
pub(crate) const STORE_ROWS: u64 = 200_000;

/// Events appended per untimed setup batch.
pub(crate) const SETUP_BATCH: usize = 1_000;

/// Knobs read from the environment, so quick runs can shrink the series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchSettings {
    /// The largest session the scaling series builds (`A2_BENCH_MAX_EVENTS`,
    /// default 1,000,000).
    pub max_events: u64,
}

impl BenchSettings {
    /// The default largest session of the scaling series.
    pub const DEFAULT_MAX_EVENTS: u64 = 1_000_000;

    /// Settings from `A2_BENCH_MAX_EVENTS` (an unset or unparsable value
    /// keeps the default of 1,000,000 events).
    pub fn from_env() -> Self {
        let max_events = std::env::var("A2_BENCH_MAX_EVENTS")
            .ok()
            .and_then(|text| text.trim().replace('_', "").parse::<u64>().ok())
            .unwrap_or(Self::DEFAULT_MAX_EVENTS);
        Self { max_events }
    }
}

impl Default for BenchSettings {
    fn default() -> Self {
        Self {
            max_events: Self::DEFAULT_MAX_EVENTS,
        }
    }
}

/// A JSON payload of about [`PAYLOAD_BYTES`] bytes, different for each `seq`.
pub fn payload(seq: u64) -> Value {
    json!({
        "kind": "message",
        "seq": seq,
        "role": "assistant",
        "text": "The quick brown fox jumps over the lazy dog while the agent writes a reply of moderate length.",
        "meta": {"model": "bench-1", "tokens": 128, "final": true},
    })
}

/// `count` events of `event_type` with ~200-byte payloads, each carrying `targets`.
pub fn work_events(
    event_type: &str,
    count: usize,
    first_seq: u64,
    targets: &[Target],
) -> Vec<NewEvent> {
    (0..count as u64)
        .map(|offset| NewEvent {
            id: None,
            event_type: event_type.to_owned(),
            payload: payload(first_seq + offset).into(),
            cause: None,
            targets: targets.to_vec(),
        })
        .collect()
}

/// Unwraps a store result, aborting the benchmark with the step's name.
pub(crate) fn must<T>(step: &str, result: Result<T>) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("benchmark step '{step}' failed: {error}"),
    }
}

/// A store fresh from `factory`, on `clock` and time-ordered random ids.
pub(crate) async fn open_store(factory: &dyn StoreFactory, clock: &ManualClock) -> Arc<dyn Store> {
    must(
        "create a store",
        factory
            .create(Arc::new(clock.clone()), Arc::new(RandomIds))
            .await,
    )
}

/// Claims the lowest claimable head of `session` (at most one), or panics.
pub(crate) async fn claim_one(
    store: &dyn Store,
    session: &str,
    holder: &str,
    consumers: Option<&[ConsumerDeclaration]>,
) -> Head {
    let request = ClaimRequest {
        session_id: session.to_owned(),
        holder: holder.to_owned(),
        ttl_ms: Some(LEASE_MS),
        consumers: consumers.map(<[_]>::to_vec),
        limit: Some(1),
        ..ClaimRequest::default()
    };
    match must("claim_available", store.claim_available(request).await) {
        ClaimResult::Claimed { mut heads, .. } if !heads.is_empty() => heads.swap_remove(0),
        other => panic!("benchmark expected a claimable head in '{session}', got {other:?}"),
    }
}

/// Claims every claimable head of `session` for `holder`.
pub(crate) async fn claim_all(store: &dyn Store, session: &str, holder: &str) -> Vec<Head> {
    let request = ClaimRequest {
        session_id: session.to_owned(),
        holder: holder.to_owned(),
        ttl_ms: Some(LEASE_MS),
        ..ClaimRequest::default()
    };
    match must("claim_available", store.claim_available(request).await) {
        ClaimResult::Claimed { heads, .. } => heads,
        other => panic!("benchmark expected claimable heads in '{session}', got {other:?}"),
    }
}

/// Completes a claimed head with no returned events, or panics.
pub(crate) async fn complete(
    store: &dyn Store,
    session: &str,
    head: &Head,
    consumers: Option<&[ConsumerDeclaration]>,
) {
    let request = CompleteRequest {
        incarnation: None,
        session_id: session.to_owned(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events: Vec::new(),
        consumers: consumers.map(<[_]>::to_vec),
    };
    match must("complete_attempt", store.complete_attempt(request).await) {
        CompleteResult::Completed { .. } => {}
        other => {
            panic!(
                "benchmark completion of index {} was not applied: {other:?}",
                head.event.index
            )
        }
    }
}

/// Appends `events` in untimed batches of [`SETUP_BATCH`].
pub(crate) async fn append_all(
    store: &dyn Store,
    session: &str,
    events: Vec<NewEvent>,
    consumers: Option<&[ConsumerDeclaration]>,
) {
    let mut rest = events;
    while !rest.is_empty() {
        let tail = rest.split_off(rest.len().min(SETUP_BATCH));
        let options = AppendOptions {
            consumers: consumers.map(<[_]>::to_vec),
            origin_index: None,
        };
        must("append", store.append(session, rest, options).await);
        rest = tail;
    }
}

/// A store and the session a body runs on; moves to a fresh session after
/// [`SESSION_ROWS`] rows and to a fresh store after [`STORE_ROWS`] rows.
pub(crate) struct BenchSession<'f> {
    factory: &'f dyn StoreFactory,
    /// The clock every store of this session runs on.
    pub clock: ManualClock,
    /// The current store.
    pub store: Arc<dyn Store>,
    prefix: String,
    generation: u64,
    session: String,
    session_rows: u64,
    store_rows: u64,
    session_limit: u64,
}

impl<'f> BenchSession<'f> {
    /// A fresh store from `factory` with sessions named after `prefix`.
    pub async fn open(factory: &'f dyn StoreFactory, prefix: &str) -> Self {
        let clock = ManualClock::new(START_MS);
        let store = open_store(factory, &clock).await;
        Self {
            factory,
            clock,
            store,
            prefix: prefix.to_owned(),
            generation: 0,
            session: format!("{prefix}-0"),
            session_rows: 0,
            store_rows: 0,
            session_limit: SESSION_ROWS,
        }
    }

    /// Moves to a fresh session after `rows` rows instead of [`SESSION_ROWS`].
    pub fn with_session_limit(mut self, rows: u64) -> Self {
        self.session_limit = rows.max(1);
        self
    }

    /// The current session id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Makes room for `rows` more rows, moving to a fresh session (and store)
    /// when the current one would pass its bound. Returns `true` when the
    /// session is fresh, so the caller must (re)do its per-session setup.
    pub async fn room(&mut self, rows: u64) -> bool {
        if self.session_rows > 0 && self.session_rows + rows > self.session_limit {
            if self.store_rows + rows > STORE_ROWS {
                self.store = open_store(self.factory, &self.clock).await;
                self.store_rows = 0;
            }
            self.generation += 1;
            self.session = format!("{}-{}", self.prefix, self.generation);
            self.session_rows = 0;
        }
        let fresh = self.session_rows == 0;
        self.session_rows += rows;
        self.store_rows += rows;
        fresh
    }
}
