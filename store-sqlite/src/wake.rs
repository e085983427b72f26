//! Waking claimers waiting for work (`claim_work` with `wait_ms`) and
//! subscribers waiting for appends.
//!
//! In process, every store on a file shares one [`WorkSignal`] (through
//! the file's notifier), fired after a commit that moved a work row earlier,
//! and subscribers are woken by the notifier's commit signal. Changes made
//! by other processes are noticed by polling `PRAGMA data_version` on one
//! dedicated connection every `poll_interval` (one check for the whole
//! file, however many sessions are followed), from one thread per file
//! that runs only while someone waits: it is started by the first waiter
//! (a claimer or a subscriber) and ends once nobody waits or the store is
//! dropped, keeping its connection for the next waiter. When the version
//! moves it fires both the work signal and [`WorkWake::elsewhere`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use a2_store_api::work::WorkSignal;
use rusqlite::Connection;

use crate::connection::{open_connection, Location};
use crate::options::SqliteOptions;

/// The shortest interval the watcher accepts (`poll_interval` below it,
/// zero included, is raised to it).
pub(crate) const MIN_POLL: Duration = Duration::from_millis(1);

/// How often a waiter claims again with no wake-up at all (the watcher
/// could not start or lost its connection): a lost wake-up only delays.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// The wake-up of one database's waiting claimers, in this process.
#[derive(Debug)]
pub(crate) struct WorkWake {
    signal: WorkSignal,
    /// Fired when another connection committed (subscribers wait on it).
    elsewhere: WorkSignal,
    /// How often the watcher checks the data version.
    interval: Duration,
    /// Where the watcher connects (`None`: a private in-memory database,
    /// which no other process can change).
    target: Option<(Location, SqliteOptions)>,
    /// Whether a watcher thread runs.
    watching: AtomicBool,
    /// The watcher's connection while no watcher runs.
    parked: Mutex<Option<Connection>>,
}

impl WorkWake {
    /// The wake-up of the database at `location`, opened with `options`.
    pub(crate) fn new(location: &Location, options: &SqliteOptions) -> Self {
        let target = match location {
            Location::File(_) => Some((location.clone(), options.clone())),
            Location::Memory => None,
        };
        Self {
            signal: WorkSignal::new(),
            elsewhere: WorkSignal::new(),
            interval: options.poll_interval.max(MIN_POLL),
            target,
            watching: AtomicBool::new(false),
            parked: Mutex::new(None),
        }
    }

    /// The signal waiting claimers subscribe to.
    pub(crate) fn signal(&self) -> &WorkSignal {
        &self.signal
    }

    /// The signal subscribers waiting for other processes' appends hold a
    /// receiver of while they wait (a receiver counts as a waiter, keeping
    /// the watcher running): fired when another connection committed.
    pub(crate) fn elsewhere(&self) -> &WorkSignal {
        &self.elsewhere
    }

    /// How many claimers and subscribers wait now.
    fn waiters(&self) -> usize {
        self.signal.waiters() + self.elsewhere.waiters()
    }

    /// Fires both signals: something may have changed.
    fn fire(&self) {
        self.signal.notify();
        self.elsewhere.notify();
    }

    /// Whether other processes may change the database (so a waiter also
    /// claims again every [`FALLBACK_POLL`]).
    pub(crate) fn shared(&self) -> bool {
        self.target.is_some()
    }

    /// Makes sure commits of other processes wake the waiters: starts the
    /// watcher thread unless it runs. Call after subscribing to the
    /// signal (the watcher ends when it finds nobody subscribed).
    pub(crate) fn watch_other_processes(self: &Arc<Self>) {
        if self.target.is_none() || self.watching.swap(true, Ordering::SeqCst) {
            return;
        }
        let wake = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("a2-sqlite-work-watch".to_owned())
            .spawn(move || watch(&wake));
        if started.is_err() {
            // Waiters still claim again every FALLBACK_POLL.
            self.watching.store(false, Ordering::SeqCst);
        }
    }

    /// Whether a watcher thread runs now.
    pub(crate) fn is_watching(&self) -> bool {
        self.watching.load(Ordering::SeqCst)
    }

    /// Ends this watcher when nobody waits (keeping its connection):
    /// `true` when it must stop. A waiter arriving meanwhile either finds
    /// it running or starts a new one, never neither.
    fn retire(&self, conn: &mut Option<Connection>) -> bool {
        if self.waiters() > 0 {
            return false;
        }
        self.watching.store(false, Ordering::SeqCst);
        if self.waiters() > 0 && !self.watching.swap(true, Ordering::SeqCst) {
            // A waiter came in between and found no watcher: keep on.
            return false;
        }
        if let Some(conn) = conn.take() {
            *self.parked.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn);
        }
        true
    }

    /// The watcher's connection: the parked one, or a new one.
    fn connection(&self) -> Option<Connection> {
        let parked = self
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if parked.is_some() {
            return parked;
        }
        let (location, options) = self.target.as_ref()?;
        open_connection(location, options).ok()
    }
}

/// `PRAGMA data_version`: changes whenever another connection committed.
/// The statement is prepared once per connection (the watcher runs it
/// every `poll_interval`, 200 times a second by default).
fn data_version(conn: &Connection) -> Option<i64> {
    conn.prepare_cached("PRAGMA data_version")
        .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
        .ok()
}

/// The watcher thread: fires the signal whenever the database's data
/// version moves, until nobody waits or the store is gone.
fn watch(wake: &Weak<WorkWake>) {
    let (mut conn, mut seen, interval) = match wake.upgrade() {
        Some(wake) => {
            let conn = wake.connection();
            let seen = conn.as_ref().and_then(data_version);
            // A commit between the first waiter's claim (or read) and this
            // baseline would go unnoticed: look once more.
            wake.fire();
            (conn, seen, wake.interval)
        }
        None => return,
    };
    loop {
        std::thread::sleep(interval);
        let Some(wake) = wake.upgrade() else {
            return;
        };
        if wake.retire(&mut conn) {
            return;
        }
        let version = conn.as_ref().and_then(data_version);
        if version.is_none() {
            // Lost (or never opened) its connection: another one, and a
            // claim now if one was lost, as something may have changed.
            if conn.take().is_some() {
                wake.fire();
            }
            conn = wake.connection();
            seen = conn.as_ref().and_then(data_version);
            continue;
        }
        if version != seen {
            seen = version;
            wake.fire();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORK_POLL: Duration = Duration::from_millis(5);

    /// Waits up to a second for the watcher to be in `state`.
    fn settles(wake: &WorkWake, state: bool) -> bool {
        for _ in 0..200 {
            if wake.is_watching() == state {
                return true;
            }
            std::thread::sleep(WORK_POLL);
        }
        false
    }

    #[test]
    fn the_watcher_runs_only_while_someone_waits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let options = SqliteOptions::default();
        let location = Location::File(path.clone());
        let mut writer = open_connection(&location, &options).unwrap();
        crate::schema::migrate(&mut writer, "w.db").unwrap();
        let wake = Arc::new(WorkWake::new(&location, &options));
        wake.watch_other_processes();
        assert!(settles(&wake, false), "nobody waits: the watcher ends");

        let mut waiter = wake.signal().subscribe();
        wake.watch_other_processes();
        assert!(wake.is_watching());
        // Past the watcher's one wake-up on starting.
        std::thread::sleep(WORK_POLL * 10);
        waiter.borrow_and_update();
        // Another connection (as another process would) commits: the
        // waiter is woken through `data_version`.
        writer
            .execute_batch("INSERT INTO sessions (name) VALUES ('s')")
            .unwrap();
        let mut woken = false;
        for _ in 0..200 {
            if waiter.has_changed().unwrap() {
                woken = true;
                break;
            }
            std::thread::sleep(WORK_POLL);
        }
        assert!(woken, "a commit of another connection wakes the waiter");

        drop(waiter);
        assert!(
            settles(&wake, false),
            "the last waiter gone, the watcher ends"
        );
        assert!(
            wake.parked.lock().unwrap().is_some(),
            "its connection is kept"
        );

        let waiter = wake.signal().subscribe();
        wake.watch_other_processes();
        drop(wake);
        drop(waiter);
        // The store gone, the thread holds nothing but a dead weak reference.
    }

    #[test]
    fn a_waiting_subscriber_alone_runs_the_watcher_and_is_woken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let options = SqliteOptions::default();
        let location = Location::File(path.clone());
        let mut writer = open_connection(&location, &options).unwrap();
        crate::schema::migrate(&mut writer, "w.db").unwrap();
        let wake = Arc::new(WorkWake::new(&location, &options));
        let mut subscriber = wake.elsewhere().subscribe();
        wake.watch_other_processes();
        assert!(wake.is_watching());
        std::thread::sleep(WORK_POLL * 10);
        assert!(
            wake.is_watching(),
            "a waiting subscriber keeps the watcher on"
        );
        subscriber.borrow_and_update();
        writer
            .execute_batch("INSERT INTO sessions (name) VALUES ('s')")
            .unwrap();
        let mut woken = false;
        for _ in 0..200 {
            if subscriber.has_changed().unwrap() {
                woken = true;
                break;
            }
            std::thread::sleep(WORK_POLL);
        }
        assert!(woken, "another connection's commit wakes the subscriber");
        drop(subscriber);
        assert!(settles(&wake, false), "nobody waits: the watcher ends");
    }

    #[test]
    fn an_in_memory_database_needs_no_watcher() {
        let wake = Arc::new(WorkWake::new(&Location::Memory, &SqliteOptions::default()));
        let _waiter = wake.signal().subscribe();
        wake.watch_other_processes();
        assert!(!wake.is_watching());
        assert!(!wake.shared());
    }
}
