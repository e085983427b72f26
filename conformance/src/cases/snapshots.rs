//! Reducer snapshots: the head snapshot, pinned checkpoints and their
//! release (advance, dead-letter, clear), the clear and `at` bounds.

use a2_store_api::{
    ClearRequest, CursorRef, ReadStateOptions, RedriveAction, RedriveRequest, Snapshot, StateRead,
    StateWrite,
};
use serde_json::{json, Value};

use crate::support::*;

fn write(index: u64, state: Value, pins: Vec<CursorRef>) -> StateWrite {
    StateWrite { index, state, pins }
}

fn snap(index: u64, state: Value) -> Option<Snapshot> {
    Some(Snapshot::new(index, state))
}

async fn read(cx: &Cx, s: &str, at: Option<u64>) -> std::result::Result<StateRead, Failure> {
    Ok(cx
        .store
        .read_state(s, "reducer", ReadStateOptions { at })
        .await?)
}

async fn put(cx: &Cx, s: &str, writes: Vec<StateWrite>) -> CaseResult {
    cx.store.write_state(s, "reducer", writes).await?;
    Ok(())
}

async fn clear(cx: &Cx, s: &str) -> CaseResult {
    cx.store
        .clear(ClearRequest {
            session_id: s.to_owned(),
            ..ClearRequest::default()
        })
        .await?;
    Ok(())
}

/// A reducer never written reads no snapshot and clear index 0.
pub(crate) async fn read_state_without_writes_is_empty(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    ensure_eq!(read(&cx, &s, None).await?, StateRead::new(None, 0));
    Ok(())
}

/// The most recent write is the head snapshot; an unpinned older write is not kept.
pub(crate) async fn read_state_returns_most_recent_write(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b"), msg("c")]).await?;
    put(&cx, &s, vec![write(1, json!("one"), vec![])]).await?;
    put(&cx, &s, vec![write(3, json!("three"), vec![])]).await?;
    ensure_eq!(read(&cx, &s, None).await?.snapshot, snap(3, json!("three")));
    ensure_eq!(read(&cx, &s, Some(2)).await?.snapshot, None);
    Ok(())
}

/// The head snapshot is the most recent write even when its index is lower.
pub(crate) async fn head_snapshot_is_most_recent_even_if_lower(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    put(&cx, &s, vec![write(5, json!("five"), vec![])]).await?;
    put(&cx, &s, vec![write(3, json!("three"), vec![])]).await?;
    ensure_eq!(read(&cx, &s, None).await?.snapshot, snap(3, json!("three")));
    Ok(())
}

/// One call's writes are applied in index order: the highest becomes the head snapshot.
pub(crate) async fn writes_of_one_call_apply_in_index_order(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    put(
        &cx,
        &s,
        vec![
            write(5, json!("five"), vec![]),
            write(3, json!("three"), vec![]),
        ],
    )
    .await?;
    ensure_eq!(read(&cx, &s, None).await?.snapshot, snap(5, json!("five")));
    Ok(())
}

/// No snapshot above `at` is returned.
pub(crate) async fn read_state_never_returns_above_at(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    put(&cx, &s, vec![write(5, json!("five"), vec![])]).await?;
    ensure_eq!(read(&cx, &s, Some(4)).await?.snapshot, None);
    ensure_eq!(
        read(&cx, &s, Some(5)).await?.snapshot,
        snap(5, json!("five"))
    );
    Ok(())
}

/// A checkpoint pinned to a head stays readable at or below `at` while the pin holds.
pub(crate) async fn pinned_checkpoint_readable_while_pin_holds(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b"), msg("c")])
        .await?;
    let pin = at("agent", Some("L1"), 1);
    put(&cx, &s, vec![write(1, json!("one"), vec![pin])]).await?;
    put(&cx, &s, vec![write(3, json!("three"), vec![])]).await?;
    ensure_eq!(
        read(&cx, &s, Some(2)).await?.snapshot,
        snap(1, json!("one"))
    );
    ensure_eq!(read(&cx, &s, None).await?.snapshot, snap(3, json!("three")));
    ensure_eq!(read(&cx, &s, Some(0)).await?.snapshot, None);
    Ok(())
}

/// A pin holds through claims and (non-final) failures of its head.
pub(crate) async fn pin_holds_through_claims_and_failures(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    put(
        &cx,
        &s,
        vec![write(1, json!("one"), vec![at("agent", Some("L1"), 1)])],
    )
    .await?;
    put(&cx, &s, vec![write(2, json!("two"), vec![])]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(3)).await?;
    cx.advance(TTL);
    cx.claim_heads(&s, "w1").await?;
    ensure_eq!(
        read(&cx, &s, Some(1)).await?.snapshot,
        snap(1, json!("one"))
    );
    Ok(())
}

/// A pin is released when its head advances (completion).
pub(crate) async fn pin_released_when_head_advances(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    put(
        &cx,
        &s,
        vec![write(1, json!("one"), vec![at("agent", Some("L1"), 1)])],
    )
    .await?;
    put(&cx, &s, vec![write(2, json!("two"), vec![])]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    completed(cx.complete(&s, &head, vec![]).await?)?;
    ensure_eq!(read(&cx, &s, Some(1)).await?.snapshot, None);
    Ok(())
}

/// A pin is released when its head is dead-lettered (and not restored by a redrive).
pub(crate) async fn pin_released_on_dead_letter(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1"), msg("b")])
        .await?;
    put(
        &cx,
        &s,
        vec![write(1, json!("one"), vec![at("agent", Some("L1"), 1)])],
    )
    .await?;
    put(&cx, &s, vec![write(2, json!("two"), vec![])]).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    cx.fail(&s, &head, Some(1)).await?;
    ensure_eq!(read(&cx, &s, Some(1)).await?.snapshot, None);
    cx.store
        .redrive(RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: s.clone(),
            consumer: "agent".into(),
            index: 1,
            action: RedriveAction::Retry,
            consumers: None,
        })
        .await?;
    ensure_eq!(read(&cx, &s, Some(1)).await?.snapshot, None);
    Ok(())
}

/// A clear releases every pin and hides every snapshot below it.
pub(crate) async fn pin_released_on_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), msg("b")])
        .await?;
    put(
        &cx,
        &s,
        vec![
            write(1, json!("one"), vec![at("agent", None, 1)]),
            write(2, json!("two"), vec![]),
        ],
    )
    .await?;
    clear(&cx, &s).await?;
    ensure_eq!(read(&cx, &s, None).await?, StateRead::new(None, 3));
    ensure_eq!(read(&cx, &s, Some(1)).await?.snapshot, None);
    Ok(())
}

/// A pin naming a head its cursor does not have (or no cursor) keeps nothing.
pub(crate) async fn pin_on_head_not_held_keeps_nothing(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![to_lane("a", "agent", "L1"), to_lane("b", "agent", "L1")],
    )
    .await?;
    put(
        &cx,
        &s,
        vec![
            write(1, json!("one"), vec![at("agent", Some("L1"), 2)]),
            write(2, json!("two"), vec![at("ghost", None, 2)]),
        ],
    )
    .await?;
    put(&cx, &s, vec![write(3, json!("three"), vec![])]).await?;
    ensure_eq!(read(&cx, &s, Some(2)).await?.snapshot, None);
    Ok(())
}

/// The highest pinned checkpoint at or below `at` wins; releasing it falls back to the next.
pub(crate) async fn highest_pinned_checkpoint_wins(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_event("a", "agent"), to_event("b", "agent")])
        .await?;
    put(
        &cx,
        &s,
        vec![
            write(1, json!("one"), vec![at("agent", None, 1)]),
            write(2, json!("two"), vec![at("agent", None, 2)]),
        ],
    )
    .await?;
    put(&cx, &s, vec![write(5, json!("five"), vec![])]).await?;
    ensure_eq!(
        read(&cx, &s, Some(3)).await?.snapshot,
        snap(2, json!("two"))
    );
    let heads = cx.claim_heads(&s, "w1").await?;
    completed(cx.complete(&s, &nth(&heads, 1)?, vec![]).await?)?;
    ensure_eq!(
        read(&cx, &s, Some(3)).await?.snapshot,
        snap(1, json!("one"))
    );
    Ok(())
}

/// Snapshots below the clear are never returned.
pub(crate) async fn read_state_never_returns_below_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    put(&cx, &s, vec![write(2, json!("two"), vec![])]).await?;
    clear(&cx, &s).await?;
    ensure_eq!(read(&cx, &s, None).await?, StateRead::new(None, 3));
    Ok(())
}

/// Writes below the clear are ignored; a write at the clear index itself is kept.
pub(crate) async fn writes_below_clear_are_ignored(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    clear(&cx, &s).await?;
    put(&cx, &s, vec![write(2, json!("two"), vec![])]).await?;
    ensure_eq!(read(&cx, &s, None).await?.snapshot, None);
    put(&cx, &s, vec![write(3, json!("three"), vec![])]).await?;
    put(&cx, &s, vec![write(1, json!("one"), vec![])]).await?;
    ensure_eq!(
        read(&cx, &s, None).await?,
        StateRead::new(snap(3, json!("three")), 3)
    );
    Ok(())
}

/// Snapshots are kept per reducer.
pub(crate) async fn snapshots_are_per_reducer(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.store
        .write_state(&s, "left", vec![write(1, json!("l"), vec![])])
        .await?;
    cx.store
        .write_state(&s, "right", vec![write(2, json!("r"), vec![])])
        .await?;
    let left = cx
        .store
        .read_state(&s, "left", ReadStateOptions::default())
        .await?;
    ensure_eq!(left.snapshot, snap(1, json!("l")));
    let other = cx
        .store
        .read_state(&s, "other", ReadStateOptions::default())
        .await?;
    ensure_eq!(other.snapshot, None);
    Ok(())
}
