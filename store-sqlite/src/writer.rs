//! The one writer of a database file in this process: every write call of
//! every store of the process on the file runs on its single connection,
//! and calls queued together commit in one transaction, each inside its own
//! `SAVEPOINT` so that a failed call changes nothing while the others
//! commit.
//!
//! A call runs in one of two places:
//!
//! - **in the caller's thread** when the writer is idle and nothing is
//!   queued (on a multi-threaded runtime through `block_in_place`, with no
//!   runtime inline): a batch of one, no thread hop, so a lone caller pays
//!   what a call on its own connection paid;
//! - **on the writer thread** otherwise: the caller queues the call on a
//!   bounded queue (waiting, cancellably, while it is full) and awaits its
//!   answer. The thread takes the connection, then everything queued at
//!   that moment (up to [`MAX_BATCH`] calls, never waiting for more), runs
//!   the calls in one transaction and answers each caller after the
//!   `COMMIT` returned, i.e. once it is durable at the configured level.
//!
//! A call whose caller dropped its future before the call started is never
//! run; once started it commits or rolls back as a whole with its batch.
//! The thread ends when the last store on the file is dropped (the queue
//! closes), after answering what was queued.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use a2_store_api::StoreError;
use rusqlite::Connection;
use tokio::runtime::RuntimeFlavor;
use tokio::sync::{mpsc, oneshot};

use crate::connection::{open_connection, Location};
use crate::errors::{commit_unconfirmed, failure_text, is_busy, sql_error, SqlContext};
use crate::moved::FileIdentity;
use crate::notify::Notifier;
use crate::options::{Durability, SqliteOptions, SQLITE_MAX_PAGE_COUNT};
use crate::pool::Ctx;

/// The most calls one transaction of the writer thread commits.
pub(crate) const MAX_BATCH: usize = 64;

/// How many calls may wait in the queue; later callers wait for a place.
pub(crate) const QUEUE: usize = 1024;

/// How long a writer sleeps between tries of the database's write lock
/// while another process holds it: short and the same every time. SQLite's
/// own busy handler (`PRAGMA busy_timeout`) sleeps longer after each
/// failed try (1, 2, 5, 10, ... up to 100 ms), which left the lock free
/// and unclaimed for most of that sleep once its holder committed.
const BUSY_PAUSE: Duration = Duration::from_millis(1);

/// How long the writer holding the [`Turnstile`] sleeps between tries: it
/// is the only one trying then, so it may try often without crowding the
/// others, and the lock is idle for little more than this between two
/// processes' transactions.
const TURN_PAUSE: Duration = Duration::from_micros(200);

/// The writer's busy handler: sleeps [`BUSY_PAUSE`] and tries again, twice
/// (`tries`: how many times it was called for this lock), then answers
/// `SQLITE_BUSY` to the writer's loop, which keeps the deadline
/// (`busy_timeout`) and the turns.
fn wait_for_lock(tries: i32) -> bool {
    if tries >= 2 {
        return false;
    }
    std::thread::sleep(BUSY_PAUSE);
    true
}

/// The busy handler while the writer holds the [`Turnstile`]: sleeps
/// [`TURN_PAUSE`], up to 10 tries (2 ms) before the writer's loop checks
/// the deadline.
fn wait_for_turn(tries: i32) -> bool {
    if tries >= 10 {
        return false;
    }
    std::thread::sleep(TURN_PAUSE);
    true
}

/// How long a writer waits for the database's lock before it takes the
/// [`Turnstile`] and so its turn.
const STARVING: Duration = Duration::from_millis(2);

/// What a committed call asks the writer to announce once its batch
/// committed (at most once per batch each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Fire {
    /// Rows were appended (or a clear marker written): wake subscribers.
    pub commits: bool,
    /// A work row moved earlier: wake claimers waiting for work.
    pub work: bool,
}

impl Fire {
    /// Nothing to announce.
    pub(crate) const NONE: Self = Self {
        commits: false,
        work: false,
    };

    fn merge(&mut self, other: Self) {
        self.commits |= other.commits;
        self.work |= other.work;
    }
}

/// The per-store settings a call needs its connection to have: stores of
/// one process on one file may have been opened with different options.
/// A batch only holds calls of equal settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    durability: Durability,
    page_cap: Option<i64>,
    busy_timeout: Duration,
}

impl Settings {
    /// The settings of a store opened with `options` (validated at open).
    pub(crate) fn of(options: &SqliteOptions) -> Result<Self, StoreError> {
        Ok(Self {
            durability: options.durability,
            page_cap: options.page_cap()?,
            busy_timeout: options.busy_timeout,
        })
    }

    /// Sets them on `conn` (pragmas are connection settings, allowed
    /// outside a transaction only, which is where the writer calls this).
    fn apply(&self, conn: &Connection) -> Result<(), StoreError> {
        conn.pragma_update(None, "synchronous", self.durability.pragma_value())
            .ctx("setting the durability")?;
        let pages = self
            .page_cap
            .unwrap_or_else(|| i64::try_from(SQLITE_MAX_PAGE_COUNT).unwrap_or(i64::MAX));
        // An integer bound as the pragma's value, never text formatted in.
        conn.pragma_update(None, "max_page_count", pages)
            .ctx("setting the page cap")?;
        // The deadline (`busy_timeout`) is kept by the writer's loop.
        conn.busy_handler(Some(wait_for_lock))
            .ctx("setting the busy handler")?;
        Ok(())
    }
}

/// A queued or running call, its answer kept until its batch committed.
trait Job: Send {
    fn settings(&self) -> Settings;
    /// The caller dropped its future: a call not started is not run.
    fn abandoned(&self) -> bool;
    /// Runs the call on the open transaction, keeping its value.
    fn run(&mut self, conn: &Connection) -> Result<Fire, StoreError>;
    /// Forgets a kept value (its transaction was rolled back, the call
    /// runs again).
    fn reset(&mut self);
    /// Answers the caller with the kept value (its batch committed).
    fn committed(self: Box<Self>);
    /// Answers the caller with `error`: nothing of the call was applied.
    fn failed(self: Box<Self>, error: StoreError);
}

/// A write body: runs in the transaction, returns its value and what to
/// announce after the commit.
pub(crate) trait Body<T>:
    Fn(&Connection, &Ctx) -> Result<(T, Fire), StoreError> + Send + 'static
{
}

impl<T, F> Body<T> for F where
    F: Fn(&Connection, &Ctx) -> Result<(T, Fire), StoreError> + Send + 'static
{
}

struct Call<T, F> {
    body: F,
    ctx: Ctx,
    settings: Settings,
    value: Option<T>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T: Send + 'static, F: Body<T>> Job for Call<T, F> {
    fn settings(&self) -> Settings {
        self.settings
    }

    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run(&mut self, conn: &Connection) -> Result<Fire, StoreError> {
        let (value, fire) = guarded(|| (self.body)(conn, &self.ctx))?;
        self.value = Some(value);
        Ok(fire)
    }

    fn reset(&mut self) {
        self.value = None;
    }

    fn committed(self: Box<Self>) {
        let answer = self.value.ok_or_else(|| StoreError::Backend {
            message: "internal error: a committed call kept no answer".to_owned(),
            source: None,
        });
        // A caller that stopped waiting no longer needs the answer.
        let _ = self.reply.send(answer);
    }

    fn failed(self: Box<Self>, error: StoreError) {
        let _ = self.reply.send(Err(error));
    }
}

/// Runs `body`, turning a panic into a typed error.
fn guarded<T>(body: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        Err(StoreError::Backend {
            message: "internal error: a database call panicked; it was rolled back".to_owned(),
            source: None,
        })
    })
}

/// The writer's connection and the settings last applied to it.
struct Slot {
    conn: Option<Connection>,
    applied: Option<Settings>,
}

/// What the writer thread and the callers running inline share.
struct Core {
    location: Location,
    /// The first store's options: a lost connection is reopened with them.
    options: SqliteOptions,
    /// The file the writer opened, checked once per batch before `COMMIT`.
    opened: FileIdentity,
    slot: Mutex<Slot>,
    /// Where the announcements go (gone once every store is dropped).
    notifier: Weak<Notifier>,
    /// The file's turnstile (see [`Turnstile`]).
    turnstile: Turnstile,
}

/// The handle stores use; the writer thread ends when the last one is
/// dropped, and the drop waits for it (so, as when a pool closes its
/// connections, the file is closed and checkpointed when the last store
/// is dropped, and a store opened right after does not meet a closing
/// connection's lock).
#[derive(Debug)]
pub(crate) struct Writer {
    core: Arc<Core>,
    /// `None` only while dropping.
    queue: Option<mpsc::Sender<Box<dyn Job>>>,
    /// How many write calls of the process on the file are under way
    /// (from their start until they are answered or dropped).
    callers: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it answered what is queued.
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            // The thread itself may drop the last handle (announcing a
            // commit as the last store goes): it then ends on its own.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// Opens the writer's connection to the file at `location` (identified
    /// as `opened`) and starts its thread.
    pub(crate) fn start(
        location: &Location,
        options: &SqliteOptions,
        opened: FileIdentity,
        notifier: Weak<Notifier>,
    ) -> Result<Self, StoreError> {
        // Checked now, applied by the first batch.
        Settings::of(options)?;
        let conn = open_connection(location, options)?;
        let core = Arc::new(Core {
            location: location.clone(),
            options: options.clone(),
            opened,
            slot: Mutex::new(Slot {
                conn: Some(conn),
                // Applied by the first batch: the busy handler among them.
                applied: None,
            }),
            notifier,
            turnstile: Turnstile::open(location),
        });
        let (queue, calls) = mpsc::channel(QUEUE);
        let thread_core = Arc::clone(&core);
        let thread = std::thread::Builder::new()
            .name("a2-sqlite-writer".to_owned())
            .spawn(move || serve(thread_core, calls))
            .map_err(|error| {
                StoreError::backend("starting the database's writer thread".to_owned(), error)
            })?;
        Ok(Self {
            core,
            queue: Some(queue),
            callers: Arc::default(),
            thread: Some(thread),
        })
    }

    /// Runs `body` as a write of a store with `settings` and `ctx`: in this
    /// thread when the writer is idle, else queued to the writer thread;
    /// answered once committed. Dropping the future before the call started
    /// means it never runs; after, it commits or rolls back as a whole.
    pub(crate) async fn write<T, F>(
        &self,
        settings: Settings,
        ctx: Ctx,
        body: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Body<T>,
    {
        // A task calling in a loop still yields now and then.
        tokio::task::coop::consume_budget().await;
        let _caller = Caller::count(&self.callers);
        let (reply, answered) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Call {
            body,
            ctx,
            settings,
            value: None,
            reply,
        });
        if let Err(job) = self.try_inline(job) {
            let queue = self.queue.as_ref().ok_or_else(stopped)?;
            queue.send(job).await.map_err(|_| stopped())?;
        }
        answered.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Runs `job` in this thread, a batch of one, if it is the only write
    /// under way (nothing queued, no other caller waiting for an answer,
    /// the connection free; on a multi-threaded runtime through
    /// `block_in_place`, with no runtime inline); else gives it back.
    /// With other callers about, it queues: the writer thread then commits
    /// them together instead of one by one.
    fn try_inline(&self, job: Box<dyn Job>) -> Result<(), Box<dyn Job>> {
        if self.callers.load(Ordering::SeqCst) > 1 {
            return Err(job);
        }
        let flavor = tokio::runtime::Handle::try_current()
            .ok()
            .map(|handle| handle.runtime_flavor());
        let inline = matches!(flavor, Some(RuntimeFlavor::MultiThread) | None);
        let idle = self
            .queue
            .as_ref()
            .is_some_and(|queue| queue.capacity() == queue.max_capacity());
        if !inline || !idle {
            return Err(job);
        }
        let Ok(slot) = self.core.slot.try_lock() else {
            return Err(job);
        };
        let run = move || self.core.run_batch(slot, vec![job]);
        match flavor {
            Some(_) => tokio::task::block_in_place(run),
            None => run(),
        }
        Ok(())
    }
}

/// One write call under way, counted until it is answered or dropped.
struct Caller(Arc<AtomicUsize>);

impl Caller {
    fn count(callers: &Arc<AtomicUsize>) -> Self {
        callers.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(callers))
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn stopped() -> StoreError {
    StoreError::Backend {
        message: "internal error: the database's writer thread stopped; reopen the store"
            .to_owned(),
        source: None,
    }
}

/// The writer thread: serves batches until every store is gone, then
/// closes its connection (unless a handle still holds the core).
fn serve(core: Arc<Core>, mut calls: mpsc::Receiver<Box<dyn Job>>) {
    let mut carried: Option<Box<dyn Job>> = None;
    loop {
        let first = match carried.take() {
            Some(job) => job,
            None => match calls.blocking_recv() {
                Some(job) => job,
                None => return,
            },
        };
        // The connection first (an inline caller may hold it), then
        // whatever queued meanwhile joins the batch.
        let slot = core.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let settings = first.settings();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match calls.try_recv() {
                Ok(job) if job.settings() == settings => batch.push(job),
                Ok(job) => {
                    carried = Some(job);
                    break;
                }
                Err(_) => break,
            }
        }
        core.run_batch(slot, batch);
    }
}

impl Core {
    /// Runs `jobs` (all of one settings) in one transaction and answers
    /// every caller: its value once the `COMMIT` returned, or its error.
    fn run_batch(&self, mut slot: MutexGuard<'_, Slot>, jobs: Vec<Box<dyn Job>>) {
        let mut jobs: Vec<Box<dyn Job>> = jobs.into_iter().filter(|job| !job.abandoned()).collect();
        let Some(settings) = jobs.first().map(|job| job.settings()) else {
            return;
        };
        let conn = match self.connection(&mut slot, settings) {
            Ok(conn) => conn,
            Err(error) => return fail_all(jobs, error),
        };
        let deadline = Instant::now().checked_add(settings.busy_timeout);
        let waiting_since = Instant::now();
        let mut held = false;
        let outcome = loop {
            let starving = waiting_since.elapsed() >= STARVING;
            let was_held = held;
            let may_begin = self.turnstile.may_begin(&mut held, starving);
            if held && !was_held {
                // Only the busy handler's pace changes: nothing to undo
                // should it fail (as in `let_go`).
                let _ = conn.busy_handler(Some(wait_for_turn));
            }
            let tried = if may_begin {
                attempt(conn, &mut jobs, &self.opened, &self.turnstile, &mut held)
            } else {
                Attempt::Busy(not_our_turn())
            };
            match tried {
                Attempt::Done(outcome) => break outcome,
                Attempt::Busy(error) => {
                    if deadline.is_some_and(|end| Instant::now() >= end) {
                        break Err(error);
                    }
                    std::thread::sleep(if held { TURN_PAUSE } else { BUSY_PAUSE });
                }
                // A call failed in a way that ended the whole transaction:
                // it was answered and removed, the others run again.
                Attempt::Again => {}
            }
            for job in &mut jobs {
                job.reset();
            }
        };
        let_go(&self.turnstile, conn, &mut held);
        if !conn.is_autocommit() {
            // The rollback failed: closing the connection rolls back, and
            // the next batch opens another.
            slot.conn = None;
        }
        match outcome {
            Ok(fire) => {
                if let Some(notifier) = self.notifier.upgrade() {
                    notifier.fire(fire);
                }
                for job in jobs {
                    job.committed();
                }
            }
            Err(error) => fail_all(jobs, error),
        }
    }

    /// The writer's connection with `settings` applied, reopened if lost.
    fn connection<'s>(
        &self,
        slot: &'s mut Slot,
        settings: Settings,
    ) -> Result<&'s Connection, StoreError> {
        if slot.conn.is_none() {
            slot.applied = None;
            slot.conn = Some(open_connection(&self.location, &self.options)?);
        }
        let conn = slot.conn.as_ref().ok_or_else(stopped)?;
        if slot.applied != Some(settings) {
            slot.applied = None;
            settings.apply(conn)?;
            slot.applied = Some(settings);
        }
        Ok(conn)
    }
}

/// Answers every job with `error`: the last one gets it as it is (so a
/// lone caller keeps SQLite's error as the source, with its extended
/// code), the others a copy.
fn fail_all(jobs: Vec<Box<dyn Job>>, error: StoreError) {
    let mut jobs = jobs.into_iter();
    let last = jobs.next_back();
    for job in jobs {
        job.failed(copy_error(&error));
    }
    if let Some(job) = last {
        job.failed(error);
    }
}

/// The same failure for another caller of the batch: code, message and
/// the source's text (a source is not `Clone`).
fn copy_error(error: &StoreError) -> StoreError {
    let source = std::error::Error::source(error).map(|source| -> a2_store_api::BoxError {
        match source.downcast_ref::<crate::DatabaseMoved>() {
            Some(moved) => Box::new(moved.clone()),
            None => source.to_string().into(),
        }
    });
    match error {
        StoreError::Busy { message, .. } => StoreError::Busy {
            message: message.clone(),
            source,
        },
        StoreError::StorageFull { message, .. } => StoreError::StorageFull {
            message: message.clone(),
            source,
        },
        StoreError::Backend { message, .. } => StoreError::Backend {
            message: message.clone(),
            source,
        },
        StoreError::Unavailable { message, .. } => StoreError::Unavailable {
            message: message.clone(),
            source,
        },
        other => StoreError::Backend {
            message: other.to_string(),
            source,
        },
    }
}

/// How one try of a batch's transaction ended.
enum Attempt {
    /// Committed (what to announce) or failed for every remaining call.
    Done(Result<Fire, StoreError>),
    /// The write lock stayed taken by another process: try again.
    Busy(StoreError),
    /// One call's failure ended the transaction; run the rest again.
    Again,
}

fn exec(conn: &Connection, sql: &str, doing: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .map(|_| ())
        .ctx(doing)
}

/// One transaction over `jobs`: failed calls are answered and removed
/// from `jobs`; the rest are committed together, or all fail.
fn attempt(
    conn: &Connection,
    jobs: &mut Vec<Box<dyn Job>>,
    opened: &FileIdentity,
    turnstile: &Turnstile,
    held: &mut bool,
) -> Attempt {
    let begun = exec(conn, "BEGIN IMMEDIATE", "starting a transaction");
    if begun.is_ok() {
        let_go(turnstile, conn, held);
    }
    if let Err(error) = begun {
        return if is_busy(&error) {
            Attempt::Busy(error)
        } else {
            Attempt::Done(Err(error))
        };
    }
    let outcome = run_calls(conn, jobs);
    let outcome = match outcome {
        Ok(fire) if jobs.is_empty() => Err(fire),
        Ok(fire) => Ok(fire),
        Err(again) => {
            rollback(conn);
            return again;
        }
    };
    let fire = match outcome {
        Ok(fire) => fire,
        // Every call failed and was answered: nothing to commit.
        Err(fire) => {
            rollback(conn);
            return Attempt::Done(Ok(fire));
        }
    };
    // Last before the commit (one `stat` per batch), so a write into a file
    // the path no longer names is rolled back, never acknowledged.
    if let Err(error) = opened.check() {
        rollback(conn);
        return Attempt::Done(Err(error));
    }
    let committed = conn
        .prepare_cached("COMMIT")
        .and_then(|mut stmt| stmt.execute([]));
    match committed {
        Ok(_) => Attempt::Done(Ok(fire)),
        Err(error) if commit_unconfirmed(&error) => Attempt::Done(Err(cut_off(conn, error))),
        Err(error) => {
            let error = sql_error("committing a transaction", error);
            rollback(conn);
            Attempt::Done(Err(error))
        }
    }
}

/// After a `COMMIT` that failed on an I/O error past the writes (the
/// fsync of the WAL): makes sure the failed transaction is not applied
/// later, and says what became of it.
///
/// SQLite writes the whole transaction, commit frame included, into the
/// WAL file before it syncs it. When the sync fails it does not publish
/// the commit in the WAL index, so nobody sees it and the next commit
/// writes over those frames. But should the WAL be recovered from the file
/// first (this process dies, or the last connection to the file closes
/// while the disk still fails, so its checkpoint fails and the WAL stays),
/// recovery finds a valid commit and applies the call whose caller was
/// told it failed. So the writer commits a transaction of its own at once
/// (`PRAGMA user_version` rewritten unchanged): its frame lands where the
/// failed transaction starts and cuts it off. If that fails too (the disk
/// still fails), the outcome is unknown: `Unavailable`, the one error
/// whose call may have been applied, and the message says so.
fn cut_off(conn: &Connection, error: rusqlite::Error) -> StoreError {
    rollback(conn);
    let failed = format!(
        "committing a transaction: the disk or file system failed ({})",
        failure_text(&error)
    );
    let message = match overwrite_tail(conn) {
        Ok(()) => format!(
            "{failed}; the commit may have reached the WAL file unconfirmed, so the store overwrote it at once: the call was not applied; check the disk and the kernel log (dmesg) and retry once it works (the store needs no reopen)"
        ),
        // The one failure whose call may have been applied: the code the
        // contract keeps for an unknown outcome.
        Err(again) => {
            return StoreError::Unavailable {
                message: format!(
                    "{failed}; OUTCOME UNKNOWN: the commit may be in the WAL file unconfirmed and overwriting it failed too ({}); it is not visible and the next commit on the file discards it, but if the process stops or every store on the file is closed first, recovery applies it; check the disk and the kernel log (dmesg), then repeat the same call (appends with event ids, completions and failures are idempotent)",
                    failure_text(&again)
                ),
                source: Some(Box::new(error)),
            }
        }
    };
    StoreError::Backend {
        message,
        source: Some(Box::new(error)),
    }
}

/// Commits a transaction that changes nothing but writes a page (the
/// schema version, rewritten as it is), so its frame is the next in the
/// WAL after the last published commit.
fn overwrite_tail(conn: &Connection) -> rusqlite::Result<()> {
    let written = conn.execute_batch("BEGIN IMMEDIATE").and_then(|()| {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        conn.pragma_update(None, "user_version", version)?;
        conn.execute_batch("COMMIT")
    });
    if written.is_err() {
        rollback(conn);
    }
    written
}

/// A lock file beside the database (`<file>-a2-writer`) through which
/// the writers of several processes on one file take turns once one of
/// them has waited too long.
///
/// SQLite's write lock is no queue: a waiting process sleeps and tries
/// again, while the process that just committed starts its next
/// transaction at once. With a few busy processes a producer beside them
/// waited up to seconds for a free moment (measured: small sessions'
/// append→claim p99 of 0.5 s with durability normal, 2.7 s with full,
/// beside workers draining a backlog). Letting every process only take
/// turns costs most of the throughput instead (each hand-over leaves the
/// lock idle a moment and makes the next process re-read the pages the
/// last one changed: 730 claims/s against 2,960 with 4 processes), so the
/// turnstile is used only by a writer that has waited [`STARVING`]: it
/// holds the file while it keeps trying for the database's lock, and a
/// writer about to start a transaction that finds the file held waits
/// instead, so the starving one gets the lock at the next commit. When
/// nobody starves, a writer only checks the file (one `flock` and its
/// release) and goes on.
///
/// Held only while waiting for `BEGIN IMMEDIATE`, never while a
/// transaction runs; taken without blocking, so a frozen process holding it
/// delays others by no more than their busy timeout. Processes that do not
/// use it (another program, an older build) still write correctly, only
/// without turns; without the file (a directory it cannot be made in) or
/// file locks, the writer works as before.
#[derive(Debug)]
struct Turnstile {
    file: Option<std::fs::File>,
}

impl Turnstile {
    fn open(location: &Location) -> Self {
        let file = match location {
            Location::File(path) => {
                let mut name = path.as_os_str().to_owned();
                name.push("-a2-writer");
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(name)
                    .ok()
            }
            Location::Memory => None,
        };
        Self { file }
    }

    /// Whether this writer may try for the database's lock now (`held`:
    /// whether it holds the turnstile): yes when it holds it, or nobody
    /// does; a `starving` writer that finds it free takes it.
    fn may_begin(&self, held: &mut bool, starving: bool) -> bool {
        let Some(file) = &self.file else {
            return true;
        };
        if *held {
            return true;
        }
        match file.try_lock() {
            Ok(()) if starving => {
                *held = true;
                true
            }
            Ok(()) => {
                let _ = file.unlock();
                true
            }
            Err(std::fs::TryLockError::WouldBlock) => false,
            // File locks not supported here: no turns.
            Err(std::fs::TryLockError::Error(_)) => true,
        }
    }

    /// Lets go of the turnstile when this writer holds it.
    fn release(&self, held: &mut bool) {
        if let (true, Some(file)) = (*held, &self.file) {
            let _ = file.unlock();
        }
        *held = false;
    }
}

/// Lets go of the turnstile when this writer holds it (`held`), and goes
/// back to the busy handler's usual pace.
fn let_go(turnstile: &Turnstile, conn: &Connection, held: &mut bool) {
    if *held {
        turnstile.release(held);
        // Only the pace changes: nothing to undo should it fail.
        let _ = conn.busy_handler(Some(wait_for_lock));
    }
}

/// The answer of a try that found another process's writer starving.
fn not_our_turn() -> StoreError {
    StoreError::Busy {
        message: "starting a transaction: the database stayed locked by other processes' writers past the busy timeout".to_owned(),
        source: None,
    }
}

fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        // If even this fails the writer drops the connection.
        let _ = conn.execute_batch("ROLLBACK");
    }
}

/// Runs each call of the open transaction; a lone call needs no savepoint
/// (the transaction is the call). A failed call is rolled back to its
/// savepoint, answered and removed. `Err` when the transaction itself
/// ended and must be tried again without the call that ended it.
fn run_calls(conn: &Connection, jobs: &mut Vec<Box<dyn Job>>) -> Result<Fire, Attempt> {
    let mut fire = Fire::NONE;
    if jobs.len() == 1 {
        return match jobs[0].run(conn) {
            Ok(one) => Ok(one),
            Err(error) => {
                if let Some(job) = jobs.pop() {
                    job.failed(error);
                }
                Ok(Fire::NONE)
            }
        };
    }
    let mut index = 0;
    while index < jobs.len() {
        if let Err(error) = exec(conn, "SAVEPOINT call", "starting a call's savepoint") {
            return Err(Attempt::Done(Err(error)));
        }
        match jobs[index].run(conn) {
            Ok(one) => {
                if let Err(error) = exec(conn, "RELEASE call", "ending a call's savepoint") {
                    return Err(Attempt::Done(Err(error)));
                }
                fire.merge(one);
                index += 1;
            }
            Err(error) => {
                let job = jobs.remove(index);
                let undone = !conn.is_autocommit()
                    && exec(conn, "ROLLBACK TO call", "undoing a failed call").is_ok()
                    && exec(conn, "RELEASE call", "ending a call's savepoint").is_ok();
                job.failed(error);
                if !undone {
                    // SQLite ended the transaction (or could not undo the
                    // call): the calls before it run again.
                    return Err(Attempt::Again);
                }
            }
        }
    }
    Ok(fire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::migrate;

    /// A writer core on a fresh file, and a read connection to it.
    fn core(dir: &tempfile::TempDir) -> (Core, Connection) {
        let path = dir.path().join("w.db");
        let location = Location::File(path.clone());
        let options = SqliteOptions::default();
        let mut conn = open_connection(&location, &options).unwrap();
        migrate(&mut conn, "w.db").unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY)")
            .unwrap();
        let core = Core {
            opened: FileIdentity::of(&path).unwrap(),
            slot: Mutex::new(Slot {
                conn: Some(open_connection(&location, &options).unwrap()),
                applied: None,
            }),
            turnstile: Turnstile::open(&location),
            location,
            options,
            notifier: Weak::new(),
        };
        (core, conn)
    }

    type Reply = oneshot::Receiver<Result<usize, StoreError>>;

    /// A call inserting `key`; `ran` counts its runs.
    fn insert(key: &'static str, ran: &Arc<AtomicUsize>) -> (Box<dyn Job>, Reply) {
        let ran = Arc::clone(ran);
        call(move |tx: &Connection, _: &Ctx| {
            ran.fetch_add(1, Ordering::SeqCst);
            let rows = tx
                .execute("INSERT INTO t (k) VALUES (?1)", [key])
                .ctx("inserting")?;
            Ok((rows, Fire::NONE))
        })
    }

    fn call<F: Body<usize>>(body: F) -> (Box<dyn Job>, Reply) {
        let options = SqliteOptions::default();
        let (reply, answered) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Call {
            body,
            ctx: Ctx {
                clock: Arc::clone(&options.clock),
                ids: Arc::clone(&options.ids),
            },
            settings: Settings::of(&options).unwrap(),
            value: None,
            reply,
        });
        (job, answered)
    }

    /// Runs a batch of one call inserting `key`, which must succeed;
    /// returns how long the batch took.
    fn insert_alone(core: &Core, key: &'static str) -> Duration {
        let (call, reply) = insert(key, &Arc::new(AtomicUsize::new(0)));
        let started = Instant::now();
        let slot = core.slot.lock().unwrap();
        core.run_batch(slot, vec![call]);
        assert_eq!(reply.blocking_recv().unwrap().unwrap(), 1);
        started.elapsed()
    }

    fn keys(conn: &Connection) -> Vec<String> {
        let mut stmt = conn.prepare("SELECT k FROM t ORDER BY k").unwrap();
        let rows = stmt.query_map([], |row| row.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    }

    #[test]
    fn a_failed_or_panicking_call_changes_nothing_and_the_rest_of_its_batch_commits() {
        let dir = tempfile::tempdir().unwrap();
        let (core, reader) = core(&dir);
        let ran = Arc::new(AtomicUsize::new(0));
        let (a, a_reply) = insert("a", &ran);
        // Writes a row, then fails: the row must not stay.
        let (failing, failing_reply) = call(|tx: &Connection, _: &Ctx| {
            tx.execute("INSERT INTO t (k) VALUES ('x')", [])
                .ctx("inserting")?;
            Err(StoreError::invalid_input("this call fails after writing"))
        });
        // Writes a row, then panics: the row must not stay either.
        let (panicking, panicking_reply) = call(|tx: &Connection, _: &Ctx| {
            tx.execute("INSERT INTO t (k) VALUES ('y')", [])
                .ctx("inserting")?;
            panic!("a call's closure panicked");
        });
        // A duplicate key: SQLite's own failure.
        let (duplicate, duplicate_reply) = insert("a", &ran);
        let (b, b_reply) = insert("b", &ran);
        let slot = core.slot.lock().unwrap();
        core.run_batch(slot, vec![a, failing, panicking, duplicate, b]);
        assert_eq!(a_reply.blocking_recv().unwrap().unwrap(), 1);
        assert_eq!(b_reply.blocking_recv().unwrap().unwrap(), 1);
        assert!(failing_reply.blocking_recv().unwrap().is_err());
        let panicked = panicking_reply.blocking_recv().unwrap().unwrap_err();
        assert!(panicked.to_string().contains("panicked"), "{panicked}");
        assert!(duplicate_reply.blocking_recv().unwrap().is_err());
        assert_eq!(keys(&reader), ["a", "b"], "only the calls that succeeded");
        assert_eq!(ran.load(Ordering::SeqCst), 3, "each call ran once");

        // The writer goes on after the panic.
        let (c, c_reply) = insert("c", &ran);
        let slot = core.slot.lock().unwrap();
        core.run_batch(slot, vec![c]);
        assert_eq!(c_reply.blocking_recv().unwrap().unwrap(), 1);
        assert_eq!(keys(&reader), ["a", "b", "c"]);
    }

    #[test]
    fn the_turnstile_is_taken_by_a_starving_writer_only_and_by_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("t.db"));
        // Two handles stand for the writers of two processes.
        let (first, second) = (Turnstile::open(&location), Turnstile::open(&location));
        let (mut first_held, mut second_held) = (false, false);
        assert!(first.may_begin(&mut first_held, false));
        assert!(
            !first_held,
            "a writer that has not waited long only checks it"
        );
        assert!(first.may_begin(&mut first_held, true));
        assert!(first_held, "a starving writer takes it");
        assert!(first.may_begin(&mut first_held, true), "and keeps it");
        assert!(
            !second.may_begin(&mut second_held, false),
            "the other waits"
        );
        assert!(!second.may_begin(&mut second_held, true), "starving or not");
        assert!(!second_held);
        first.release(&mut first_held);
        assert!(!first_held);
        assert!(second.may_begin(&mut second_held, true));
        assert!(second_held, "free again once let go");
    }

    #[test]
    fn a_writer_waits_while_another_process_holds_the_turnstile() {
        let dir = tempfile::tempdir().unwrap();
        let (core, reader) = core(&dir);
        let other = Turnstile::open(&core.location);
        let mut held = false;
        assert!(other.may_begin(&mut held, true) && held);
        let hold = Duration::from_millis(100);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(hold);
            other.release(&mut held);
        });
        let waited = insert_alone(&core, "a");
        assert!(
            waited >= hold,
            "committed after {waited:?}, while another process's writer had its turn"
        );
        releaser.join().unwrap();
        assert_eq!(keys(&reader), ["a"]);
    }

    #[test]
    fn a_starving_writer_gets_the_lock_once_it_is_free_and_lets_go_of_the_turnstile() {
        let dir = tempfile::tempdir().unwrap();
        let (core, reader) = core(&dir);
        // Another process's transaction holds the write lock for a while.
        let blocker = open_connection(&core.location, &SqliteOptions::default()).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let hold = Duration::from_millis(50);
        let committer = std::thread::spawn(move || {
            std::thread::sleep(hold);
            blocker.execute_batch("COMMIT").unwrap();
        });
        let waited = insert_alone(&core, "a");
        assert!(waited >= hold, "{waited:?}");
        committer.join().unwrap();
        assert_eq!(keys(&reader), ["a"]);
        // It took the turnstile while it starved, and let go of it.
        let other = Turnstile::open(&core.location);
        let mut held = false;
        assert!(other.may_begin(&mut held, true) && held);
    }

    #[test]
    fn a_call_its_caller_dropped_before_it_started_is_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let (core, reader) = core(&dir);
        let ran = Arc::new(AtomicUsize::new(0));
        let (dropped, dropped_reply) = insert("dropped", &ran);
        drop(dropped_reply);
        let (kept, kept_reply) = insert("kept", &ran);
        let slot = core.slot.lock().unwrap();
        core.run_batch(slot, vec![dropped, kept]);
        assert_eq!(kept_reply.blocking_recv().unwrap().unwrap(), 1);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(keys(&reader), ["kept"]);
    }

    #[test]
    fn a_batch_the_moved_check_refuses_answers_every_caller_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (core, reader) = core(&dir);
        let moved = dir.path().join("moved.db");
        std::fs::rename(dir.path().join("w.db"), &moved).unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let (a, a_reply) = insert("a", &ran);
        let (b, b_reply) = insert("b", &ran);
        let slot = core.slot.lock().unwrap();
        core.run_batch(slot, vec![a, b]);
        for reply in [a_reply, b_reply] {
            let error = reply.blocking_recv().unwrap().unwrap_err();
            let source = std::error::Error::source(&error).unwrap();
            assert!(source.downcast_ref::<crate::DatabaseMoved>().is_some());
        }
        assert!(keys(&reader).is_empty(), "the batch was rolled back");
    }
}
