//! `subscribe`: backlog then live, no gap and no duplicate under racing
//! appends, clear markers, completions' returned events, `after` beyond the head.

use std::time::Duration;

use a2_store_api::{ClearRequest, EventStream, StoredEvent, CLEAR_EVENT_TYPE};
use futures::StreamExt;

use crate::support::*;

/// How long a case waits for an event it knows was appended before failing.
const DELIVERY: Duration = Duration::from_secs(10);

/// The next event of `stream`, failing on an error, the end of the stream or a stall.
pub(super) async fn next(stream: &mut EventStream) -> std::result::Result<StoredEvent, Failure> {
    match tokio::time::timeout(DELIVERY, stream.next()).await {
        Err(_) => Err(Failure::Fail(format!(
            "the subscription delivered nothing within {} s",
            DELIVERY.as_secs()
        ))),
        Ok(None) => Err(Failure::Fail("the subscription ended early".to_owned())),
        Ok(Some(Err(error))) => Err(Failure::Fail(format!(
            "the subscription failed: {} {error}",
            error.code()
        ))),
        Ok(Some(Ok(event))) => Ok(event),
    }
}

/// The next `n` events of `stream`.
pub(crate) async fn take(
    stream: &mut EventStream,
    n: usize,
) -> std::result::Result<Vec<StoredEvent>, Failure> {
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        events.push(next(stream).await?);
    }
    Ok(events)
}

/// The stored backlog comes first, then live appends, as the stored rows.
pub(crate) async fn subscribe_delivers_backlog_then_live(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    let mut stream = cx.store.subscribe(&s, 0).await?;
    cx.append(&s, vec![msg("c")]).await?;
    cx.append(&s, vec![msg("d"), msg("e")]).await?;
    let got = take(&mut stream, 5).await?;
    ensure_eq!(got, cx.read_all(&s).await?);
    Ok(())
}

/// `after` skips the backlog up to and including that index.
pub(crate) async fn subscribe_after_skips_backlog(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b"), msg("c")]).await?;
    let mut stream = cx.store.subscribe(&s, 2).await?;
    cx.append(&s, vec![msg("d")]).await?;
    ensure_eq!(idx(&take(&mut stream, 2).await?), vec![3, 4]);
    Ok(())
}

/// `after` beyond the head delivers nothing until the log passes it.
pub(crate) async fn subscribe_after_beyond_head_waits_for_it(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    let mut stream = cx.store.subscribe(&s, 4).await?;
    cx.append(&s, vec![msg("c"), msg("d")]).await?;
    cx.append(&s, vec![msg("e"), msg("f")]).await?;
    ensure_eq!(idx(&take(&mut stream, 2).await?), vec![5, 6]);
    Ok(())
}

/// A subscription on a session never written delivers its first events.
pub(crate) async fn subscribe_to_new_session_delivers_first_events(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let mut stream = cx.store.subscribe(&s, 0).await?;
    cx.append(&s, vec![msg("a")]).await?;
    ensure_eq!(ids(&take(&mut stream, 1).await?), strs(&["a"]));
    Ok(())
}

/// Appends racing the subscription are delivered with no gap and no duplicate.
pub(crate) async fn subscribe_has_no_gap_or_duplicate_while_appends_race(cx: Cx) -> CaseResult {
    const TOTAL: u64 = 300;
    let s = cx.session_id("s");
    let writer = {
        let store = cx.store.clone();
        let s = s.clone();
        tokio::spawn(async move {
            let mut written = 0u64;
            let mut size = 1u64;
            while written < TOTAL {
                let n = size.min(TOTAL - written);
                let batch = (0..n)
                    .map(|k| msg(&format!("e{}", written + k + 1)))
                    .collect();
                store
                    .append(&s, batch, a2_store_api::AppendOptions::default())
                    .await?;
                written += n;
                size = size % 3 + 1;
                tokio::task::yield_now().await;
            }
            Ok::<_, a2_store_api::StoreError>(())
        })
    };
    let mut early = cx.store.subscribe(&s, 0).await?;
    tokio::task::yield_now().await;
    let mut late = cx.store.subscribe(&s, 0).await?;
    let got_early = take(&mut early, TOTAL as usize).await?;
    let got_late = take(&mut late, TOTAL as usize).await?;
    match writer.await {
        Ok(result) => result?,
        Err(join) => return Err(Failure::Fail(format!("the writer task failed: {join}"))),
    }
    let expected: Vec<u64> = (1..=TOTAL).collect();
    ensure_eq!(idx(&got_early), expected);
    ensure_eq!(idx(&got_late), expected);
    ensure_eq!(got_early, cx.read_all(&s).await?);
    Ok(())
}

/// A clear's marker is delivered in order like any event.
pub(crate) async fn subscribe_sees_clear_marker(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let mut stream = cx.store.subscribe(&s, 0).await?;
    cx.append(&s, vec![msg("a")]).await?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    cx.append(&s, vec![msg("b")]).await?;
    let got = take(&mut stream, 3).await?;
    ensure_eq!(idx(&got), vec![1, 2, 3]);
    ensure_eq!(got[1].event_type, CLEAR_EVENT_TYPE);
    Ok(())
}

/// Events a completion returns are delivered like appends.
pub(crate) async fn subscribe_sees_completion_returned_events(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", "agent", "L1")]).await?;
    let mut stream = cx.store.subscribe(&s, 1).await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let returned = completed(cx.complete(&s, &head, vec![ev("reply", "r")]).await?)?;
    ensure_eq!(take(&mut stream, 1).await?, returned);
    Ok(())
}

/// A subscription sees only its own session's events.
pub(crate) async fn subscribe_sees_only_its_session(cx: Cx) -> CaseResult {
    let (s1, s2) = (cx.session_id("one"), cx.session_id("two"));
    let mut stream = cx.store.subscribe(&s1, 0).await?;
    cx.append(&s2, vec![msg("other")]).await?;
    cx.append(&s1, vec![msg("mine")]).await?;
    let got = next(&mut stream).await?;
    ensure_eq!(got.id, "mine");
    ensure_eq!(got.session_id, s1);
    Ok(())
}

/// Failed appends deliver nothing: the next delivered event is the next stored one.
pub(crate) async fn subscribe_skips_failed_appends(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let mut stream = cx.store.subscribe(&s, 1).await?;
    let rejected = cx.append(&s, vec![msg("b"), msg("a")]).await;
    ensure!(rejected.is_err(), "a partial duplicate batch must fail");
    cx.append(&s, vec![msg("c")]).await?;
    let got = next(&mut stream).await?;
    ensure_eq!((got.index, got.id.as_str()), (2, "c"));
    Ok(())
}

/// A subscription ends once the store (every handle of it) is dropped.
pub(crate) async fn subscription_ends_when_store_is_dropped(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a")]).await?;
    let Cx { store, .. } = cx;
    let mut stream = store.subscribe(&s, 0).await?;
    ensure_eq!(next(&mut stream).await?.id, "a");
    drop(store);
    match tokio::time::timeout(DELIVERY, stream.next()).await {
        Ok(None) => Ok(()),
        Ok(Some(Err(_))) => match tokio::time::timeout(DELIVERY, stream.next()).await {
            Ok(None) => Ok(()),
            other => Err(Failure::Fail(format!(
                "the subscription did not end after its error: {other:?}"
            ))),
        },
        Ok(Some(Ok(event))) => Err(Failure::Fail(format!(
            "a dropped store delivered {event:?}"
        ))),
        Err(_) => Err(Failure::Fail(format!(
            "the subscription was still open {} s after the store was dropped",
            DELIVERY.as_secs()
        ))),
    }
}

/// After a reclaim the backlog starts at what remains (the marker onwards).
pub(crate) async fn subscribe_after_reclaim_delivers_what_remains(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![msg("a"), msg("b")]).await?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    cx.store.reclaim(&s).await?;
    let mut stream = cx.store.subscribe(&s, 0).await?;
    cx.append(&s, vec![msg("c")]).await?;
    let got = take(&mut stream, 2).await?;
    ensure_eq!(idx(&got), vec![3, 4]);
    ensure_eq!(got[0].event_type, CLEAR_EVENT_TYPE);
    Ok(())
}
