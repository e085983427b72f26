//! Retention: `delete_session` (every row goes, work left refuses it unless
//! forced, the `if_last_index` guard, streams end, forks stay), the
//! incarnation fence (nothing from before a delete reaches a new session of
//! the same id, on one store or two), and `prune` (idle and finished only,
//! dead letters kept unless asked, dry runs, pages, bad input).

use std::time::Duration;

use a2_store_api::validate::MAX_SESSION_ID_BYTES;
use a2_store_api::{
    ClaimWorkRequest, ClearRequest, CompleteRequest, CompleteResult, ConsumerDeclaration,
    DeleteSessionRequest, DeleteSessionResult, ErrorCode, FailOutcome, FailRequest, ForkRequest,
    Head, ListSessions, ListWork, NotBefore, PauseRequest, PresenceMeta, PruneRequest, PruneResult,
    ReadStateOptions, RedriveAction, RedriveRequest, Removed, RenewRequest, RescheduleRequest,
    ScheduleChange, StateWrite, Store, MAX_PRUNE_LIMIT,
};
use futures::StreamExt;
use serde_json::json;

use crate::support::*;

/// How long a case waits for a stream to end before failing.
const ENDING: Duration = Duration::from_secs(10);

/// An hour, ms: how long the prune cases leave sessions idle.
const HOUR: i64 = 3_600_000;

/// What `delete_session` removed, or a failure naming what it answered.
fn deleted(result: DeleteSessionResult) -> std::result::Result<Removed, Failure> {
    match result {
        DeleteSessionResult::Deleted { removed } => Ok(removed),
        other => Err(Failure::Fail(format!("expected Deleted, got {other:?}"))),
    }
}

/// Deletes `s` with `force`.
async fn delete(cx: &Cx, s: &str, force: bool) -> std::result::Result<Removed, Failure> {
    let mut request = DeleteSessionRequest::new(s);
    request.force = force;
    deleted(cx.store.delete_session(request).await?)
}

/// The listing of session `s` on `store`, if it is listed.
async fn listed(
    store: &dyn Store,
    s: &str,
) -> std::result::Result<Option<a2_store_api::SessionInfo>, Failure> {
    let page = store
        .sessions(ListSessions {
            after: None,
            limit: None,
        })
        .await?;
    Ok(page.into_iter().find(|info| info.session_id == s))
}

/// Skips a prune case on a store that holds sessions of other cases: a
/// prune acts on the whole store, so it needs one of its own.
async fn own_store(cx: &Cx) -> CaseResult {
    let page = cx
        .store
        .sessions(ListSessions {
            after: None,
            limit: Some(100),
        })
        .await?;
    if page
        .iter()
        .any(|info| !info.session_id.starts_with(&cx.prefix))
    {
        return Err(Failure::Skip(
            "prune acts on the whole store and this factory shares its database between cases"
                .to_owned(),
        ));
    }
    Ok(())
}

/// A prune of sessions idle for `idle_ms`.
fn prune(idle_ms: i64) -> PruneRequest {
    PruneRequest {
        idle_for_ms: idle_ms,
        ..PruneRequest::default()
    }
}

/// Sets alice's `typing` presence field in `s` for an hour.
async fn typing(cx: &Cx, s: &str) -> CaseResult {
    cx.store
        .set_presence(
            s,
            "alice",
            [("typing".to_owned(), json!(true))].into_iter().collect(),
            PresenceMeta {
                at: cx.now(),
                seen: None,
                ttl_ms: HOUR,
            },
        )
        .await?;
    Ok(())
}

/// A session with finished lane work, a dead letter, a snapshot, presence
/// and a pause on its (idle) lane consumer: nothing of it has work left.
async fn finished_session(cx: &Cx, s: &str) -> std::result::Result<(), Failure> {
    cx.append(
        s,
        vec![to_lane("a", "agent", "main"), to_event("b", "notifier")],
    )
    .await?;
    let heads = cx.claim_heads(s, "w1").await?;
    let lane = heads
        .iter()
        .find(|head| head.lane.is_some())
        .ok_or_else(|| Failure::Fail(format!("no lane head among {heads:?}")))?;
    completed(cx.complete(s, lane, vec![msg("reply")]).await?)?;
    let event = heads
        .iter()
        .find(|head| head.lane.is_none())
        .ok_or_else(|| Failure::Fail(format!("no event head among {heads:?}")))?;
    let failed = cx.fail(s, event, Some(1)).await?;
    ensure_eq!(failed.outcome, FailOutcome::DeadLettered);
    cx.store
        .write_state(
            s,
            "reducer",
            vec![StateWrite {
                index: 2,
                state: json!({"turns": 1}),
                pins: Vec::new(),
            }],
        )
        .await?;
    typing(cx, s).await?;
    cx.store.pause(PauseRequest::in_session("agent", s)).await?;
    Ok(())
}

/// A delete removes every row of the session: its log, cursors, dead
/// letters, snapshots, presence and pauses; it is listed nowhere after, and
/// what it removed is reported.
pub(crate) async fn delete_session_removes_every_row_of_the_session(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    finished_session(&cx, &s).await?;
    let info = listed(cx.store.as_ref(), &s)
        .await?
        .ok_or_else(|| Failure::Fail("the session is not listed".to_owned()))?;
    let cursors = cx.cursors(&s).await?;
    let removed = delete(&cx, &s, false).await?;
    ensure_eq!(
        removed,
        Removed::new(
            info.incarnation,
            info.head,
            info.head - info.reclaimed_through,
            cursors.len() as u64,
            0
        )
    );
    ensure_eq!(cx.read_all(&s).await?, Vec::new());
    ensure_eq!(cx.cursors(&s).await?, Vec::new());
    ensure_eq!(cx.store.dead_letters(&s).await?, Vec::new());
    ensure_eq!(cx.store.read_presence(&s).await?, Vec::new());
    let state = cx
        .store
        .read_state(&s, "reducer", ReadStateOptions::default())
        .await?;
    ensure_eq!((state.snapshot, state.clear_index), (None, 0));
    ensure_eq!(cx.store.pauses(Some(&s)).await?, Vec::new());
    ensure_eq!(listed(cx.store.as_ref(), &s).await?, None);
    ensure_eq!(
        cx.store
            .delete_session(DeleteSessionRequest::new(&s))
            .await?,
        DeleteSessionResult::NotFound
    );
    Ok(())
}

/// A deleted session's work is gone from the cross-session listings and
/// claims.
pub(crate) async fn delete_session_removes_its_work_from_every_listing(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_lane("a", &agent, "main")]).await?;
    let listing = ListWork::new([agent.clone()]);
    ensure_eq!(cx.store.list_work(listing.clone()).await?.len(), 1);
    delete(&cx, &s, true).await?;
    ensure_eq!(cx.store.list_work(listing).await?, Vec::new());
    let claim = ClaimWorkRequest::new("w1", vec![ConsumerDeclaration::targeted(&agent)], TTL);
    let result = cx.store.claim_work(claim).await?;
    ensure!(
        result.heads().next().is_none(),
        "a deleted session's head was claimed: {result:?}"
    );
    Ok(())
}

/// Without `force`, a head still leased or claimable refuses the delete
/// with `SESSION_IN_USE` naming it (and its holder); nothing changes. With
/// `force` the delete ends those heads and says how many.
pub(crate) async fn delete_session_with_work_left_needs_force(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "main"), to_event("b", "notifier")],
    )
    .await?;
    let refused = ensure_unchanged!(cx, &s, when |_: &_| true, {
        cx.store.delete_session(DeleteSessionRequest::new(&s)).await
    });
    ensure_code!(refused, ErrorCode::SessionInUse);
    let heads = cx.claim_heads(&s, "w1").await?;
    ensure_eq!(heads.len(), 2);
    let leased = ensure_unchanged!(cx, &s, when |_: &_| true, {
        cx.store.delete_session(DeleteSessionRequest::new(&s)).await
    });
    match leased {
        Err(error) => {
            ensure_eq!(error.code(), ErrorCode::SessionInUse);
            ensure!(
                error.to_string().contains("'w1'"),
                "the refusal does not name the holder: {error}"
            );
        }
        Ok(other) => {
            return Err(Failure::Fail(format!(
                "expected SESSION_IN_USE, got {other:?}"
            )))
        }
    }
    ensure!(
        listed(cx.store.as_ref(), &s).await?.is_some(),
        "the session went"
    );
    let removed = delete(&cx, &s, true).await?;
    ensure_eq!((removed.ended, removed.events, removed.head), (2, 2, 2));
    ensure_eq!(listed(cx.store.as_ref(), &s).await?, None);
    Ok(())
}

/// `if_last_index` other than the head answers `NotDeleted { head }` and
/// changes nothing; equal to it, the session is deleted.
pub(crate) async fn delete_session_if_last_index_guards_the_delete(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    for stale in [1, 3] {
        let answer = ensure_unchanged!(cx, &s, when |_: &_| true, {
            cx.store
                .delete_session(DeleteSessionRequest::new(&s).with_if_last_index(stale))
                .await?
        });
        ensure_eq!(answer, DeleteSessionResult::NotDeleted { head: 2 });
    }
    let removed = deleted(
        cx.store
            .delete_session(DeleteSessionRequest::new(&s).with_if_last_index(2))
            .await?,
    )?;
    ensure_eq!(removed.head, 2);
    Ok(())
}

/// A session never written to is `NotFound`, and asking creates nothing.
pub(crate) async fn delete_session_of_an_unknown_session_is_not_found(cx: Cx) -> CaseResult {
    let s = cx.session_id("never");
    let forced = DeleteSessionRequest::new(&s).forced();
    ensure_eq!(
        cx.store.delete_session(forced).await?,
        DeleteSessionResult::NotFound
    );
    ensure_eq!(listed(cx.store.as_ref(), &s).await?, None);
    ensure_eq!(cx.read_all(&s).await?, Vec::new());
    Ok(())
}

/// A session holding only presence exists: its delete removes the fields.
pub(crate) async fn delete_session_of_a_presence_only_session_removes_it(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    typing(&cx, &s).await?;
    let removed = delete(&cx, &s, false).await?;
    ensure_eq!((removed.events, removed.head, removed.cursors), (0, 0, 0));
    ensure_eq!(cx.store.read_presence(&s).await?, Vec::new());
    Ok(())
}

/// An open subscription of the session ends with `SESSION_DELETED`.
pub(crate) async fn delete_session_ends_open_subscriptions(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let mut stream = cx.store.subscribe(&s, 1).await?;
    delete(&cx, &s, false).await?;
    match tokio::time::timeout(ENDING, stream.next()).await {
        Err(_) => Err(Failure::Fail(format!(
            "the subscription went on for {} s after the delete",
            ENDING.as_secs()
        ))),
        Ok(Some(Err(error))) => {
            ensure_eq!(error.code(), ErrorCode::SessionDeleted);
            Ok(())
        }
        Ok(other) => Err(Failure::Fail(format!(
            "expected the stream to end with SESSION_DELETED, got {other:?}"
        ))),
    }
}

/// A fork of the deleted session keeps its own copy.
pub(crate) async fn delete_session_leaves_its_forks_untouched(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let f = cx.session_id("fork");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    cx.store.fork(ForkRequest::new(&s, &f)).await?;
    let before = cx.state(&f).await?;
    let info = listed(cx.store.as_ref(), &f).await?;
    delete(&cx, &s, false).await?;
    ensure_eq!(cx.state(&f).await?, before);
    ensure_eq!(listed(cx.store.as_ref(), &f).await?, info);
    Ok(())
}

/// A deleted id can be used again at once: a new session from index 1,
/// attempts from 1, in another incarnation that its heads carry.
pub(crate) async fn deleted_session_id_starts_a_new_incarnation(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "main")]).await?;
    let old = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    delete(&cx, &s, true).await?;
    let appended = cx.append(&s, vec![to_lane("a", "agent", "main")]).await?;
    ensure_eq!(idx(&appended.events), vec![1]);
    let new = nth(&cx.claim_heads(&s, "w2").await?, 0)?;
    ensure_eq!(new.cursor_ref(), old.cursor_ref());
    ensure_eq!(new.dispatch.attempt_count, old.dispatch.attempt_count);
    ensure!(
        new.incarnation != old.incarnation,
        "the new session has the old incarnation {}",
        old.incarnation
    );
    let info = listed(cx.store.as_ref(), &s)
        .await?
        .ok_or_else(|| Failure::Fail("the new session is not listed".to_owned()))?;
    ensure_eq!(info.incarnation, new.incarnation);
    Ok(())
}

/// Recreates `s` after claiming its lane head: returns the old head (from
/// before the delete) and the new one, with the same consumer, lane, index
/// and attempt.
pub(super) async fn replaced(
    store: &dyn Store,
    other: &dyn Store,
    cx: &Cx,
    s: &str,
) -> std::result::Result<(Head, Head), Failure> {
    store
        .append(s, vec![to_lane("a", "agent", "main")], Default::default())
        .await?;
    let old = nth(
        &claimed(store.claim_available(cx.req(s, "w1")).await?)?.0,
        0,
    )?;
    deleted(
        store
            .delete_session(DeleteSessionRequest::new(s).forced())
            .await?,
    )?;
    other
        .append(s, vec![to_lane("a", "agent", "main")], Default::default())
        .await?;
    let new = nth(
        &claimed(other.claim_available(cx.req(s, "w1")).await?)?.0,
        0,
    )?;
    ensure_eq!(
        (new.cursor_ref(), new.dispatch.attempt_count),
        (old.cursor_ref(), old.dispatch.attempt_count)
    );
    Ok((old, new))
}

/// Checks that completing, failing and renewing `old` (from before the
/// delete) through `store` is superseded and leaves the new session as it
/// was.
pub(super) async fn stale_attempts_are_superseded(
    store: &dyn Store,
    cx: &Cx,
    s: &str,
    old: &Head,
) -> CaseResult {
    ensure_unchanged!(cx, s, {
        let completed = store
            .complete_attempt(CompleteRequest::for_head(old, vec![msg("late")]))
            .await?;
        ensure_eq!(completed, CompleteResult::Superseded);
        let failed = store
            .fail_attempt(FailRequest::for_head(old, "late", 1))
            .await?;
        ensure_eq!(failed.outcome, FailOutcome::Superseded);
        let renewed = store
            .renew_claims(RenewRequest::for_head(old, Duration::from_secs(60)))
            .await?;
        ensure_eq!(renewed.renewed, Vec::new());
        ensure_eq!(renewed.superseded, vec![old.cursor_ref()]);
    });
    Ok(())
}

/// A completion, failure or renewal of an attempt from before a delete is
/// superseded in the new session of the same id, though its head has the
/// same consumer, lane, index and attempt.
pub(crate) async fn attempts_from_before_a_delete_are_superseded(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let (old, new) = replaced(cx.store.as_ref(), cx.store.as_ref(), &cx, &s).await?;
    stale_attempts_are_superseded(cx.store.as_ref(), &cx, &s, &old).await?;
    completed(
        cx.store
            .complete_attempt(CompleteRequest::for_head(&new, Vec::new()))
            .await?,
    )?;
    Ok(())
}

/// A redrive, reschedule or clear naming the incarnation from before a
/// delete is refused with `SESSION_DELETED`; nothing changes.
pub(crate) async fn requests_from_before_a_delete_are_refused(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "main")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let old = nth(&cx.store.dead_letters(&s).await?, 0)?;
    delete(&cx, &s, false).await?;
    cx.append(&s, vec![to_lane("a", "agent", "main")]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    let new = nth(&cx.store.dead_letters(&s).await?, 0)?;
    ensure_eq!(new.cursor_ref(), old.cursor_ref());
    let stale = Some(old.incarnation);
    ensure_unchanged!(cx, &s, {
        let redrive = cx
            .store
            .redrive(RedriveRequest::for_head(&old, RedriveAction::Retry))
            .await;
        ensure_code!(redrive, ErrorCode::SessionDeleted);
        let reschedule = cx
            .store
            .reschedule(
                RescheduleRequest::new(
                    &s,
                    "agent",
                    Some("main"),
                    1,
                    ScheduleChange::To(NotBefore::AfterMs(HOUR)),
                )
                .with_incarnation(stale),
            )
            .await;
        ensure_code!(reschedule, ErrorCode::SessionDeleted);
        let clear = cx
            .store
            .clear(ClearRequest::new(&s).with_incarnation(stale))
            .await;
        ensure_code!(clear, ErrorCode::SessionDeleted);
    });
    let redriven = cx
        .store
        .redrive(RedriveRequest::for_head(&new, RedriveAction::Retry))
        .await?;
    ensure!(
        redriven.redriven,
        "the current dead letter was not redriven"
    );
    Ok(())
}

/// `prune` deletes the sessions idle for the given time with nothing left
/// to do; one with work left, one appended to since, and one with a dead
/// letter stay (the last goes when dead letters are included).
pub(crate) async fn prune_deletes_idle_sessions_with_nothing_left(cx: Cx) -> CaseResult {
    own_store(&cx).await?;
    let done = cx.session_id("done");
    let waiting = cx.session_id("waiting");
    let dead = cx.session_id("dead");
    let recent = cx.session_id("recent");
    cx.append(&done, vec![to_lane("a", "agent", "main")])
        .await?;
    let head = nth(&cx.claim_heads(&done, "w1").await?, 0)?;
    completed(cx.complete(&done, &head, Vec::new()).await?)?;
    cx.append(&waiting, vec![to_lane("a", "agent", "main")])
        .await?;
    cx.append(&dead, vec![to_lane("a", "agent", "main")])
        .await?;
    let head = nth(&cx.claim_heads(&dead, "w1").await?, 0)?;
    cx.fail(&dead, &head, Some(1)).await?;
    cx.advance(2 * HOUR);
    cx.append(&recent, vec![msg("a")]).await?;
    let pruned = cx.store.prune(prune(HOUR)).await?;
    ensure_eq!(pruned.sessions, vec![done.clone()]);
    ensure_eq!((pruned.examined, pruned.next.clone()), (3, None));
    for kept in [&waiting, &dead, &recent] {
        ensure!(
            listed(cx.store.as_ref(), kept).await?.is_some(),
            "prune deleted {kept}"
        );
    }
    ensure_eq!(listed(cx.store.as_ref(), &done).await?, None);
    let with_dead = cx
        .store
        .prune(PruneRequest {
            include_dead_letters: true,
            ..prune(HOUR)
        })
        .await?;
    ensure_eq!(with_dead.sessions, vec![dead.clone()]);
    ensure!(
        listed(cx.store.as_ref(), &waiting).await?.is_some(),
        "prune deleted a session with a claimable head"
    );
    Ok(())
}

/// A dry run lists what would go and changes nothing.
pub(crate) async fn prune_dry_run_deletes_nothing(cx: Cx) -> CaseResult {
    own_store(&cx).await?;
    let s = cx.session_id("s");
    finished_session(&cx, &s).await?;
    cx.advance(2 * HOUR);
    let before = cx.state(&s).await?;
    let preview = cx
        .store
        .prune(PruneRequest {
            dry_run: true,
            include_dead_letters: true,
            ..prune(HOUR)
        })
        .await?;
    ensure_eq!(
        preview,
        PruneResult::new(vec![s.clone()], 1, None).with_swept(0, 0)
    );
    ensure_eq!(cx.state(&s).await?, before);
    ensure!(
        listed(cx.store.as_ref(), &s).await?.is_some(),
        "a dry run deleted the session"
    );
    Ok(())
}

/// Pages go by last activity, oldest first; `next` continues each page
/// after its last session until no idle session is left.
pub(crate) async fn prune_pages_follow_next_oldest_first(cx: Cx) -> CaseResult {
    own_store(&cx).await?;
    let mut sessions = Vec::new();
    for n in 0..5 {
        let s = cx.session_id(&format!("s{n}"));
        cx.append(&s, vec![msg("a")]).await?;
        cx.advance(1_000);
        sessions.push(s);
    }
    cx.advance(2 * HOUR);
    let mut pruned = Vec::new();
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = cx
            .store
            .prune(prune(HOUR).with_limit(2).after(after))
            .await?;
        pages.push((page.sessions.len(), page.more()));
        pruned.extend(page.sessions.clone());
        after = page.next;
        if after.is_none() || pages.len() > 5 {
            break;
        }
    }
    ensure_eq!(pruned, sessions);
    ensure_eq!(pages.first(), Some(&(2, true)));
    ensure_eq!(pages.last().map(|page| page.1), Some(false));
    ensure_eq!(
        cx.store.prune(prune(HOUR)).await?,
        PruneResult::new(Vec::new(), 0, None)
    );
    Ok(())
}

/// Bad input is `INVALID_INPUT` and changes nothing: an idle time of zero
/// or below, a limit of 0 or above the bound, an empty or oversized
/// session id.
pub(crate) async fn retention_refuses_bad_input(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    cx.advance(2 * HOUR);
    ensure_unchanged!(cx, &s, {
        for idle in [0, -1, i64::MIN] {
            ensure_code!(cx.store.prune(prune(idle)).await, ErrorCode::InvalidInput);
        }
        for limit in [0, MAX_PRUNE_LIMIT + 1] {
            ensure_code!(
                cx.store.prune(prune(1).with_limit(limit)).await,
                ErrorCode::InvalidInput
            );
        }
        for id in [String::new(), "x".repeat(MAX_SESSION_ID_BYTES + 1)] {
            ensure_code!(
                cx.store
                    .delete_session(DeleteSessionRequest::new(id).forced())
                    .await,
                ErrorCode::InvalidInput
            );
        }
    });
    Ok(())
}
