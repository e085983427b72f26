//! A worker runtime for a2 session stores: run handlers for declared
//! consumers over any `Arc<dyn Store>`, with leases renewed, retries with
//! backoff, dead letters, idempotent outputs and graceful shutdown.
//!
//! # Guide
//!
//! A *handler* is an async function from a [`Job`] (one attempt of a
//! claimed head: its event, consumer, lane, attempt, and a context to append
//! fenced events or read the session) to the events it returns, or a
//! [`HandlerError`]. The worker stores the returned events atomically with
//! the completion, with the attempt as their cause.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use a2_store_api::{ConsumerDeclaration, NewEvent, Store, Target};
//! use a2_worker::{handler_fn, HandlerError, Job, RetryPolicy, Worker};
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), a2_store_api::StoreError> {
//! let store: Arc<dyn Store> = Arc::new(a2_store_memory::MemoryStore::new());
//!
//! let reply = handler_fn(|job: Job| async move {
//!     if job.event().event_type != "msg" {
//!         // Never retried: the head is dead-lettered with this text.
//!         return Err(HandlerError::permanent("not a message"));
//!     }
//!     // Fenced: refused once this attempt is no longer current.
//!     job.append(vec![NewEvent::new("thinking", json!({}))]).await?;
//!     Ok(vec![NewEvent::new("reply", json!({"text": "hello"}))])
//! });
//!
//! let worker = Worker::builder(Arc::clone(&store))
//!     .consumer(ConsumerDeclaration::targeted("agent"), reply)
//!     .lease_ttl(Duration::from_secs(30))
//!     .max_in_flight(16)
//!     .retry(RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(300), 10))
//!     .build()?
//!     .spawn()?;
//!
//! store
//!     .append(
//!         "session-1",
//!         vec![NewEvent::new("msg", json!({"text": "hi"})).with_target(Target::lane("agent", "main"))],
//!         Default::default(),
//!     )
//!     .await?;
//! # while worker.stats().completed < 1 { tokio::time::sleep(Duration::from_millis(5)).await; }
//!
//! let summary = worker.shutdown().await; // stop claiming, let handlers finish
//! assert_eq!(summary.stats.completed, 1);
//! # Ok(())
//! # }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! A handler schedules follow-up work the way it sends any work: an event
//! it returns or appends whose target carries a not-before
//! ([`Target::delayed`](a2_store_api::Target::delayed) or
//! [`Target::not_before_ms`](a2_store_api::Target::not_before_ms)). Its head
//! is busy until then, so the worker serving that consumer runs it at its
//! time ("remind me in ten minutes"); on a lane, later events wait behind
//! it.
//!
//! `examples/worker.rs` is a complete program that picks SQLite or
//! PostgreSQL by URL (`a2_store::open`) and stops on Ctrl-C.
//!
//! ## What the worker does
//!
//! - **Claims** heads of its consumers across sessions with
//!   `Store::claim_work`, asking for its free slots
//!   ([`max_in_flight`](WorkerBuilder::max_in_flight)). While work trickles
//!   in it makes one claim at a time, for every free slot, which waits in
//!   the store for work ([`claim_wait`](WorkerBuilder::claim_wait)) when
//!   there is none: an idle worker makes one call per wait and is woken by
//!   the store, and a head that arrives goes out at once, however many
//!   other slots are busy. Over a backlog (a claim came back full) it keeps
//!   up to [`claims_in_flight`](WorkerBuilder::claims_in_flight) claims
//!   going, each for a share of the free slots, and asks for a slot as soon
//!   as it frees up, so its slots stay full; on a store that claims a batch
//!   in one step (PostgreSQL: one claim at a time) the next claim waits for
//!   half the slots to be free
//!   ([`claim_low_water`](WorkerBuilder::claim_low_water)), at most
//!   [`CLAIM_LOW_WATER_WAIT`] (5 ms), so claims carry more heads each.
//!   Claims never ask, together, for more heads than there are free slots.
//!   Sessions are served fairly (longest-waiting first). Heads of one lane
//!   are never processed together, by construction: the store hands out one
//!   head per lane at a time.
//! - **Runs** each attempt's handler: one that finishes at its first poll
//!   is completed from the worker's own task, one that waits moves to a
//!   task of its own (or stays in the worker's task,
//!   [`spawn_handlers`](WorkerBuilder::spawn_handlers)). A handler that
//!   panics is a failed attempt, retried like an error; the worker goes on.
//! - **Renews** the lease every [`RENEW_FRACTION`] (a third) of the ttl while
//!   the handler runs. When a renewal reports the claim superseded or no
//!   longer held, the lease is lost: the job's [`LeaseToken`] tells the
//!   handler ([`Job::is_lease_lost`], [`LeaseToken::lost`]), and its late
//!   completion is superseded by the store, never applied (counted in
//!   [`WorkerStats::superseded`]).
//! - **Completes** the head with the returned events, or **fails** it:
//!   a retryable error waits the [`RetryPolicy`]'s delay (or the error's
//!   own), a permanent one is dead-lettered at once, and the failure that
//!   reaches `max_failures` is dead-lettered; the error text is recorded as
//!   the head's `last_error`. A handler still running at the
//!   [`handler_timeout`](WorkerBuilder::handler_timeout) is stopped and fails
//!   with a retry. A completion the store refuses as malformed (invalid
//!   returned events) is dead-lettered with the reason.
//! - **Makes outputs idempotent**: returned events, and events appended with
//!   [`Job::append`], that carry no id get one derived from the attempt
//!   ([`ids`]), and store calls that fail with a transient error (`Busy`,
//!   `Backend`) are repeated with the same request. A completion or append
//!   that was stored although its answer was lost (a timeout, a connection
//!   lost at commit) is then a replay: never stored twice, never a
//!   `PartialDuplicateBatch`.
//! - **Shuts down** gracefully ([`WorkerHandle::shutdown`],
//!   [`ShutdownTrigger`], [`Worker::run_until`]): it stops claiming (a
//!   pending wait is dropped), lets running handlers finish within the
//!   [`shutdown_grace`](WorkerBuilder::shutdown_grace), then stops the rest
//!   and gives their heads back with a failure that never dead-letters and
//!   has no delay, so another worker takes them at once; it returns a
//!   [`ShutdownSummary`]. Nothing is lost: a head given back, or held by a
//!   worker that died, is claimed again (an expired lease counts as a
//!   failure, as the store defines).
//! - **Prunes idle sessions**, when asked
//!   ([`retention`](WorkerBuilder::retention)`(idle_for, every)`): a task
//!   beside the claims deletes, every `every`, the sessions idle for
//!   `idle_for` with nothing left to do (`Store::prune`; dead letters keep
//!   their sessions), a bounded number of pages per round. A failed round
//!   is logged and tried again at the next; it never stops the worker, and
//!   it stops when the worker shuts down.
//!
//! ## Defaults and why
//!
//! | option | default | why |
//! |---|---|---|
//! | lease ttl | 30 s | a dead worker's heads are taken up within half a minute; renewals every 10 s cost one small call per running head |
//! | renewal | every third of the ttl | two renewals in a row may fail (a slow or briefly unreachable store) before the lease lapses |
//! | max in flight | 16 | enough to overlap I/O-bound handlers (model calls), few enough to keep one process's memory and store connections small |
//! | claims | every free slot; over a backlog up to 16 claims at once, each for a share (one at a time on a store that claims a batch in one step, `Store::claims_in_one_step`: PostgreSQL, where that ran 1.54x and 1.45x the jobs/s of 16 at once) | one claim waiting in the store keeps an idle worker to one call per wait and starts a lone head at once; over a backlog, claims at once keep the slots full where a store claims a batch session by session (SQLite; PostgreSQL before its batch claim) and hands the heads over once the last is claimed: 20,000 no-op jobs over 1,000 sessions, the worker against 16 tasks of `claim_work` (limit 1) + `complete_attempt`, PostgreSQL: one claim at a time 0.21x and 0.36x (independent jobs, lanes), 16 at once 0.89x–0.94x; SQLite independent jobs 0.20x before, 0.93x now ([`claims_in_flight`](WorkerBuilder::claims_in_flight)) |
//! | claim wait | 30 s | an idle worker makes two calls a minute; the store wakes it on new work at once |
//! | per-session limit | 1 | sessions take turns: a session with a backlog does not crowd out the others |
//! | retry | exponential from 1 s, ×2, capped at 5 min, jitter 0.5 | short outages are retried quickly, long ones are not hammered, and heads that failed together do not retry together |
//! | max failures | 10 | with the backoff above, a head rides out about 9 minutes of outage before it is dead-lettered |
//! | handler timeout | 10 min | a hung handler (whose lease the worker keeps renewed) cannot hold its head forever, while long model calls still fit |
//! | shutdown grace | 30 s | most running handlers finish; the rest are given back before an orchestrator's kill (often 30 s after its stop signal) |
//! | retention | off | deleting data is a decision: pick the idle time (e.g. 30 days) and enable it on one or a few workers; rounds of at most 10 pages of 100 sessions keep each round's load bounded |
//! | spawn handlers | yes | a handler that waits runs in parallel on a multi-threaded runtime, and one that blocks its thread delays only itself; one that finishes at once costs no task |
//!
//! ## Sizing the store's connections
//!
//! Handlers hold no store connection while they run: a worker borrows one
//! from the store's pool for each call (the claim, each completion or
//! failure, each renewal), so a pool far smaller than
//! [`max_in_flight`](WorkerBuilder::max_in_flight) serves it. What the pool
//! size decides is how many calls of one process the database runs at
//! once, and every worker process adds its own. On a small database host
//! more at once makes the tail worse, not the throughput better: the
//! claims that start handlers queue for the server's cores behind the
//! other calls. Measured on a 2-core host running PostgreSQL and the
//! bench (paced 200 messages/s over 200 sessions, 3 worker processes, 16
//! in flight, no-op handlers; `a2-store bench --workload worker
//! 'postgres://…?pool_size=N'`), append→handler start p99 by pool size per
//! process, two runs each: 1: 31 and 39 ms, 2: 53 and 39 ms, 4: 216 and
//! 116 ms, 16 (the PostgreSQL default): 236 and 307 ms; every run handled
//! 199–200 messages/s. Size the pool of all worker processes together to
//! about what the database host runs at once (its cores, or the
//! connections your service plan allows), not to the handlers in flight.
//!
//! On PostgreSQL, also open the pool's connections before work arrives:
//! `min_idle=N` (at most `pool_size`) opens N connections at connect, warms
//! each (its statements prepared, the schema's catalog entries loaded) and
//! replaces one that closes. A connection opened mid-run makes the calls
//! that wait for it, and its own first calls, slow: that was most of the
//! tail above. The same bench with `pool_size=4`, three alternating pairs:
//! p99 15, 17 and 15 ms with `min_idle=4`, 46, 34 and 38 ms without;
//! `pool_size=16&min_idle=16`: 29 and 26 ms (236 and 307 ms above, without).
//! `a2-store bench` sets `min_idle` to the worker processes' pool size.
//!
//! ## Observability
//!
//! Every attempt runs in a `tracing` span `a2_worker.job` (target
//! `a2_worker`) with fields `session`, `consumer`, `lane`, `index` and
//! `attempt`. In it: `claimed` (INFO, with `failures` so far), `completed`
//! (INFO, `returned`), `failed; retried later` (WARN, `failures`,
//! `retry_in_ms`, `error`), `dead-lettered` (ERROR, `failures`, `error`),
//! `lease lost` (WARN, `reason`), `completion superseded` (WARN),
//! `given back at shutdown` (INFO). Dead letters found by a claim (expired
//! leases at `max_failures`) are ERROR events with the same fields. The
//! worker's own events (`worker started`, `claim failed; trying again`,
//! `worker stopped` with its stats) carry its `holder`. The retention task
//! runs in a span `a2_worker.retention` (`holder`, `idle_for_ms`,
//! `every_ms`): `pruned idle sessions` (INFO, `deleted`, `examined`,
//! `pages`, `more`), each `pruned idle session` (DEBUG, `session`), `prune
//! failed; trying again next round` (WARN, `error`, `code`).
//! [`WorkerHandle::stats`] gives the counts at any time.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod handler;
pub mod ids;
mod job;
mod retention;
mod retry;
mod worker;

pub use handler::{handler_fn, FailureKind, FnHandler, Handler, HandlerError, HandlerResult};
pub use job::{Job, LeaseToken};
pub use retention::{RETENTION_PAGES_PER_ROUND, RETENTION_PAGE_LIMIT};
pub use retry::{Backoff, RetryPolicy};
pub use worker::{
    ShutdownSummary, ShutdownTrigger, Worker, WorkerBuilder, WorkerHandle, WorkerStats,
    CLAIM_ERROR_PAUSE, CLAIM_ERROR_PAUSE_MAX, CLAIM_LOW_WATER_WAIT, DEFAULT_CLAIMS_IN_FLIGHT,
    DEFAULT_CLAIM_BATCH, RENEW_FRACTION,
};
