//! In-process commit notifications: every store of this process on the same
//! database file shares one notifier, so its subscribers wake at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use tokio::sync::watch;

use crate::connection::Location;

/// Wakes subscribers after a commit that appended rows.
#[derive(Debug)]
pub(crate) struct Notifier {
    commits: watch::Sender<u64>,
}

impl Notifier {
    fn new() -> Self {
        Self {
            commits: watch::Sender::new(0),
        }
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
/// same file, private to an in-memory store.
pub(crate) fn notifier_for(location: &Location) -> Arc<Notifier> {
    let Location::File(path) = location else {
        return Arc::new(Notifier::new());
    };
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    let mut map = registry().lock().unwrap_or_else(PoisonError::into_inner);
    map.retain(|_, weak| weak.strong_count() > 0);
    if let Some(existing) = map.get(&key).and_then(Weak::upgrade) {
        return existing;
    }
    let fresh = Arc::new(Notifier::new());
    map.insert(key, Arc::downgrade(&fresh));
    fresh
}
