//! The connection pool: every read (and every write of an in-memory
//! store) runs as one SQLite transaction on a blocking thread, never on
//! the async runtime. Writes to a file go through its writer
//! ([`crate::writer`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use a2_store_api::{Clock, IdGenerator, StoreError};
use rusqlite::Connection;
use tokio::runtime::RuntimeFlavor;
use tokio::sync::{watch, Notify};

use crate::connection::{open_connection, Location};
use crate::errors::{is_busy, SqlContext};
use crate::moved::FileIdentity;
use crate::options::SqliteOptions;
use crate::schema::migrate;

/// The flavor of the tokio runtime the caller runs on, if any.
fn runtime_flavor() -> Option<RuntimeFlavor> {
    tokio::runtime::Handle::try_current()
        .ok()
        .map(|handle| handle.runtime_flavor())
}

/// What a call's body may use besides its transaction: the injected clock and ids.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The only source of time.
    pub clock: Arc<dyn Clock>,
    /// The source of generated event ids.
    pub ids: Arc<dyn IdGenerator>,
}

/// Whether a call writes (`BEGIN IMMEDIATE`, serialized) or only reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A snapshot read (`BEGIN DEFERRED`).
    Read,
    /// A write: takes the database write lock up front.
    Write,
}

/// Open connections to one database plus the locks that share them.
#[derive(Debug)]
pub(crate) struct Pool {
    location: Location,
    options: SqliteOptions,
    /// The file the pool opened (`None`: in memory), checked by every
    /// write through the pool before it commits.
    opened: Option<FileIdentity>,
    idle: Mutex<Vec<Connection>>,
    /// How many more calls may hold a connection now (`pool_size` at most).
    free: Mutex<usize>,
    /// Wakes every caller waiting for a connection when one is released.
    freed: Notify,
    ctx: Ctx,
    /// Dropped with the pool: its receivers (subscriptions) learn that the
    /// store is gone without polling.
    closed: watch::Sender<()>,
}

impl Pool {
    /// Opens the pool's connections, applying migrations on the first. Its
    /// writers queue on a lock of their own until [`Pool::with_write_lock`].
    pub(crate) fn open(location: Location, options: SqliteOptions) -> Result<Self, StoreError> {
        let size = match location {
            Location::Memory => 1,
            Location::File(_) => options.pool_size.max(1),
        };
        let mut first = open_connection(&location, &options)?;
        if !options.read_only {
            migrate(&mut first, &location.display())?;
        }
        let opened = match &location {
            Location::File(path) => Some(FileIdentity::of(path)?),
            _ => None,
        };
        let mut idle = vec![first];
        for _ in 1..size {
            idle.push(open_connection(&location, &options)?);
        }
        let ctx = Ctx {
            clock: Arc::clone(&options.clock),
            ids: Arc::clone(&options.ids),
        };
        Ok(Self {
            location,
            opened,
            idle: Mutex::new(idle),
            free: Mutex::new(size),
            freed: Notify::new(),
            options,
            ctx,
            closed: watch::Sender::new(()),
        })
    }

    /// Where the database is.
    pub(crate) fn location(&self) -> &Location {
        &self.location
    }

    /// The options the store was opened with.
    pub(crate) fn options(&self) -> &SqliteOptions {
        &self.options
    }

    /// The file the pool opened (`None`: in memory).
    pub(crate) fn identity(&self) -> Option<&FileIdentity> {
        self.opened.as_ref()
    }

    /// A receiver whose `changed()` fails once the pool (its store and
    /// every clone) is dropped.
    pub(crate) fn closed(&self) -> watch::Receiver<()> {
        self.closed.subscribe()
    }

    /// `Ok` unless the store was opened read-only: then the error every
    /// write call fails with, before touching the database.
    pub(crate) fn check_writable(&self) -> Result<(), StoreError> {
        if self.options.read_only {
            return Err(StoreError::read_only(&format!(
                "database '{}'",
                self.location.display()
            )));
        }
        Ok(())
    }

    /// The injected clock and ids.
    pub(crate) fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// Runs `body` as one transaction without blocking the async runtime: on
    /// a multi-threaded runtime through `block_in_place` (the worker's other
    /// tasks move to another thread first), elsewhere on the blocking pool
    /// (`spawn_blocking`), and inline when the caller is not on a tokio
    /// runtime at all. A `Busy` failure is retried until the busy
    /// timeout; any failure rolls everything back. Dropping the future never
    /// interrupts a transaction half-way.
    pub(crate) async fn run<T, F>(
        self: &Arc<Self>,
        access: Access,
        body: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection, &Ctx) -> Result<T, StoreError> + Send + 'static,
    {
        if access == Access::Write {
            self.check_writable()?;
        }
        let lease = self.lease().await;
        match runtime_flavor() {
            // The worker hands its other tasks to another thread, then runs
            // the call here: no thread hop, and the runtime is not blocked.
            // The lease ends with the call, inside this one poll.
            Some(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| {
                let result = self.run_blocking(access, &body);
                drop(lease);
                result
            }),
            Some(_) => {
                let pool = Arc::clone(self);
                // The lease moves to the blocking thread and ends there with
                // the call, whether or not this future is polled again.
                tokio::task::spawn_blocking(move || {
                    let result = pool.run_blocking(access, &body);
                    drop(lease);
                    result
                })
                .await
                .map_err(|error| StoreError::backend("running a database call", error))?
            }
            // Not on a tokio runtime: there is no runtime to block.
            None => {
                let result = self.run_blocking(access, &body);
                drop(lease);
                result
            }
        }
    }

    /// The right to use one connection, for as long as the lease lives.
    ///
    /// Waiting reserves nothing: a waiter only learns that a connection was
    /// released (every waiter is woken) and then tries to take it, so a
    /// future that stops being polled while it waits (a `subscribe` stream
    /// merged with others and not polled while its task runs another call)
    /// never holds a connection that a polled caller could use. A fair
    /// queue (`tokio::sync::Semaphore`) hands a released permit to the
    /// first waiter whether or not anyone polls it, which is how such
    /// streams used to keep every connection and stall the store.
    async fn lease(self: &Arc<Self>) -> Lease {
        // A task calling in a loop still yields once its tokio budget is
        // spent (as a semaphore's acquire did), so it stays cancellable and
        // shares its worker.
        tokio::task::coop::consume_budget().await;
        loop {
            // Registered before the try, so a release between the try and
            // the wait still wakes this caller.
            let freed = self.freed.notified();
            if let Some(lease) = self.try_lease() {
                return lease;
            }
            freed.await;
        }
    }

    /// A lease if a connection is free now.
    fn try_lease(self: &Arc<Self>) -> Option<Lease> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let left = free.checked_sub(1)?;
        *free = left;
        Some(Lease {
            pool: Arc::clone(self),
        })
    }

    /// The blocking half of [`Pool::run`], run under a [`Lease`].
    fn run_blocking<T, F>(&self, access: Access, body: &F) -> Result<T, StoreError>
    where
        F: Fn(&Connection, &Ctx) -> Result<T, StoreError>,
    {
        let mut conn = self.take()?;
        let deadline = Instant::now().checked_add(self.options.busy_timeout);
        let mut pause = Duration::from_millis(1);
        let result = loop {
            let result = self.attempt(&mut conn, access, body);
            match result {
                Err(error)
                    if is_busy(&error) && deadline.is_none_or(|end| Instant::now() < end) =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                other => break other,
            }
        };
        if conn.is_autocommit() || matches!(self.location, Location::Memory) {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
        result.map_err(|error| self.with_path(error))
    }

    /// Names the database in a failure of the database itself.
    pub(crate) fn with_path(&self, error: StoreError) -> StoreError {
        let shown = self.location.display();
        let prefix = |message: String| {
            if message.contains(&shown) {
                message
            } else {
                format!("database '{shown}': {message}")
            }
        };
        match error {
            StoreError::Backend { message, source } => StoreError::Backend {
                message: prefix(message),
                source,
            },
            StoreError::Busy { message, source } => StoreError::Busy {
                message: prefix(message),
                source,
            },
            StoreError::StorageFull { message, source } => StoreError::StorageFull {
                message: prefix(message),
                source,
            },
            StoreError::Unavailable { message, source } => StoreError::Unavailable {
                message: prefix(message),
                source,
            },
            other => other,
        }
    }

    /// One try of one transaction: `BEGIN` (cached statements), the body,
    /// `COMMIT`; anything else rolls back.
    fn attempt<T, F>(
        &self,
        conn: &mut Connection,
        access: Access,
        body: &F,
    ) -> Result<T, StoreError>
    where
        F: Fn(&Connection, &Ctx) -> Result<T, StoreError>,
    {
        let begin = match access {
            Access::Write => "BEGIN IMMEDIATE",
            Access::Read => "BEGIN DEFERRED",
        };
        conn.prepare_cached(begin)
            .and_then(|mut stmt| stmt.execute([]))
            .ctx("starting a transaction")?;
        let outcome =
            catch_unwind(AssertUnwindSafe(|| body(conn, &self.ctx))).unwrap_or_else(|_| {
                Err(StoreError::Backend {
                    message: "internal error: a database call panicked; it was rolled back"
                        .to_owned(),
                    source: None,
                })
            });
        // Last before the commit (one `stat`), so a write into a file the
        // path no longer names is rolled back, never acknowledged; it also
        // names the cause when the body failed because the file went away.
        let outcome = self.check_opened(access).and(outcome).and_then(|value| {
            conn.prepare_cached("COMMIT")
                .and_then(|mut stmt| stmt.execute([]))
                .ctx("committing a transaction")?;
            Ok(value)
        });
        if outcome.is_err() && !conn.is_autocommit() {
            // If even the rollback fails, the pool drops this connection
            // (closing it rolls back); nothing is committed either way.
            let _ = conn.execute_batch("ROLLBACK");
        }
        outcome
    }

    /// `Ok` unless this is a write and the path no longer names the file the
    /// pool opened (one `stat`): see [`crate::DatabaseMoved`].
    fn check_opened(&self, access: Access) -> Result<(), StoreError> {
        match (&self.opened, access) {
            (Some(opened), Access::Write) => opened.check(),
            _ => Ok(()),
        }
    }

    /// An idle connection; a file store reopens one if a connection was lost.
    fn take(&self) -> Result<Connection, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(conn) => Ok(conn),
            None => match self.location {
                Location::File(_) => open_connection(&self.location, &self.options),
                Location::Memory => Err(StoreError::Backend {
                    message: "the in-memory database's connection is busy or lost".to_owned(),
                    source: None,
                }),
            },
        }
    }
}

/// One call's right to a connection of its [`Pool`]; dropping it frees the
/// place and wakes every caller waiting for one.
#[derive(Debug)]
struct Lease {
    pool: Arc<Pool>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        {
            let mut free = self
                .pool
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            *free = free.saturating_add(1);
        }
        self.pool.freed.notify_waiters();
    }
}
