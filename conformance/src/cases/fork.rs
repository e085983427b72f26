//! `fork`: a session's log copied through an index into a new session,
//! which records where it came from and carries on on its own.

use a2_store_api::{
    ClearRequest, ErrorCode, ForkOrigin, ForkRequest, ListSessions, ReclaimResult, SessionInfo,
    StoredEvent, CLEAR_EVENT_TYPE,
};

use super::subscribe::take;
use crate::support::*;

/// The rows of `events` as they read in session `into`.
fn moved(events: &[StoredEvent], into: &str) -> Vec<StoredEvent> {
    events
        .iter()
        .map(|event| {
            let mut event = event.clone();
            event.session_id = into.to_owned();
            event
        })
        .collect()
}

/// The listing of `session_id`, from `sessions()`.
async fn listing(cx: &Cx, session_id: &str) -> std::result::Result<Option<SessionInfo>, Failure> {
    let page = cx
        .store
        .sessions(ListSessions {
            after: Some(format!("{}-", cx.prefix)),
            limit: Some(100),
        })
        .await?;
    Ok(page.into_iter().find(|info| info.session_id == session_id))
}

/// A fork copies the rows through the index with their ids, types,
/// payloads, times and causes; `sessions()` lists it with its origin; the
/// source is untouched; without an index it copies through the head.
pub(crate) async fn fork_copies_the_log_through_an_index(cx: Cx) -> CaseResult {
    let (a, b, c) = (cx.session_id("a"), cx.session_id("b"), cx.session_id("c"));
    let agent = cx.consumer("agent");
    cx.append(&a, vec![to_event("e1", &agent)]).await?;
    let head = cx.claim_heads(&a, "w").await?.remove(0);
    cx.advance(10);
    cx.append(&a, vec![msg("e2").with_cause(head.cause())])
        .await?;
    cx.advance(10);
    cx.append(&a, vec![msg("e3")]).await?;
    let source = cx.read_all(&a).await?;
    let fork = cx.store.fork(ForkRequest::new(&a, &b).through(2)).await?;
    ensure!(fork.session.incarnation != 0, "the fork has no incarnation");
    let expected = SessionInfo::new(b.clone(), 2, 0, 0)
        .with_forked_from(Some(ForkOrigin::new(a.clone(), 2)))
        .with_incarnation(fork.session.incarnation);
    ensure_eq!((fork.session.clone(), fork.copied), (expected.clone(), 2));
    ensure_eq!(cx.read_all(&b).await?, moved(&source[..2], &b));
    ensure_eq!(listing(&cx, &b).await?, Some(expected));
    ensure_eq!(cx.read_all(&a).await?, source, "the source is untouched");
    ensure_eq!(
        listing(&cx, &a).await?.and_then(|info| info.forked_from),
        None
    );
    let whole = cx.store.fork(ForkRequest::new(&a, &c)).await?;
    ensure_eq!((whole.session.head, whole.copied), (3, 3));
    ensure_eq!(cx.read_all(&c).await?, moved(&source, &c));
    Ok(())
}

/// A fork of a cleared session starts at its marker: the same clear index,
/// nothing below it (`reclaimed_through = clear - 1`), nothing to reclaim.
pub(crate) async fn fork_of_a_cleared_session_starts_at_its_marker(cx: Cx) -> CaseResult {
    let (a, b) = (cx.session_id("a"), cx.session_id("b"));
    cx.append(&a, vec![msg("e1"), msg("e2")]).await?;
    cx.store.clear(ClearRequest::new(&a)).await?;
    cx.append(&a, vec![msg("e4"), msg("e5")]).await?;
    let fork = cx.store.fork(ForkRequest::new(&a, &b).through(4)).await?;
    ensure_eq!(
        (
            fork.session.head,
            fork.session.clear_index,
            fork.session.reclaimed_through,
            fork.copied
        ),
        (4, 3, 2, 2)
    );
    let rows = cx.read_all(&b).await?;
    ensure_eq!(idx(&rows), vec![3, 4]);
    ensure_eq!(rows[0].event_type, CLEAR_EVENT_TYPE);
    ensure_eq!(cx.store.reclaim(&b).await?, ReclaimResult::nothing_left());
    Ok(())
}

/// A fork has no cursors and no work; subscribers see its rows, later
/// appends continue after the fork point, and its copied ids replay.
pub(crate) async fn fork_has_no_cursors_and_continues_its_log(cx: Cx) -> CaseResult {
    let (a, b) = (cx.session_id("a"), cx.session_id("b"));
    let agent = cx.consumer("agent");
    let first = to_lane("e1", &agent, "L");
    cx.append(&a, vec![first.clone()]).await?;
    cx.append_for(
        &a,
        vec![msg("e2")],
        vec![log_consumer(&agent, "log", None, true)],
    )
    .await?;
    cx.store.fork(ForkRequest::new(&a, &b)).await?;
    ensure_eq!(cx.cursors(&b).await?, vec![]);
    settled(cx.claim(&b, "w").await?)?;
    ensure_eq!(
        cx.store.list_work(cx.list(&["agent"])).await?.len(),
        1,
        "only the source has work"
    );
    let mut stream = cx.store.subscribe(&b, 0).await?;
    ensure_eq!(idx(&take(&mut stream, 2).await?), vec![1, 2]);
    let replay = cx.append(&b, vec![first]).await?;
    ensure_eq!(idx(&replay.events), vec![1], "a copied id replays");
    let appended = cx.append(&b, vec![msg("e3")]).await?;
    ensure_eq!(idx(&appended.events), vec![3]);
    ensure_eq!(idx(&take(&mut stream, 1).await?), vec![3]);
    ensure_eq!(
        idx(&cx.read_all(&a).await?),
        vec![1, 2],
        "the source is untouched"
    );
    Ok(())
}

/// A fork into itself, of a session with no rows, into a session with
/// rows, through an index above the head, below the clear or 0 is
/// `InvalidInput`, and nothing changes in either session.
pub(crate) async fn fork_rejects_bad_input(cx: Cx) -> CaseResult {
    let (a, b, c, empty) = (
        cx.session_id("a"),
        cx.session_id("b"),
        cx.session_id("c"),
        cx.session_id("empty"),
    );
    cx.append(&a, vec![msg("e1"), msg("e2")]).await?;
    cx.store.clear(ClearRequest::new(&a)).await?;
    cx.append(&a, vec![msg("e4")]).await?;
    cx.append(&b, vec![msg("x")]).await?;
    ensure_unchanged!(cx, &a, {
        ensure_unchanged!(cx, &b, {
            for request in [
                ForkRequest::new(&a, &a),
                ForkRequest::new(&a, &b),
                ForkRequest::new(&a, &c).through(5),
                ForkRequest::new(&a, &c).through(2),
                ForkRequest::new(&a, &c).through(0),
                ForkRequest::new(&empty, &c),
                ForkRequest::new("", &c),
                ForkRequest::new(&a, ""),
            ] {
                ensure_code!(cx.store.fork(request).await, ErrorCode::InvalidInput);
            }
        });
    });
    ensure_eq!(cx.read_all(&c).await?, vec![]);
    ensure_eq!(listing(&cx, &c).await?, None);
    Ok(())
}
