//! What the stores of this process on one database file share: the commit
//! notifier (so subscribers wake at once), the wake-up of claimers waiting
//! for work, and the file's one writer (see [`crate::writer`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use a2_store_api::StoreError;
use tokio::sync::watch;

use crate::connection::Location;
use crate::moved::FileIdentity;
use crate::options::SqliteOptions;
use crate::wake::WorkWake;
use crate::writer::{Fire, Writer};

/// Wakes subscribers after a commit that appended rows and claimers
/// waiting for work, and holds the file's writer.
#[derive(Debug)]
pub(crate) struct Notifier {
    commits: watch::Sender<u64>,
    work: Arc<WorkWake>,
    /// The file's writer, started by the first read-write store.
    writer: Mutex<Option<Arc<Writer>>>,
    /// The file this notifier serves (`None`: in memory).
    identity: Option<FileIdentity>,
}

impl Notifier {
    fn new(location: &Location, options: &SqliteOptions, identity: Option<FileIdentity>) -> Self {
        Self {
            commits: watch::Sender::new(0),
            work: Arc::new(WorkWake::new(location, options)),
            writer: Mutex::new(None),
            identity,
        }
    }

    /// The file's writer, started now (with `options`) if no store of
    /// this process on the file started it yet.
    pub(crate) fn writer(
        self: &Arc<Self>,
        location: &Location,
        options: &SqliteOptions,
    ) -> Result<Arc<Writer>, StoreError> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(writer) = writer.as_ref() {
            return Ok(Arc::clone(writer));
        }
        let identity = match &self.identity {
            Some(identity) => identity.clone(),
            None => {
                return Err(StoreError::Backend {
                    message: "internal error: an in-memory database has no writer thread"
                        .to_owned(),
                    source: None,
                })
            }
        };
        let started = Arc::new(Writer::start(
            location,
            options,
            identity,
            Arc::downgrade(self),
        )?);
        *writer = Some(Arc::clone(&started));
        Ok(started)
    }

    /// Announces a committed batch: subscribers and work waiters, each at
    /// most once.
    pub(crate) fn fire(&self, fire: Fire) {
        if fire.commits {
            self.notify();
        }
        if fire.work {
            self.work.signal().notify();
        }
    }

    /// The wake-up of claimers waiting for work on this database.
    pub(crate) fn work(&self) -> &Arc<WorkWake> {
        &self.work
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

/// The notifier for `location`, the file `identity` (just opened): shared
/// by every store of this process on the same file (the first one's
/// `options` open its work watcher's and its writer's connections),
/// private to an in-memory store. A store on a path whose file was
/// replaced since another store opened it (same path, another inode) gets
/// a notifier, and so a writer, of its own.
pub(crate) fn notifier_for(
    location: &Location,
    options: &SqliteOptions,
    identity: Option<&FileIdentity>,
) -> Arc<Notifier> {
    let (Location::File(path), Some(identity)) = (location, identity) else {
        return Arc::new(Notifier::new(location, options, None));
    };
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    let mut map = registry().lock().unwrap_or_else(PoisonError::into_inner);
    map.retain(|_, weak| weak.strong_count() > 0);
    if let Some(existing) = map.get(&key).and_then(Weak::upgrade) {
        if existing
            .identity
            .as_ref()
            .is_some_and(|known| known.same_file(identity))
        {
            return existing;
        }
    }
    let fresh = Arc::new(Notifier::new(location, options, Some(identity.clone())));
    map.insert(key, Arc::downgrade(&fresh));
    fresh
}
