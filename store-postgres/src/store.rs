//! [`PostgresStore`]: connecting, the retrying transaction wrapper, and the
//! [`Store`] implementation: each method checks its request with the
//! matching `a2_store_api::validate` function, then runs its operation
//! (`ops/`, one file per operation) as one transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use a2_store_api::log::read_bounds;
use a2_store_api::validate;
use a2_store_api::work::{self, WorkSignal};
use a2_store_api::{
    AppendOptions, AppendResult, BulkRedrive, BulkRedriveResult, ClaimRequest, ClaimResult,
    ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, Cursor, DeleteSessionRequest, DeleteSessionResult, EventStream,
    FailRequest, FailResult, ForkRequest, ForkResult, Head, ListSessions, ListWork, NewEvent,
    Pause, PauseRequest, PresenceMeta, PresenceResult, PresenceRow, PruneRequest, PruneResult,
    ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult, RenewRequest,
    RenewResult, RescheduleRequest, RescheduleResult, Result, ResumeRequest, ResumeResult,
    RewritePayloadsRequest, RewritePayloadsResult, SessionInfo, SessionWork, StateRead, StateWrite,
    Store, StoreError, StoredEvent, WakeLogResult,
};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod};
use serde_json::Value;
use tokio::sync::{broadcast, OnceCell};

use crate::error::{db_error, pool_error};
use crate::inner::{Inner, Wrote};
use crate::notify::notify_channel;
use crate::ops;
use crate::ops::subscribe::follow;
use crate::ops::work::work_channel;
use crate::options::{validate_schema_name, PostgresOptions};

/// How many times a transaction that hit a serialization failure or a
/// deadlock is run again before the call fails with `Busy`.
pub const MAX_RETRIES: u32 = 8;

/// The PostgreSQL backend: a pool of connections to one schema of one
/// database, shared safely by any number of stores in any number of processes.
///
/// Every call is one transaction. Writers of a session (append, a
/// completion returning events, clear, reclaim, redrive, wake_log, a
/// subscriber's registration) lock its `sessions` row exclusively, so they
/// run one at a time and indexes stay contiguous. Claims, renewals,
/// failures, completions returning no events and snapshot writes take no
/// session lock: they lock only the cursor rows they change (claims `SKIP
/// LOCKED`, so concurrent workers pass each other; a completion without
/// events only its own cursor), and writers lock every cursor row they read
/// before writing it. Deadlocks and serialization failures are retried up to
/// [`MAX_RETRIES`] times, then surface as `StoreError::Busy`.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
    /// The batching writer of completions (see [`crate::writer`]).
    completer: Arc<crate::writer::Completer>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.inner.schema)
            .field("pool", &self.inner.pool.status())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (a `postgres://` URL or a key=value string), creates
    /// `options.schema` and its tables when missing (versioned migrations
    /// under an advisory lock), and returns a store over a pool of
    /// `options.pool_size` connections whose `search_path` is that schema,
    /// `options.min_idle` of them already open and warmed.
    ///
    /// Errors: `InvalidInput` for a bad URL, schema name, pool size or
    /// `min_idle` above the pool size;
    /// `IncompatibleSchema` when the schema was written by a newer version;
    /// `Unavailable` when no server can be reached (or none is writable
    /// with `target_session_attrs=read-write`) or it does not answer within
    /// [`PostgresOptions::call_bound`](crate::PostgresOptions::call_bound);
    /// `Backend` when it refuses the connection (authentication, a missing
    /// database).
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self> {
        validate_schema_name(&options.schema)?;
        if options.pool_size == 0 {
            return Err(StoreError::invalid_input(
                "pool_size is 0: a store needs at least one connection",
            ));
        }
        if options.min_idle > options.pool_size {
            return Err(StoreError::invalid_input(format!(
                "min_idle is {}, above pool_size {}: keep at most pool_size connections open",
                options.min_idle, options.pool_size
            )));
        }
        let (mut config, tls) = crate::tls::prepare(url)?;
        let timeout_ms = options.statement_timeout.as_millis().max(1);
        let schema = options.schema.clone();
        // Both values are validated: a plain identifier and an integer. A
        // transaction left idle (a stalled client holding a session's lock)
        // is ended by the server after the same timeout. Generic plans: the
        // store's statements are prepared once per connection and each
        // reaches its rows by an index keyed by session or consumer whatever
        // the bound values, so planning them again at each bind (custom
        // plans) only costs time; it was most of the server time of the
        // cross-session claim's statements (bind 0.2-0.3 ms, execute 0.03 ms).
        let startup = format!(
            "-c search_path={schema} -c statement_timeout={timeout_ms} \
             -c idle_in_transaction_session_timeout={timeout_ms} -c plan_cache_mode=force_generic_plan"
        );
        // A read-only store's transactions are made read-only on the server
        // by each pooled connection once it is open (`crate::pool`), not
        // by a startup option: with one, every server would answer
        // read-only, and `target_session_attrs=read-write` would find none.
        let startup = match config.get_options() {
            Some(existing) if !existing.is_empty() => format!("{existing} {startup}"),
            _ => startup,
        };
        config.options(&startup);
        crate::deadline::apply_network_timeout(&mut config, options.network_timeout);
        let call_bound = options.call_bound();
        if let Some(name) = &options.application_name {
            config.application_name(name);
        } else if config.get_application_name().is_none() {
            config.application_name("a2-store-postgres");
        }
        let opening = async {
            let (mut client, connection) = config
                .connect(tls.clone())
                .await
                .map_err(|error| db_error("connecting to PostgreSQL", error))?;
            let driver = tokio::spawn(connection);
            let migrated = if options.read_only {
                crate::schema::check_version(&client, &schema).await
            } else {
                crate::schema::migrate(&mut client, &schema).await
            };
            drop(client);
            let _ = driver.await;
            migrated
        };
        // A server that accepts the connection and then stays silent must
        // not hold `connect` forever either.
        tokio::time::timeout(call_bound, opening)
            .await
            .map_err(|_| crate::deadline::no_answer("connecting to PostgreSQL", call_bound))??;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = crate::pool::build(manager, &options)?;
        crate::pool::fill(&pool, options.min_idle, options.read_only, call_bound).await?;
        let (wakes, _) = broadcast::channel(1024);
        let work_channel = work_channel(&schema);
        let work_notices =
            crate::notify::work_notifier(pool.clone(), work_channel.clone(), call_bound);
        let read_only = options.read_only;
        let inner = Arc::new(Inner {
            pool,
            clock: options.clock,
            ids: options.ids,
            channel: notify_channel(&schema),
            work_channel,
            work_notices,
            signal: WorkSignal::new(),
            schema,
            config,
            tls,
            wakes,
            listener: OnceCell::new(),
            claim_hints: ops::claims::Hints::default(),
            claimed: ops::claims::claimed::Claimed::default(),
            rotation: options.rotation,
            call_bound,
            network_timeout: options.network_timeout,
        });
        if !read_only {
            crate::rotate::start(&inner);
        }
        Ok(Self {
            inner,
            completer: Arc::default(),
        })
    }

    /// Rotates every state table now, whatever its size, except those
    /// holding more than the store's [`Rotation::max_live`](crate::Rotation::max_live) rows and those
    /// whose lock is not granted within its [`Rotation::lock_timeout`](crate::Rotation::lock_timeout):
    /// each table's live rows are kept, its dead versions and index entries
    /// are gone, even while another transaction holds vacuum back. Each
    /// table is rotated in a transaction of its own; calls on it wait
    /// meanwhile. The store also rotates by itself (see [`Rotation`](crate::Rotation)).
    ///
    /// A transaction of another client that started before a rotation and
    /// reads the table after it sees the table empty (`TRUNCATE` is not
    /// MVCC-safe); the store's own calls never do.
    ///
    /// Errors: `Busy` when no pooled connection frees up in time,
    /// `Backend` when the server fails (tables rotated before the failure
    /// stay rotated), `ReadOnly` on a read-only store.
    pub async fn rotate(&self) -> Result<crate::RotationReport> {
        crate::rotate::rotate_now(&self.inner).await
    }

    /// The schema this store works in.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Drops this store's schema with every table and row in it. Meant for
    /// tests and throw-away deployments; other stores on the schema fail after.
    pub async fn drop_schema(&self) -> Result<()> {
        let client = self
            .inner
            .pool
            .get()
            .await
            .map_err(|e| pool_error("dropping the schema", e))?;
        crate::schema::drop_schema(&client, &self.inner.schema).await
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn append(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult> {
        validate::append(session_id, &events, &options)?;
        if events.is_empty() {
            return transact!(self.inner, "checking pending work", |tx| {
                ops::append::append_nothing(&tx, &self.inner, session_id, &options).await?
            });
        }
        let (result, wrote) = transact!(self.inner, "appending events", |tx| {
            ops::append::append(&tx, &self.inner, session_id, &events, &options).await?
        })?;
        self.inner.committed(session_id, wrote);
        Ok(result)
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult> {
        validate::claim_available(&request)?;
        let now = self.inner.clock.now_ms();
        let expires_at = request.lease_expiry(now)?;
        transact!(self.inner, "claiming heads", |tx| {
            ops::claims::claim(
                &tx,
                &request,
                now,
                expires_at,
                &self.inner.claim_hints,
                &self.inner.claimed,
            )
            .await?
        })
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult> {
        validate::renew_claims(&request)?;
        let now = self.inner.clock.now_ms();
        let expires_at = request.lease_expiry(now)?;
        let (result, work) = transact!(self.inner, "renewing claims", |tx| {
            ops::renew::renew(&tx, &request, now, expires_at, &self.inner.claimed).await?
        })?;
        self.inner.committed(
            &request.session_id,
            Wrote {
                events: false,
                work,
            },
        );
        Ok(result)
    }

    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteResult> {
        validate::complete_attempt(&request)?;
        // The whole call, its wait for a batch included, answers within
        // the call bound.
        let deadline = tokio::time::Instant::now() + self.inner.call_bound;
        let what = "completing an attempt";
        // Concurrent completions share a transaction (see `crate::writer`);
        // one the batch leaves alone, and a lone one, run here.
        let (request, _turn) =
            match crate::writer::complete(&self.completer, &self.inner, request, deadline).await {
                crate::writer::Route::Done(result) => return Ok(result),
                crate::writer::Route::Alone(request, turn) => (request, turn),
                crate::writer::Route::Late => {
                    return Err(crate::deadline::no_answer(what, self.inner.call_bound))
                }
            };
        let (result, wrote) = transact!(self.inner, what, deadline = deadline, |tx| {
            ops::complete::complete(&tx, &self.inner, &request).await?
        })?;
        self.inner.committed(&request.session_id, wrote);
        Ok(result)
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult> {
        validate::fail_attempt(&request)?;
        let now = self.inner.clock.now_ms();
        let (result, work) = transact!(self.inner, "failing an attempt", |tx| {
            ops::fail::fail(&tx, &request, now, &self.inner.claimed).await?
        })?;
        self.inner.committed(
            &request.session_id,
            Wrote {
                events: false,
                work,
            },
        );
        Ok(result)
    }

    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>> {
        validate::dead_letters(session_id)?;
        transact!(self.inner, "listing dead letters", |tx| {
            ops::fail::dead_letters(&tx, session_id).await?
        })
    }

    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult> {
        validate::redrive(&request)?;
        let now = self.inner.clock.now_ms();
        let (result, work) = transact!(self.inner, "redriving a dead letter", |tx| {
            ops::fail::redrive(&tx, &request, now).await?
        })?;
        self.inner.committed(
            &request.session_id,
            Wrote {
                events: false,
                work,
            },
        );
        Ok(result)
    }

    async fn clear(&self, request: ClearRequest) -> Result<ClearResult> {
        validate::clear(&request)?;
        let (result, wrote) = transact!(self.inner, "clearing a session", |tx| {
            ops::clear::clear(&tx, &self.inner, &request).await?
        })?;
        self.inner.committed(&request.session_id, wrote);
        Ok(result)
    }

    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult> {
        validate::reclaim(session_id)?;
        transact!(self.inner, "reclaiming cleared rows", |tx| {
            ops::clear::reclaim(&tx, session_id).await?
        })
    }

    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>> {
        validate::read(session_id, &options)?;
        let (after, through) = read_bounds(&options, u64::MAX)?;
        transact!(self.inner, "reading events", |tx| {
            ops::read::read(&tx, session_id, after, through, options.limit).await?
        })
    }

    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult> {
        let log = validate::wake_log(session_id, consumer)?;
        let now = self.inner.clock.now_ms();
        let (result, work) = transact!(self.inner, "waking a log consumer", |tx| {
            ops::cursors::wake_log(&tx, session_id, consumer, log, now).await?
        })?;
        self.inner.committed(
            session_id,
            Wrote {
                events: false,
                work,
            },
        );
        Ok(result)
    }

    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>> {
        validate::cursors(session_id)?;
        let now = self.inner.clock.now_ms();
        transact!(self.inner, "listing cursors", |tx| {
            ops::cursors::cursors(&tx, session_id, now).await?
        })
    }

    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream> {
        validate::subscribe(session_id)?;
        let wakes = self.inner.listen().await;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let incarnation = transact!(self.inner, "registering a subscriber", |tx| {
            ops::subscribe::register(&tx, session_id, &token).await?
        })?;
        Ok(follow(
            self.inner.pool.clone(),
            self.inner.call_bound,
            session_id,
            token,
            incarnation,
            after,
            wakes,
        ))
    }

    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<()> {
        validate::write_state(session_id, reducer, &writes)?;
        transact!(self.inner, "writing reducer state", |tx| {
            ops::snapshots::write_state(&tx, session_id, reducer, &writes).await?
        })
    }

    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead> {
        validate::read_state(session_id, reducer)?;
        transact!(self.inner, "reading reducer state", |tx| {
            ops::snapshots::read_state(&tx, session_id, reducer, options.at).await?
        })
    }

    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult> {
        validate::set_presence(session_id, participant, &values, &meta)?;
        let now = self.inner.clock.now_ms();
        transact!(self.inner, "writing presence", |tx| {
            ops::presence::set_presence(&tx, session_id, participant, &values, &meta, now).await?
        })
    }

    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>> {
        validate::read_presence(session_id)?;
        let now = self.inner.clock.now_ms();
        transact!(self.inner, "reading presence", |tx| {
            ops::presence::read_presence(&tx, session_id, now).await?
        })
    }

    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>> {
        transact!(self.inner, "listing sessions", |tx| {
            ops::read::sessions(&tx, &options).await?
        })
    }

    /// `true`: a `claim_work` of K heads for one targeted consumer claims
    /// its sessions in one transaction (see the README's batch claim).
    fn claims_in_one_step(&self) -> bool {
        true
    }

    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        validate::claim_work(&request)?;
        if request.wait_ms.is_some() {
            // Listen before the first claim: a change committed after it is
            // notified, one committed before it is claimed (the listener also
            // fires the signal once it listens).
            self.inner.listen().await;
        }
        work::claim_work(self, &request).await
    }

    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>> {
        validate::list_work(&request)?;
        let now = self.inner.clock.now_ms();
        transact!(self.inner, "listing work", |tx| {
            ops::work::list_work(&tx, &request, now).await?
        })
    }

    async fn reschedule(&self, request: RescheduleRequest) -> Result<RescheduleResult> {
        validate::reschedule(&request)?;
        let now = self.inner.clock.now_ms();
        let (result, work) = transact!(self.inner, "rescheduling a head", |tx| {
            ops::reschedule::reschedule(&tx, &request, now).await?
        })?;
        self.inner.committed(
            &request.session_id,
            Wrote {
                events: false,
                work,
            },
        );
        Ok(result)
    }

    async fn pause(&self, request: PauseRequest) -> Result<Pause> {
        validate::pause(&request)?;
        let now = self.inner.clock.now_ms();
        let pause = transact!(self.inner, "pausing a consumer", |tx| {
            ops::pause::pause(&tx, &request, now).await?
        })?;
        // A pause replacing a longer one may end sooner: waiters recompute.
        self.inner.wake_claimers();
        Ok(pause)
    }

    async fn resume(&self, request: ResumeRequest) -> Result<ResumeResult> {
        validate::resume(&request)?;
        let now = self.inner.clock.now_ms();
        let result = transact!(self.inner, "resuming a consumer", |tx| {
            ops::pause::resume(&tx, &request, now).await?
        })?;
        if result.resumed {
            self.inner.wake_claimers();
        }
        Ok(result)
    }

    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>> {
        validate::pauses(session_id)?;
        let now = self.inner.clock.now_ms();
        transact!(self.inner, "listing pauses", |tx| {
            ops::pause::pauses(&tx, session_id, now).await?
        })
    }

    async fn redrive_all(&self, request: BulkRedrive) -> Result<BulkRedriveResult> {
        validate::redrive_all(&request)?;
        let now = self.inner.clock.now_ms();
        let (result, work) = transact!(self.inner, "redriving dead letters", |tx| {
            ops::fail::redrive_all(&tx, &request, now).await?
        })?;
        if work {
            self.inner.wake_claimers();
        }
        Ok(result)
    }

    async fn fork(&self, request: ForkRequest) -> Result<ForkResult> {
        validate::fork(&request)?;
        let (result, wrote) = transact!(self.inner, "forking a session", |tx| {
            ops::fork::fork(&tx, &self.inner, &request).await?
        })?;
        self.inner.committed(&request.into, wrote);
        Ok(result)
    }

    async fn delete_session(&self, request: DeleteSessionRequest) -> Result<DeleteSessionResult> {
        validate::delete_session(&request)?;
        let now = self.inner.clock.now_ms();
        let result = transact!(self.inner, "deleting a session", |tx| {
            ops::delete_session::delete_session(&tx, &self.inner.channel, &request, now).await?
        })?;
        if matches!(result, DeleteSessionResult::Deleted { .. }) {
            // This process's streams of the session read again and end.
            self.inner.wake(&request.session_id);
        }
        Ok(result)
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneResult> {
        validate::prune(&request)?;
        let now = self.inner.clock.now_ms();
        let result = transact!(self.inner, "pruning idle sessions", |tx| {
            ops::prune::prune(&tx, &self.inner.channel, &request, now).await?
        })?;
        if !request.dry_run {
            for session_id in &result.sessions {
                self.inner.wake(session_id);
            }
        }
        Ok(result)
    }

    async fn rewrite_payloads(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult> {
        validate::rewrite_payloads(&request)?;
        let now = self.inner.clock.now_ms();
        // Only payloads change: no new rows, so open streams are sent
        // nothing and no claimer is woken.
        transact!(self.inner, "rewriting payloads", |tx| {
            ops::rewrite::rewrite_payloads(&tx, &request, now).await?
        })
    }
}
