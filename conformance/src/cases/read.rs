//! `read` ranges, `sessions()` listing and session isolation.

use a2_store_api::{ClearRequest, ErrorCode, ListSessions, PresenceMeta, ReadOptions};

use crate::support::*;

fn range(after: Option<u64>, through: Option<u64>, limit: Option<usize>) -> ReadOptions {
    ReadOptions {
        after,
        through,
        limit,
    }
}

async fn five(cx: &Cx) -> std::result::Result<String, Failure> {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b"), msg("c"), msg("d"), msg("e")])
        .await?;
    Ok(s)
}

/// Default options read the whole log in order.
pub(crate) async fn read_defaults_to_whole_log(cx: Cx) -> CaseResult {
    let s = five(&cx).await?;
    let rows = cx.store.read(&s, ReadOptions::default()).await?;
    ensure_eq!(idx(&rows), vec![1, 2, 3, 4, 5]);
    ensure_eq!(ids(&rows), strs(&["a", "b", "c", "d", "e"]));
    Ok(())
}

/// `after` is exclusive and `through` inclusive.
pub(crate) async fn read_respects_after_and_through(cx: Cx) -> CaseResult {
    let s = five(&cx).await?;
    ensure_eq!(
        idx(&cx.store.read(&s, range(Some(1), Some(3), None)).await?),
        vec![2, 3]
    );
    ensure_eq!(
        idx(&cx.store.read(&s, range(Some(3), None, None)).await?),
        vec![4, 5]
    );
    ensure_eq!(
        idx(&cx.store.read(&s, range(None, Some(2), None)).await?),
        vec![1, 2]
    );
    Ok(())
}

/// `limit` caps the rows, lowest first.
pub(crate) async fn read_limit_caps_rows(cx: Cx) -> CaseResult {
    let s = five(&cx).await?;
    ensure_eq!(
        idx(&cx.store.read(&s, range(Some(1), None, Some(2))).await?),
        vec![2, 3]
    );
    ensure_eq!(
        idx(&cx.store.read(&s, range(None, None, Some(0))).await?),
        Vec::<u64>::new()
    );
    Ok(())
}

/// Bounds beyond the head are clamped; an empty range reads nothing.
pub(crate) async fn read_bounds_beyond_head_are_empty_or_clamped(cx: Cx) -> CaseResult {
    let s = five(&cx).await?;
    ensure_eq!(
        idx(&cx.store.read(&s, range(Some(3), Some(99), None)).await?),
        vec![4, 5]
    );
    ensure_eq!(
        idx(&cx.store.read(&s, range(Some(5), None, None)).await?),
        Vec::<u64>::new()
    );
    ensure_eq!(
        idx(&cx.store.read(&s, range(Some(9), None, None)).await?),
        Vec::<u64>::new()
    );
    ensure_eq!(
        idx(&cx.store.read(&s, range(Some(2), Some(2), None)).await?),
        Vec::<u64>::new()
    );
    Ok(())
}

/// `through < after` is `InvalidInput`.
pub(crate) async fn read_through_below_after_is_invalid(cx: Cx) -> CaseResult {
    let s = five(&cx).await?;
    ensure_code!(
        cx.store.read(&s, range(Some(3), Some(2), None)).await,
        ErrorCode::InvalidInput
    );
    Ok(())
}

/// A session never written reads as empty.
pub(crate) async fn read_of_unknown_session_is_empty(cx: Cx) -> CaseResult {
    ensure_eq!(cx.read_all(&cx.session_id("never")).await?, vec![]);
    ensure_eq!(cx.cursors(&cx.session_id("never")).await?, vec![]);
    ensure_eq!(
        cx.store.dead_letters(&cx.session_id("never")).await?,
        vec![]
    );
    Ok(())
}

async fn listed(cx: &Cx, after: &str, limit: Option<usize>) -> StoreResult<Vec<String>> {
    let rows = cx
        .store
        .sessions(ListSessions {
            after: Some(after.to_owned()),
            limit,
        })
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| row.session_id)
        .filter(|id| id.starts_with(&cx.session_id("")))
        .collect())
}

use a2_store_api::Result as StoreResult;

/// `sessions()` lists written sessions by id with head, clear index and reclaimed offset.
pub(crate) async fn sessions_lists_written_sessions_by_id(cx: Cx) -> CaseResult {
    let base = cx.session_id("");
    let (b, a, c) = (cx.session_id("b"), cx.session_id("a"), cx.session_id("c"));
    cx.append(&b, vec![msg("x"), msg("y")]).await?;
    cx.append(&a, vec![msg("x")]).await?;
    cx.append(&c, vec![msg("x"), msg("y"), msg("z")]).await?;
    cx.store
        .clear(ClearRequest {
            session_id: c.clone(),
            ..ClearRequest::default()
        })
        .await?;
    cx.store.reclaim(&c).await?;
    let rows = cx
        .store
        .sessions(ListSessions {
            after: Some(base.clone()),
            limit: None,
        })
        .await?;
    let mine: Vec<_> = rows
        .into_iter()
        .filter(|row| row.session_id.starts_with(&base))
        .map(|row| {
            (
                row.session_id,
                row.head,
                row.clear_index,
                row.reclaimed_through,
            )
        })
        .collect();
    ensure_eq!(mine, vec![(a, 1, 0, 0), (b, 2, 0, 0), (c, 4, 4, 3)]);
    Ok(())
}

/// `after` is exclusive and `limit` caps the page.
pub(crate) async fn sessions_page_with_after_and_limit(cx: Cx) -> CaseResult {
    let base = cx.session_id("");
    for name in ["a", "b", "c", "d"] {
        cx.append(&cx.session_id(name), vec![msg("x")]).await?;
    }
    ensure_eq!(
        listed(&cx, &base, Some(2)).await?,
        vec![cx.session_id("a"), cx.session_id("b")]
    );
    ensure_eq!(
        listed(&cx, &cx.session_id("b"), None).await?,
        vec![cx.session_id("c"), cx.session_id("d")]
    );
    ensure_eq!(
        listed(&cx, &cx.session_id("b"), Some(1)).await?,
        vec![cx.session_id("c")]
    );
    ensure_eq!(
        listed(&cx, &cx.session_id("d"), None).await?,
        Vec::<String>::new()
    );
    Ok(())
}

/// Sessions with no appended row (only presence, state or a wake) are not listed.
pub(crate) async fn sessions_omit_sessions_without_events(cx: Cx) -> CaseResult {
    let base = cx.session_id("");
    let quiet = cx.session_id("quiet");
    cx.store
        .set_presence(
            &quiet,
            "ann",
            [("typing".to_owned(), serde_json::json!(true))].into(),
            PresenceMeta {
                at: 1,
                seen: None,
                ttl_ms: TTL,
            },
        )
        .await?;
    cx.store
        .write_state(
            &quiet,
            "r",
            vec![a2_store_api::StateWrite {
                index: 0,
                state: serde_json::json!(1),
                pins: vec![],
            }],
        )
        .await?;
    cx.store
        .wake_log(&quiet, &log_consumer("audit", "log", None, true))
        .await?;
    cx.append(&cx.session_id("loud"), vec![msg("x")]).await?;
    ensure_eq!(listed(&cx, &base, None).await?, vec![cx.session_id("loud")]);
    Ok(())
}

/// Sessions are independent: work, ids and cursors of one never show in another.
pub(crate) async fn sessions_are_isolated(cx: Cx) -> CaseResult {
    let (s1, s2) = (cx.session_id("one"), cx.session_id("two"));
    cx.append_for(
        &s1,
        vec![to_lane("a", "agent", "L1"), to_event("b", "agent")],
        vec![log_consumer("audit", "log", None, false)],
    )
    .await?;
    cx.store
        .clear(ClearRequest {
            session_id: s1.clone(),
            ..ClearRequest::default()
        })
        .await?;
    ensure_eq!(cx.cursors(&s2).await?, vec![]);
    ensure_eq!(cx.read_all(&s2).await?, vec![]);
    settled(cx.claim(&s2, "w1").await?)?;
    let other = cx.append(&s2, vec![msg("a")]).await?;
    ensure_eq!(idx(&other.events), vec![1]);
    ensure!(
        !other.has_pending,
        "nothing is pending in the other session"
    );
    let state = cx.store.read_state(&s2, "r", Default::default()).await?;
    ensure_eq!(state.clear_index, 0);
    Ok(())
}

/// A session holding only a clear marker is listed (its head is the marker).
pub(crate) async fn sessions_list_a_session_holding_only_a_marker(cx: Cx) -> CaseResult {
    let base = cx.session_id("");
    let s = cx.session_id("m");
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    let rows = cx
        .store
        .sessions(ListSessions {
            after: Some(base.clone()),
            limit: None,
        })
        .await?;
    let mine: Vec<_> = rows
        .into_iter()
        .filter(|row| row.session_id.starts_with(&base))
        .map(|row| (row.session_id, row.head, row.clear_index))
        .collect();
    ensure_eq!(mine, vec![(s, 1, 1)]);
    Ok(())
}
