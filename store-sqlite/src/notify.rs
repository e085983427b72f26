//! What the stores of this process on one database file share: the commit
//! notifier (so subscribers wake at once), the wake-up of claimers waiting
//! for work, and the writers' queue (so writers wait for each other in
//! process instead of in SQLite's busy handler).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use tokio::sync::watch;

use crate::connection::Location;
use crate::options::SqliteOptions;
use crate::wake::WorkWake;

/// Wakes subscribers after a commit that appended rows and claimers
/// waiting for work, and queues writers.
#[derive(Debug)]
pub(crate) struct Notifier {
    commits: watch::Sender<u64>,
    writers: Arc<Mutex<()>>,
    work: Arc<WorkWake>,
}

impl Notifier {
    fn new(location: &Location, options: &SqliteOptions) -> Self {
        Self {
            commits: watch::Sender::new(0),
            writers: Arc::new(Mutex::new(())),
            work: Arc::new(WorkWake::new(location, options)),
        }
    }

    /// The wake-up of claimers waiting for work on this database.
    pub(crate) fn work(&self) -> &Arc<WorkWake> {
        &self.work
    }

    /// The lock every writer of this process on the database holds for the
    /// length of its transaction.
    pub(crate) fn writers(&self) -> Arc<Mutex<()>> {
        Arc::clone(&self.writers)
    }

    /// Tells every subscriber that rows were committed.
    pub(crate) fn notify(&self) {
        self.commits
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// A receiver that sees every later [`Notifier::notify`].
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.commits.subscribe()
    }
}

type Registry = Mutex<HashMap<PathBuf, Weak<Notifier>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The notifier for `location`: shared by every store of this process on the
/// same file (the first one's `options` open its work watcher's
/// connection), private to an in-memory store.
pub(crate) fn notifier_for(location: &Location, options: &SqliteOptions) -> Arc<Notifier> {
    let Location::File(path) = location else {
        return Arc::new(Notifier::new(location, options));
    };
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    let mut map = registry().lock().unwrap_or_else(PoisonError::into_inner);
    map.retain(|_, weak| weak.strong_count() > 0);
    if let Some(existing) = map.get(&key).and_then(Weak::upgrade) {
        return existing;
    }
    let fresh = Arc::new(Notifier::new(location, options));
    map.insert(key, Arc::downgrade(&fresh));
    fresh
}
