//! [`SqliteStore`]: the `Store` trait over the pool, one transaction per call.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use a2_store_api::retention::idle_cutoff;
use a2_store_api::{
    validate, work, AppendOptions, AppendResult, BulkRedrive, BulkRedriveResult, ClaimRequest,
    ClaimResult, ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest,
    CompleteResult, ConsumerDeclaration, Cursor, DeleteSessionRequest, DeleteSessionResult,
    EventStream, FailRequest, FailResult, ForkRequest, ForkResult, Head, ListSessions, ListWork,
    NewEvent, Pause, PauseRequest, PresenceMeta, PresenceResult, PresenceRow, PruneRequest,
    PruneResult, ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult,
    RenewRequest, RenewResult, RescheduleRequest, RescheduleResult, ResumeRequest, ResumeResult,
    RewritePayloadsRequest, RewritePayloadsResult, SessionInfo, SessionWork, StateRead, StateWrite,
    Store, StoreError, StoredEvent, WakeLogResult,
};
use async_trait::async_trait;
use serde_json::Value;

use crate::connection::Location;
use crate::notify::{notifier_for, Notifier};
use crate::options::SqliteOptions;
use crate::pool::{Access, Pool};
use crate::work::Wake;
use crate::writer::{Body, Fire, Settings, Writer};
use crate::{
    append, claim_work, claims, clear, complete, cursors, delete_session, fail, fork, list_work,
    pause, presence, prune, read, redrive_all, renew, reschedule, rewrite, snapshots, subscribe,
};

/// The SQLite backend of the session store.
///
/// Guarantees: every call is all or nothing: a read is one SQLite
/// transaction, a write runs on the file's one writer of the process,
/// alone or with other queued calls in one transaction, inside a savepoint
/// of its own, and is answered once committed; so a failed or interrupted
/// call changes nothing. Calls never block the async runtime; several
/// stores (in this or other processes) may share one file safely, waiting
/// up to the busy timeout for other processes. Cheap to clone: clones
/// share the connections.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
    notifier: Arc<Notifier>,
    /// The file's writer (`None`: in memory or read-only, whose writes, if
    /// any, go through the pool).
    writer: Option<Arc<Writer>>,
    /// What this store's writes need of the writer's connection.
    settings: Settings,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` in WAL mode and
    /// applies pending migrations. Fails with a typed error naming the path
    /// when the directory does not exist, the file is read-only, not a SQLite
    /// database or corrupt, and with `IncompatibleSchema` (leaving the file
    /// untouched) when a newer build wrote it.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let location = Location::File(path.as_ref().to_path_buf());
        Self::open_at(location, options)
    }

    /// Opens a private in-memory database (one connection; gone when the
    /// store and its clones are dropped).
    pub fn open_in_memory(options: SqliteOptions) -> Result<Self, StoreError> {
        Self::open_at(Location::Memory, options)
    }

    fn open_at(location: Location, options: SqliteOptions) -> Result<Self, StoreError> {
        let settings = Settings::of(&options)?;
        let pool = Pool::open(location.clone(), options.clone())?;
        // The file exists now, so its canonical path and inode name it in
        // the registry.
        let notifier = notifier_for(&location, &options, pool.identity());
        let writer = match location {
            Location::File(_) if !options.read_only => {
                Some(notifier.writer(pool.location(), pool.options())?)
            }
            _ => None,
        };
        Ok(Self {
            notifier,
            pool: Arc::new(pool),
            writer,
            settings,
        })
    }

    /// Runs `body` as one write: on a file through its writer (committed
    /// with whatever else is queued, answered once durable), in memory on
    /// the pool; then announces what the body asks (the writer does so once
    /// per batch).
    pub(crate) async fn write<T, F>(&self, body: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Body<T>,
    {
        self.pool.check_writable()?;
        let written = match &self.writer {
            Some(writer) => {
                writer
                    .write(self.settings, self.pool.ctx().clone(), body)
                    .await
            }
            None => self
                .pool
                .run(Access::Write, body)
                .await
                .map(|(value, fire)| {
                    self.notifier.fire(fire);
                    value
                }),
        };
        written.map_err(|error| self.pool.with_path(error))
    }

    /// The work index and claims as the shared claim loop uses them.
    fn work_source(&self) -> claim_work::Work<'_> {
        claim_work::Work {
            store: self,
            pool: &self.pool,
            wake: self.notifier.work(),
        }
    }
}

/// What a committed write announces: `commits` when it wrote rows
/// subscribers read, the work signal when it moved a work row earlier.
fn fired(commits: bool, wake: Wake) -> Fire {
    Fire {
        commits,
        work: wake.woke(),
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn append(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult, StoreError> {
        validate::append(session_id, &events, &options)?;
        let session_id = session_id.to_owned();
        self.write(move |tx, ctx| {
            let appended = append::append(tx, ctx, &session_id, &events, &options)?;
            let fire = fired(appended.wrote, appended.wake);
            Ok((appended.result, fire))
        })
        .await
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult, StoreError> {
        validate::claim_available(&request)?;
        self.write(move |tx, ctx| Ok((claims::claim(tx, ctx, &request)?, Fire::NONE)))
            .await
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult, StoreError> {
        validate::renew_claims(&request)?;
        self.write(move |tx, ctx| {
            let (result, wake) = renew::renew(tx, ctx, &request)?;
            Ok((result, fired(false, wake)))
        })
        .await
    }

    async fn complete_attempt(
        &self,
        request: CompleteRequest,
    ) -> Result<CompleteResult, StoreError> {
        validate::complete_attempt(&request)?;
        self.write(move |tx, ctx| {
            let completed = complete::complete(tx, ctx, &request)?;
            let fire = fired(completed.wrote, completed.wake);
            Ok((completed.result, fire))
        })
        .await
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult, StoreError> {
        validate::fail_attempt(&request)?;
        self.write(move |tx, ctx| {
            let (result, wake) = fail::fail(tx, ctx, &request)?;
            Ok((result, fired(false, wake)))
        })
        .await
    }

    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>, StoreError> {
        validate::dead_letters(session_id)?;
        let session_id = session_id.to_owned();
        self.pool
            .run(Access::Read, move |tx, _| {
                fail::dead_letters(tx, &session_id)
            })
            .await
    }

    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult, StoreError> {
        validate::redrive(&request)?;
        self.write(move |tx, ctx| {
            let (result, wake) = fail::redrive(tx, ctx, &request)?;
            Ok((result, fired(false, wake)))
        })
        .await
    }

    async fn clear(&self, request: ClearRequest) -> Result<ClearResult, StoreError> {
        validate::clear(&request)?;
        self.write(move |tx, ctx| {
            let result = clear::clear(tx, ctx, &request)?;
            let wrote = matches!(result, ClearResult::Cleared { .. });
            Ok((result, fired(wrote, Wake::default())))
        })
        .await
    }

    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult, StoreError> {
        validate::reclaim(session_id)?;
        let session_id = session_id.to_owned();
        self.write(move |tx, _| Ok((clear::reclaim(tx, &session_id)?, Fire::NONE)))
            .await
    }

    async fn read(
        &self,
        session_id: &str,
        options: ReadOptions,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        validate::read(session_id, &options)?;
        let session_id = session_id.to_owned();
        self.pool
            .run(Access::Read, move |tx, _| {
                read::read(tx, &session_id, &options)
            })
            .await
    }

    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult, StoreError> {
        let log = validate::wake_log(session_id, consumer)?.clone();
        let session_id = session_id.to_owned();
        let consumer = consumer.clone();
        self.write(move |tx, ctx| {
            let (result, wake) = cursors::wake_log(tx, ctx, &session_id, &consumer, &log)?;
            Ok((result, fired(false, wake)))
        })
        .await
    }

    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>, StoreError> {
        validate::cursors(session_id)?;
        let session_id = session_id.to_owned();
        self.pool
            .run(Access::Read, move |tx, ctx| {
                cursors::cursors(tx, &session_id, ctx.clock.now_ms())
            })
            .await
    }

    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream, StoreError> {
        validate::subscribe(session_id)?;
        // The commit receiver is taken before the incarnation is read, so a
        // delete committed after the read wakes the stream.
        let commits = self.notifier.subscribe();
        let incarnation = subscribe::incarnation(&self.pool, session_id).await?;
        Ok(subscribe::follow(
            &self.pool,
            commits,
            self.notifier.work(),
            session_id,
            incarnation,
            after,
        ))
    }

    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<(), StoreError> {
        validate::write_state(session_id, reducer, &writes)?;
        let session_id = session_id.to_owned();
        let reducer = reducer.to_owned();
        self.write(move |tx, _| {
            snapshots::write_state(tx, &session_id, &reducer, writes.clone())?;
            Ok(((), Fire::NONE))
        })
        .await
    }

    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead, StoreError> {
        validate::read_state(session_id, reducer)?;
        let session_id = session_id.to_owned();
        let reducer = reducer.to_owned();
        self.pool
            .run(Access::Read, move |tx, _| {
                snapshots::read_state(tx, &session_id, &reducer, options.at)
            })
            .await
    }

    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult, StoreError> {
        validate::set_presence(session_id, participant, &values, &meta)?;
        let session_id = session_id.to_owned();
        let participant = participant.to_owned();
        self.write(move |tx, ctx| {
            let now = ctx.clock.now_ms();
            let result = presence::set_presence(tx, &session_id, &participant, &values, meta, now)?;
            Ok((result, Fire::NONE))
        })
        .await
    }

    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>, StoreError> {
        validate::read_presence(session_id)?;
        let session_id = session_id.to_owned();
        let now = self.pool.ctx().clock.now_ms();
        self.pool
            .run(Access::Read, move |tx, _| {
                presence::read_presence(tx, &session_id, now)
            })
            .await
    }

    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>, StoreError> {
        self.pool
            .run(Access::Read, move |tx, _| read::sessions(tx, &options))
            .await
    }

    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult, StoreError> {
        validate::claim_work(&request)?;
        // A claim writes, even when it finds nothing to claim this time.
        self.pool.check_writable()?;
        let source = self.work_source();
        if request.wait_ms.is_none() {
            return work::claim_work(&source, &request).await;
        }
        // Counted as a waiter from before the watcher starts until the
        // call ends or is dropped, so the watcher runs exactly that long.
        let _waiting = self.notifier.work().signal().subscribe();
        self.notifier.work().watch_other_processes();
        work::claim_work(&source, &request).await
    }

    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>, StoreError> {
        validate::list_work(&request)?;
        self.pool
            .run(Access::Read, move |tx, ctx| {
                list_work::list_work(tx, ctx, &request)
            })
            .await
    }

    async fn reschedule(&self, request: RescheduleRequest) -> Result<RescheduleResult, StoreError> {
        validate::reschedule(&request)?;
        self.write(move |tx, ctx| {
            let (result, wake) = reschedule::reschedule(tx, ctx, &request)?;
            Ok((result, fired(false, wake)))
        })
        .await
    }

    async fn pause(&self, request: PauseRequest) -> Result<Pause, StoreError> {
        validate::pause(&request)?;
        self.write(move |tx, ctx| Ok((pause::pause(tx, &request, ctx.clock.now_ms())?, Fire::NONE)))
            .await
    }

    async fn resume(&self, request: ResumeRequest) -> Result<ResumeResult, StoreError> {
        validate::resume(&request)?;
        self.write(move |tx, ctx| {
            let result = pause::resume(tx, &request, ctx.clock.now_ms())?;
            // Its heads may be claimable now: waiting claimers look again.
            let fire = Fire {
                commits: false,
                work: result.resumed,
            };
            Ok((result, fire))
        })
        .await
    }

    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>, StoreError> {
        validate::pauses(session_id)?;
        let session_id = session_id.map(str::to_owned);
        self.pool
            .run(Access::Read, move |tx, ctx| {
                pause::pauses(tx, session_id.as_deref(), ctx.clock.now_ms())
            })
            .await
    }

    async fn redrive_all(&self, request: BulkRedrive) -> Result<BulkRedriveResult, StoreError> {
        validate::redrive_all(&request)?;
        self.write(move |tx, ctx| {
            let (result, wake) = redrive_all::redrive_all(tx, ctx, &request)?;
            let fire = Fire {
                commits: false,
                work: wake.woke() || !result.redriven.is_empty(),
            };
            Ok((result, fire))
        })
        .await
    }

    async fn fork(&self, request: ForkRequest) -> Result<ForkResult, StoreError> {
        validate::fork(&request)?;
        // The fork's rows are new rows of its session: subscribers are told.
        self.write(move |tx, ctx| {
            let forked = fork::fork(tx, &request, ctx.clock.now_ms())?;
            Ok((forked, fired(true, Wake::default())))
        })
        .await
    }

    async fn delete_session(
        &self,
        request: DeleteSessionRequest,
    ) -> Result<DeleteSessionResult, StoreError> {
        validate::delete_session(&request)?;
        self.write(move |tx, ctx| {
            let result = delete_session::delete_session(tx, ctx, &request)?;
            // Subscribers of the session read again and learn it is gone.
            let deleted = matches!(result, DeleteSessionResult::Deleted { .. });
            Ok((result, fired(deleted, Wake::default())))
        })
        .await
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneResult, StoreError> {
        validate::prune(&request)?;
        if !request.dry_run {
            self.pool.check_writable()?;
        }
        let now = self.pool.ctx().clock.now_ms();
        let cutoff = idle_cutoff(now, request.idle_for_ms);
        let include = request.include_dead_letters;
        let page = {
            let request = request.clone();
            self.pool
                .run(Access::Read, move |tx, _| {
                    let page = prune::candidates(tx, &request, cutoff)?;
                    if !request.dry_run {
                        return Ok((page, Vec::new()));
                    }
                    // A dry run decides the whole page in this one read.
                    let mut prunable = Vec::new();
                    for candidate in &page {
                        if prune::prune_one(tx, candidate, include, false, now)? {
                            prunable.push(candidate.name.clone());
                        }
                    }
                    Ok((page, prunable))
                })
                .await?
        };
        let (page, mut deleted) = page;
        let next = (page.len() == request.page_size())
            .then(|| page.last().map(prune::Candidate::from))
            .flatten();
        if request.dry_run {
            return Ok(PruneResult::new(deleted, page.len(), next));
        }
        // One transaction per session: a big session's delete never holds
        // other writers back for a whole page.
        for candidate in &page {
            let one = candidate.clone();
            let gone = self
                .write(move |tx, ctx| {
                    let gone = prune::prune_one(tx, &one, include, true, ctx.clock.now_ms())?;
                    Ok((gone, fired(gone, Wake::default())))
                })
                .await?;
            if gone {
                deleted.push(candidate.name.clone());
            }
        }
        let limit = request.page_size();
        let (presence, checkpoints) = self
            .write(move |tx, _| Ok((prune::sweep(tx, now, limit)?, Fire::NONE)))
            .await?;
        Ok(PruneResult::new(deleted, page.len(), next).with_swept(presence, checkpoints))
    }

    async fn rewrite_payloads(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult, StoreError> {
        validate::rewrite_payloads(&request)?;
        // Only payloads change: no new rows for subscribers (open streams
        // are sent nothing) and no work to wake.
        self.write(move |tx, ctx| {
            let result = rewrite::rewrite_payloads(tx, ctx, &request)?;
            Ok((result, fired(false, Wake::default())))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use a2_store_api::{ClaimWorkRequest, ConsumerDeclaration, NewEvent, ReadOptions, Store};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_ends_and_closes_the_file_when_the_last_store_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let first = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let second = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let writer = first.writer.as_ref().map(Arc::downgrade).unwrap();
        assert!(
            Arc::ptr_eq(&writer.upgrade().unwrap(), second.writer.as_ref().unwrap()),
            "two stores of one process on one file share its writer"
        );
        first
            .append(
                "s",
                vec![NewEvent::new("m", serde_json::json!(1))],
                Default::default(),
            )
            .await
            .unwrap();
        drop(first);
        assert!(writer.upgrade().is_some(), "the second store still writes");
        second
            .append(
                "s",
                vec![NewEvent::new("m", serde_json::json!(2))],
                Default::default(),
            )
            .await
            .unwrap();
        drop(second);
        assert!(writer.upgrade().is_none(), "the last store took the writer");
        // Its thread ended and its connection closed within the drop: the
        // last connection to close checkpoints and removes the WAL file.
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        assert!(
            !std::path::Path::new(&wal).exists(),
            "the file was closed when the last store was dropped"
        );
        let reopened = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let rows = reopened.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(rows.len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_wait_leaves_no_waiter_and_no_watcher() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db"), SqliteOptions::default()).unwrap();
        let request =
            ClaimWorkRequest::new("w", vec![ConsumerDeclaration::targeted("agent")], 1_000)
                .with_wait_ms(60_000);
        let wake = Arc::clone(store.notifier.work());
        let waiting = {
            let store = store.clone();
            tokio::spawn(async move { store.claim_work(request).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "nothing to claim: it waits");
        assert!(wake.signal().waiters() > 0);
        assert!(
            wake.is_watching(),
            "a file store watches other processes meanwhile"
        );
        waiting.abort();
        assert!(waiting.await.is_err_and(|error| error.is_cancelled()));
        assert_eq!(
            wake.signal().waiters(),
            0,
            "the dropped wait left no waiter"
        );
        let mut stopped = false;
        for _ in 0..200 {
            if !wake.is_watching() {
                stopped = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(stopped, "the watcher ends once nobody waits");
    }
}
