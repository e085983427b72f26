//! Where a forked session's copied rows were encrypted: the chain of
//! sessions it was forked from, looked up through [`Store::sessions`] and
//! cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use a2_store_api::{ListSessions, Result, SessionInfo, Store};

/// How many forks deep a chain is followed (a longer one is treated as
/// unknown beyond that depth).
const MAX_DEPTH: usize = 64;

/// Sessions cached at most; the cache is emptied when it is full.
const MAX_CACHED: usize = 4_096;

/// The sessions listed per `sessions()` page while looking one up.
const PAGE: usize = 16;

/// A session's fork chain: `links[k]` says session `k` (0: the session
/// itself) was forked from `links[k].0` through index `links[k].1`.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    links: Vec<(String, u64)>,
    /// Whether the chain is known to its root (else its last parent is
    /// gone, was created again since, or the chain is too deep).
    complete: bool,
}

/// Which session a row at some index was encrypted in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Origin<'a> {
    /// Exactly this one.
    Session(&'a str),
    /// This one or one it was forked from, which can no longer be told
    /// (the session or an ancestor was deleted).
    Unknown,
}

impl Lineage {
    /// The session the row at `index` of `session` was first written in.
    pub(crate) fn origin<'a>(&'a self, session: &'a str, index: u64) -> Origin<'a> {
        let mut current = session;
        for (parent, through) in &self.links {
            if index > *through {
                return Origin::Session(current);
            }
            current = parent;
        }
        if self.complete {
            Origin::Session(current)
        } else {
            Origin::Unknown
        }
    }

    /// The sessions of the chain, the session itself first.
    pub(crate) fn sessions<'a>(&'a self, session: &'a str) -> Vec<&'a str> {
        std::iter::once(session)
            .chain(self.links.iter().map(|(parent, _)| parent.as_str()))
            .collect()
    }
}

/// Lineages of the sessions whose copied rows were read, by session id.
#[derive(Debug, Default)]
pub(crate) struct Lineages {
    cache: Mutex<HashMap<String, Arc<Lineage>>>,
}

impl Lineages {
    /// The lineage of `session`, from the cache unless `fresh`.
    pub(crate) async fn of(
        &self,
        store: &dyn Store,
        session: &str,
        fresh: bool,
    ) -> Result<Arc<Lineage>> {
        if !fresh {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(lineage) = cache.get(session) {
                return Ok(Arc::clone(lineage));
            }
        }
        let lineage = Arc::new(walk(store, session).await?);
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(session.to_owned(), Arc::clone(&lineage));
        Ok(lineage)
    }

    /// Forgets `session` (deleted, or just forked into).
    pub(crate) fn forget(&self, session: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.remove(session);
    }
}

/// Follows `forked_from` from `session` up to its root.
async fn walk(store: &dyn Store, session: &str) -> Result<Lineage> {
    let mut lineage = Lineage::default();
    let Some(mut info) = session_info(store, session).await? else {
        // Gone: its rows cannot be copies of anything we can check.
        lineage.complete = true;
        return Ok(lineage);
    };
    while lineage.links.len() < MAX_DEPTH {
        let Some(origin) = info.forked_from.clone() else {
            lineage.complete = true;
            return Ok(lineage);
        };
        lineage
            .links
            .push((origin.session_id.clone(), origin.index));
        match session_info(store, &origin.session_id).await? {
            // A parent created after its child is another session of that
            // id: the one copied from is gone.
            Some(parent) if parent.incarnation <= info.incarnation => info = parent,
            _ => return Ok(lineage),
        }
    }
    Ok(lineage)
}

/// The listing of session `id`, `None` when there is no such session.
async fn session_info(store: &dyn Store, id: &str) -> Result<Option<SessionInfo>> {
    let mut after = just_before(id);
    loop {
        let page = store
            .sessions(ListSessions {
                after: after.clone(),
                limit: Some(PAGE),
            })
            .await?;
        for info in &page {
            match info.session_id.as_str().cmp(id) {
                std::cmp::Ordering::Equal => return Ok(Some(info.clone())),
                std::cmp::Ordering::Greater => return Ok(None),
                std::cmp::Ordering::Less => {}
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.session_id.clone()),
            _ => return Ok(None),
        }
    }
}

/// A string sorting just below `id` (by code point, as sessions are
/// listed), so that a listing after it starts at `id` or at one of the few
/// ids starting with the returned string.
fn just_before(id: &str) -> Option<String> {
    let last = id.chars().next_back()?;
    let prefix = &id[..id.len() - last.len_utf8()];
    if last == '\0' {
        return Some(prefix.to_owned());
    }
    let below = match last as u32 {
        0xE000 => '\u{D7FF}',
        code => char::from_u32(code - 1).unwrap_or('\0'),
    };
    Some(format!("{prefix}{below}\u{10FFFF}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn just_before_sorts_below_and_close() {
        for id in ["b", "chat-2", "a\u{E000}", "x\u{1}", "é"] {
            let below = just_before(id).unwrap();
            assert!(below.as_str() < id, "{below:?} < {id:?}");
        }
        assert_eq!(just_before("a\0").as_deref(), Some("a"));
        assert_eq!(just_before(""), None);
        // "chat-10" sorts between "chat-1" and "chat-2" but not after the bound.
        assert!("chat-10" < just_before("chat-2").unwrap().as_str());
    }

    #[test]
    fn origin_follows_the_fork_points() {
        // c forked from b through 5; b forked from a through 2; a is a root.
        let lineage = Lineage {
            links: vec![("b".into(), 5), ("a".into(), 2)],
            complete: true,
        };
        assert_eq!(lineage.origin("c", 9), Origin::Session("c"));
        assert_eq!(lineage.origin("c", 4), Origin::Session("b"));
        assert_eq!(lineage.origin("c", 1), Origin::Session("a"));
        let broken = Lineage {
            complete: false,
            ..lineage
        };
        assert_eq!(broken.origin("c", 4), Origin::Session("b"));
        assert_eq!(broken.origin("c", 1), Origin::Unknown);
        assert_eq!(broken.sessions("c"), ["c", "b", "a"]);
    }
}
