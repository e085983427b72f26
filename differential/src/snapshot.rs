//! The full observable state of a store, captured after every step and
//! compared between the reference and the candidate.

use a2_store_api::{
    Cursor, ErrorCode, Head, ListSessions, ListWork, Pause, PresenceRow, ReadOptions,
    ReadStateOptions, SessionInfo, SessionWork, StateRead, Store, StoredEvent,
};

use crate::call::{list_work, logical, logical_info, logical_pause, physical};
use crate::vocab::{REDUCERS, SESSIONS, WORK_CONSUMERS};

/// A read's result with the error projected to its code.
pub type Read<T> = Result<T, ErrorCode>;

/// What one session looks like through every read of the trait.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionState {
    /// Every stored row (`read` with default bounds).
    pub rows: Read<Vec<StoredEvent>>,
    /// `cursors`.
    pub cursors: Read<Vec<Cursor>>,
    /// `dead_letters`.
    pub dead_letters: Read<Vec<Head>>,
    /// `read_presence`.
    pub presence: Read<Vec<PresenceRow>>,
    /// `read_state` of each reducer at: no bound, the head, the head - 1, the clear.
    pub states: Vec<(String, Option<u64>, Read<StateRead>)>,
    /// The session's listing row (`None`: not listed).
    pub info: Option<SessionInfo>,
}

impl SessionState {
    /// The log head (0 when not listed).
    pub fn head(&self) -> u64 {
        self.info.as_ref().map_or(0, |info| info.head)
    }

    /// The clear index (0 when never cleared).
    pub fn clear_index(&self) -> u64 {
        self.info.as_ref().map_or(0, |info| info.clear_index)
    }

    /// The stored rows, empty when reading failed.
    pub fn rows(&self) -> &[StoredEvent] {
        self.rows.as_deref().unwrap_or(&[])
    }

    /// The cursors, empty when listing failed.
    pub fn cursors(&self) -> &[Cursor] {
        self.cursors.as_deref().unwrap_or(&[])
    }

    /// The dead letters, empty when listing failed.
    pub fn dead_letters(&self) -> &[Head] {
        self.dead_letters.as_deref().unwrap_or(&[])
    }
}

/// Every logical session's state plus the session listing.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreState {
    /// By logical session, in [`SESSIONS`] order.
    pub sessions: Vec<SessionState>,
    /// `sessions()` restricted to this run's prefix, with the prefix removed.
    pub listing: Read<Vec<SessionInfo>>,
    /// `list_work` of every consumer name, restricted the same way.
    pub work: Read<Vec<SessionWork>>,
    /// `pauses(None)`: the store-wide pauses and this run's sessions'
    /// (logical ids).
    pub pauses: Read<Vec<Pause>>,
    /// The store's clock when this was captured, ms (not compared).
    pub captured_at: i64,
}

impl StoreState {
    /// The state of logical session `index` (sessions wrap around).
    pub fn session(&self, index: usize) -> Option<&SessionState> {
        self.sessions.get(index)
    }

    /// Names the first part that differs from `other`, with both values.
    pub fn difference(&self, other: &Self) -> Option<(String, String, String)> {
        if self.listing != other.listing {
            return Some((
                "sessions()".to_owned(),
                format!("{:#?}", self.listing),
                format!("{:#?}", other.listing),
            ));
        }
        if self.pauses != other.pauses {
            return Some((
                "pauses(None)".to_owned(),
                format!("{:#?}", self.pauses),
                format!("{:#?}", other.pauses),
            ));
        }
        if self.work != other.work {
            return Some((
                "list_work(every consumer)".to_owned(),
                format!("{:#?}", self.work),
                format!("{:#?}", other.work),
            ));
        }
        for (index, (mine, theirs)) in self.sessions.iter().zip(&other.sessions).enumerate() {
            let name = SESSIONS.get(index).copied().unwrap_or("?");
            let parts: [(&str, String, String); 4] = [
                (
                    "read",
                    format!("{:#?}", mine.rows),
                    format!("{:#?}", theirs.rows),
                ),
                (
                    "cursors",
                    format!("{:#?}", mine.cursors),
                    format!("{:#?}", theirs.cursors),
                ),
                (
                    "dead_letters",
                    format!("{:#?}", mine.dead_letters),
                    format!("{:#?}", theirs.dead_letters),
                ),
                (
                    "read_presence",
                    format!("{:#?}", mine.presence),
                    format!("{:#?}", theirs.presence),
                ),
            ];
            for (what, a, b) in parts {
                if a != b {
                    return Some((format!("{what}(\"{name}\")"), a, b));
                }
            }
            for (a, b) in mine.states.iter().zip(&theirs.states) {
                if a != b {
                    return Some((
                        format!("read_state(\"{name}\", \"{}\", at: {:?})", a.0, a.1),
                        format!("{:#?}", a.2),
                        format!("{:#?}", b.2),
                    ));
                }
            }
            if mine.states.len() != theirs.states.len() {
                return Some((
                    format!("read_state(\"{name}\") probes"),
                    format!("{:#?}", mine.states),
                    format!("{:#?}", theirs.states),
                ));
            }
        }
        None
    }
}

/// Reads the whole state of the logical sessions of this run, on a store
/// whose clock reads `now`.
pub async fn capture(store: &dyn Store, prefix: &str, now: i64) -> StoreState {
    let listing = list_sessions(store, prefix).await;
    let work = list_work(
        store,
        prefix,
        ListWork {
            consumers: WORK_CONSUMERS.iter().map(|c| (*c).to_owned()).collect(),
            ..ListWork::default()
        },
    )
    .await
    .map_err(|e| e.code());
    let mut sessions = Vec::with_capacity(SESSIONS.len());
    for name in SESSIONS {
        let id = physical(prefix, name);
        let info = listing
            .as_ref()
            .ok()
            .and_then(|rows| rows.iter().find(|row| row.session_id == name).cloned());
        let head = info.as_ref().map_or(0, |info| info.head);
        let clear = info.as_ref().map_or(0, |info| info.clear_index);
        let mut probes = vec![None, Some(head), Some(head.saturating_sub(1)), Some(clear)];
        probes.dedup();
        let mut states = Vec::new();
        for reducer in REDUCERS {
            for at in &probes {
                let read = store
                    .read_state(&id, reducer, ReadStateOptions { at: *at })
                    .await
                    .map_err(|e| e.code());
                states.push((reducer.to_owned(), *at, read));
            }
        }
        sessions.push(SessionState {
            rows: store
                .read(&id, ReadOptions::default())
                .await
                .map_err(|e| e.code()),
            cursors: store
                .cursors(&id)
                .await
                .map(|cursors| {
                    cursors
                        .into_iter()
                        .map(|mut cursor| {
                            cursor.pause = cursor.pause.map(|p| logical_pause(prefix, p));
                            cursor
                        })
                        .collect()
                })
                .map_err(|e| e.code()),
            dead_letters: store.dead_letters(&id).await.map_err(|e| e.code()),
            presence: store.read_presence(&id).await.map_err(|e| e.code()),
            states,
            info,
        });
    }
    StoreState {
        sessions,
        listing,
        work,
        pauses: list_pauses(store, prefix).await,
        captured_at: now,
    }
}

/// `pauses(None)` without other runs' sessions, with logical ids.
async fn list_pauses(store: &dyn Store, prefix: &str) -> Read<Vec<Pause>> {
    let pauses = store.pauses(None).await.map_err(|e| e.code())?;
    Ok(pauses
        .into_iter()
        .filter(|pause| {
            pause
                .session_id
                .as_deref()
                .is_none_or(|s| logical(prefix, s).is_some())
        })
        .map(|pause| logical_pause(prefix, pause))
        .collect())
}

async fn list_sessions(store: &dyn Store, prefix: &str) -> Read<Vec<SessionInfo>> {
    let rows = store
        .sessions(ListSessions {
            after: Some(prefix.to_owned()),
            limit: None,
        })
        .await
        .map_err(|e| e.code())?;
    Ok(rows
        .into_iter()
        .map_while(|row| {
            logical(prefix, &row.session_id)?;
            Some(logical_info(prefix, row))
        })
        .collect())
}

/// How long a subscription may take to deliver its backlog.
const BACKLOG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The first `count` events `subscribe(session, after)` delivers (fewer if
/// the stream ends, errs or stalls for [`BACKLOG_TIMEOUT`]).
pub async fn backlog(
    store: &dyn Store,
    prefix: &str,
    session: &str,
    after: u64,
    count: usize,
) -> Read<Vec<StoredEvent>> {
    use futures::StreamExt;
    let mut stream = store
        .subscribe(&physical(prefix, session), after)
        .await
        .map_err(|e| e.code())?;
    let mut rows = Vec::with_capacity(count);
    while rows.len() < count {
        match tokio::time::timeout(BACKLOG_TIMEOUT, stream.next()).await {
            Ok(Some(row)) => rows.push(row.map_err(|e| e.code())?),
            Ok(None) | Err(_) => break,
        }
    }
    Ok(rows)
}
