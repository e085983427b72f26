//! Looking across sessions: the consumers a store holds, every dead letter
//! (paged by session id) and what each one holds up, built from the trait's
//! cross-session `list_work` and its per-session reads.
//!
//! A store keeps no list of consumers (callers pass their declarations with
//! each call), and `list_work` needs their names. So a view given no
//! `--consumer` finds them by reading the cursors of every session: the
//! only store-wide way the trait allows. Given consumers, a view costs what
//! `list_work` returns, not the number of sessions.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use a2_store::{
    log, CursorKind, Head, ListSessions, ListWork, ReadOptions, SessionWork, Store, MAX_WORK_LIMIT,
};
use serde::Serialize;

use crate::failure::Failure;
use crate::output::escape;

/// Sessions (or log rows) asked for per call while walking the store.
const PAGE: usize = MAX_WORK_LIMIT;

/// The consumers a store-wide view looks at.
#[derive(Debug, Clone)]
pub struct Consumers {
    /// Their names, sorted, without repeats.
    pub names: Vec<String>,
    /// `Some(n)` when they were found by reading the cursors of all `n`
    /// sessions (no `--consumer` given); `None` when given.
    pub scanned: Option<u64>,
}

impl Consumers {
    /// The note to show when the consumers were found by a scan.
    pub fn note(&self) -> Option<String> {
        let sessions = self.scanned?;
        let names: Vec<String> = self
            .names
            .iter()
            .map(|n| format!("'{}'", escape(n)))
            .collect();
        let found = if names.is_empty() {
            "no consumer".to_owned()
        } else {
            format!("consumer(s) {}", names.join(", "))
        };
        Some(format!(
            "note: no --consumer given, so the cursors of all {sessions} session(s) were read to find the consumers (a store keeps no list of them): found {found}; pass --consumer C to look at those only, without the scan"
        ))
    }
}

/// The consumers named on the command line, or, when none is, every
/// consumer with an unfinished cursor in some session (a scan of every
/// session).
pub async fn consumers(
    store: &dyn Store,
    url: &str,
    given: &[String],
) -> Result<Consumers, Failure> {
    if !given.is_empty() {
        let names: BTreeSet<String> = given.iter().cloned().collect();
        return Ok(Consumers {
            names: names.into_iter().collect(),
            scanned: None,
        });
    }
    let mut names = BTreeSet::new();
    let mut walk = SessionWalk::all(None);
    let mut scanned = 0;
    while let Some(session) = walk.next(store, url).await? {
        scanned += 1;
        let cursors = store.cursors(&session).await.map_err(|e| {
            Failure::store(
                url,
                &format!("listing the cursors of session '{}'", escape(&session)),
                &e,
            )
        })?;
        names.extend(cursors.into_iter().map(|c| c.consumer));
    }
    Ok(Consumers {
        names: names.into_iter().collect(),
        scanned: Some(scanned),
    })
}

/// Every session with work of `consumer` (all `list_work` pages), by session id.
pub async fn work_of(
    store: &dyn Store,
    url: &str,
    consumer: &str,
) -> Result<Vec<SessionWork>, Failure> {
    let mut rows = Vec::new();
    let mut after = None;
    loop {
        let page = list_work(store, url, vec![consumer.to_owned()], after.take()).await?;
        let full = page.len() >= PAGE;
        after = page.last().map(|w| w.session_id.clone());
        rows.extend(page);
        if !full || after.is_none() {
            return Ok(rows);
        }
    }
}

async fn list_work(
    store: &dyn Store,
    url: &str,
    consumers: Vec<String>,
    after: Option<String>,
) -> Result<Vec<SessionWork>, Failure> {
    store
        .list_work(ListWork {
            consumers,
            after,
            limit: Some(PAGE),
        })
        .await
        .map_err(|e| Failure::store(url, "listing the work across sessions", &e))
}

/// The sessions a walk visits, by id.
enum Source {
    /// Every session with a row (`sessions()`).
    All,
    /// The sessions where these consumers have dead letters (`list_work`).
    DeadLettersOf(Vec<String>),
    /// Exactly these sessions (sorted, without repeats).
    Given(Vec<String>),
}

/// Session ids in id order after a starting point, fetched a page at a time.
struct SessionWalk {
    source: Source,
    after: Option<String>,
    buffered: VecDeque<String>,
    done: bool,
}

impl SessionWalk {
    fn all(after: Option<String>) -> Self {
        Self::new(Source::All, after)
    }

    fn new(source: Source, after: Option<String>) -> Self {
        let mut walk = Self {
            source,
            after,
            buffered: VecDeque::new(),
            done: false,
        };
        if let Source::Given(sessions) = &walk.source {
            let after = walk.after.clone();
            walk.buffered = sessions
                .iter()
                .filter(|s| after.as_ref().is_none_or(|a| *s > a))
                .cloned()
                .collect();
            walk.done = true;
        }
        walk
    }

    async fn next(&mut self, store: &dyn Store, url: &str) -> Result<Option<String>, Failure> {
        while self.buffered.is_empty() && !self.done {
            let after = self.after.take();
            // The ids kept from one page, and the page's last id (where the
            // next page starts) when the page was full.
            let (ids, next) = match &self.source {
                Source::All => {
                    let page = store
                        .sessions(ListSessions {
                            after,
                            limit: Some(PAGE),
                        })
                        .await
                        .map_err(|e| Failure::store(url, "listing sessions", &e))?;
                    let next = page
                        .last()
                        .filter(|_| page.len() >= PAGE)
                        .map(|s| s.session_id.clone());
                    (page.into_iter().map(|s| s.session_id).collect(), next)
                }
                Source::DeadLettersOf(consumers) => {
                    let page = list_work(store, url, consumers.clone(), after).await?;
                    let next = page
                        .last()
                        .filter(|_| page.len() >= PAGE)
                        .map(|w| w.session_id.clone());
                    // A full page may hold no dead letter: the next is read.
                    let ids: Vec<String> = page
                        .into_iter()
                        .filter(|w| w.dead_lettered > 0)
                        .map(|w| w.session_id)
                        .collect();
                    (ids, next)
                }
                Source::Given(_) => (Vec::new(), None),
            };
            self.done = next.is_none();
            self.after = next;
            self.buffered.extend(ids);
        }
        Ok(self.buffered.pop_front())
    }
}

/// Which dead letters to collect.
#[derive(Default)]
pub struct Filter<'a> {
    /// Only these consumers' (all when empty).
    pub consumers: &'a [String],
    /// Only in these sessions (all when empty).
    pub sessions: &'a [String],
    /// Only dead-lettered at or before this time, ms.
    pub dead_before: Option<i64>,
    /// Only heads of lane and log cursors (a dead letter there holds up its lane).
    pub lanes_only: bool,
    /// Only heads of the cursors on this lane.
    pub lane: Option<&'a str>,
}

impl Filter<'_> {
    fn keeps(&self, head: &Head) -> bool {
        (self.consumers.is_empty() || self.consumers.contains(&head.consumer))
            && (!self.lanes_only || head.lane.is_some())
            && self
                .lane
                .is_none_or(|lane| head.lane.as_deref() == Some(lane))
            && self
                .dead_before
                .is_none_or(|cutoff| head.dispatch.failed_at.is_some_and(|t| t <= cutoff))
    }
}

/// How much of the store to collect.
#[derive(Debug, Clone, Default)]
pub struct Bounds {
    /// Only sessions whose id sorts after this one.
    pub after: Option<String>,
    /// At most this many sessions (each with all its matching dead letters).
    pub sessions: Option<usize>,
    /// At most this many dead letters in all (the last session may be cut).
    pub heads: Option<usize>,
}

/// The dead letters of one session that a filter kept.
#[derive(Debug, Clone)]
pub struct SessionDeadLetters {
    /// The session.
    pub session_id: String,
    /// Its kept dead letters, by `(index, consumer, lane)`.
    pub heads: Vec<Head>,
}

/// A page of dead letters, session by session.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterPage {
    /// The sessions with kept dead letters, by id.
    pub sessions: Vec<SessionDeadLetters>,
    /// When more sessions with matching dead letters follow, the id to
    /// pass as `--after` to continue (the last session of this page).
    pub next_after: Option<String>,
}

/// Collects dead letters matching `filter` in session id order within
/// `bounds`. With consumers, only the sessions `list_work` reports with
/// dead letters are read; otherwise every session (or every given one).
pub async fn dead_letters(
    store: &dyn Store,
    url: &str,
    filter: &Filter<'_>,
    bounds: &Bounds,
) -> Result<DeadLetterPage, Failure> {
    let source = if !filter.sessions.is_empty() {
        let sessions: BTreeSet<String> = filter.sessions.iter().cloned().collect();
        Source::Given(sessions.into_iter().collect())
    } else if !filter.consumers.is_empty() {
        Source::DeadLettersOf(filter.consumers.to_vec())
    } else {
        Source::All
    };
    let mut walk = SessionWalk::new(source, bounds.after.clone());
    let mut page = DeadLetterPage::default();
    let mut heads_left = bounds.heads;
    while heads_left != Some(0) {
        let Some(session) = walk.next(store, url).await? else {
            break;
        };
        let mut heads: Vec<Head> = session_dead_letters(store, url, &session)
            .await?
            .into_iter()
            .filter(|h| filter.keeps(h))
            .collect();
        if heads.is_empty() {
            continue;
        }
        if bounds
            .sessions
            .is_some_and(|max| page.sessions.len() >= max)
        {
            // One more session matches: the page is full and more follow.
            page.next_after = page.sessions.last().map(|s| s.session_id.clone());
            break;
        }
        if let Some(left) = heads_left.as_mut() {
            heads.truncate(*left);
            *left -= heads.len();
        }
        page.sessions.push(SessionDeadLetters {
            session_id: session,
            heads,
        });
    }
    Ok(page)
}

/// A session's dead letters, as the store lists them.
pub async fn session_dead_letters(
    store: &dyn Store,
    url: &str,
    session: &str,
) -> Result<Vec<Head>, Failure> {
    store.dead_letters(session).await.map_err(|e| {
        Failure::store(
            url,
            &format!("listing the dead letters of session '{}'", escape(session)),
            &e,
        )
    })
}

/// A dead letter with what it holds up.
#[derive(Debug, Clone, Serialize)]
pub struct Blocking {
    /// The session.
    pub session_id: String,
    /// The dead-lettered cursor's kind (`None`: the cursor was gone by the
    /// time its session's cursors were read).
    pub kind: Option<CursorKind>,
    /// Events on its lane after it, not yet handled: exact for a log
    /// cursor (the later events of a type it takes), 0 for an event cursor
    /// (it holds only its own event); `None` for a FIFO lane cursor with
    /// later events, whose queue the store API does not expose (see
    /// `later_events`).
    pub waiting_behind: Option<u64>,
    /// For a lane or log cursor, the events after it in the session's log,
    /// whatever they target: an upper bound of what waits behind a FIFO
    /// lane head.
    pub later_events: Option<u64>,
    /// The dead-lettered head.
    pub head: Head,
}

/// The kind of a lane or log cursor and the types a log cursor takes.
type LaneCursor<'a> = (CursorKind, Option<&'a [String]>);

/// What each dead letter of one session holds up: its cursor's kind from
/// `cursors()`, and the events after it from one read of the log after the
/// lowest dead-lettered lane head.
pub async fn blocking(
    store: &dyn Store,
    url: &str,
    session: &SessionDeadLetters,
) -> Result<Vec<Blocking>, Failure> {
    let id = session.session_id.as_str();
    let shown = escape(id);
    let cursors = if session.heads.iter().any(|h| h.lane.is_some()) {
        store.cursors(id).await.map_err(|e| {
            Failure::store(
                url,
                &format!("listing the cursors of session '{shown}'"),
                &e,
            )
        })?
    } else {
        Vec::new()
    };
    let by_lane: BTreeMap<(&str, &str), LaneCursor<'_>> = cursors
        .iter()
        .filter_map(|c| {
            let lane = c.lane.as_deref()?;
            Some(((c.consumer.as_str(), lane), (c.kind, c.types.as_deref())))
        })
        .collect();
    let mut out: Vec<Blocking> = session
        .heads
        .iter()
        .map(|head| {
            let kind = match head.lane.as_deref() {
                None => Some(CursorKind::Event),
                Some(lane) => by_lane
                    .get(&(head.consumer.as_str(), lane))
                    .map(|(kind, _)| *kind),
            };
            Blocking {
                session_id: id.to_owned(),
                kind,
                waiting_behind: (kind == Some(CursorKind::Event)).then_some(0),
                later_events: None,
                head: head.clone(),
            }
        })
        .collect();
    // Walk the log once from the lowest lane head, counting for each head
    // the later events and those its log cursor takes.
    let Some(from) = out
        .iter()
        .filter(|b| b.head.lane.is_some())
        .map(|b| b.head.event.index)
        .min()
    else {
        return Ok(out);
    };
    for blocking in out.iter_mut() {
        if blocking.kind == Some(CursorKind::Log) {
            blocking.waiting_behind = Some(0);
        }
    }
    let mut after = from;
    let mut last = from;
    loop {
        let rows = store
            .read(
                id,
                ReadOptions {
                    after: Some(after),
                    through: None,
                    limit: Some(PAGE),
                },
            )
            .await
            .map_err(|e| {
                Failure::store(url, &format!("reading the log of session '{shown}'"), &e)
            })?;
        let Some(tail) = rows.last() else {
            break;
        };
        after = tail.index;
        last = tail.index;
        for row in &rows {
            for blocking in out.iter_mut() {
                if blocking.kind != Some(CursorKind::Log) || row.index <= blocking.head.event.index
                {
                    continue;
                }
                let types = blocking.head.lane.as_deref().and_then(|lane| {
                    by_lane
                        .get(&(blocking.head.consumer.as_str(), lane))
                        .and_then(|(_, types)| *types)
                });
                if log::takes(types, &row.event_type) {
                    if let Some(n) = blocking.waiting_behind.as_mut() {
                        *n += 1;
                    }
                }
            }
        }
        if rows.len() < PAGE {
            break;
        }
    }
    for blocking in out.iter_mut() {
        let index = blocking.head.event.index;
        if blocking.head.lane.is_some() {
            let later = last.saturating_sub(index);
            blocking.later_events = Some(later);
            if later == 0 {
                // Nothing follows it in the log: nothing can wait behind it.
                blocking.waiting_behind = Some(0);
            }
        }
    }
    Ok(out)
}
