//! Concurrency: racing claimers never share a head, racing appends stay
//! contiguous and atomic, racing completions and replays apply once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, Store, StoreError,
    StoredEvent,
};

use crate::support::*;

const WORKERS: usize = 8;

/// What one worker saw: `(index, consumer, lane, attempt)` of every head it
/// claimed, in claim order, and the outcome of each completion.
type Seen = Vec<(u64, String, Option<String>, u32, bool)>;

/// Claims and completes until the session is settled; every claim is
/// completed by the same worker right away.
async fn worker(
    store: Arc<dyn Store>,
    s: String,
    holder: String,
) -> std::result::Result<Seen, StoreError> {
    let mut seen = Seen::new();
    loop {
        let request = ClaimRequest {
            session_id: s.clone(),
            holder: holder.clone(),
            ttl_ms: Some(600_000),
            ..ClaimRequest::default()
        };
        match store.claim_available(request).await? {
            ClaimResult::Settled => return Ok(seen),
            ClaimResult::Busy { .. } => tokio::task::yield_now().await,
            ClaimResult::Claimed { heads, .. } => {
                for head in heads {
                    let outcome = store
                        .complete_attempt(CompleteRequest {
                            incarnation: None,
                            session_id: s.clone(),
                            consumer: head.consumer.clone(),
                            lane: head.lane.clone(),
                            index: head.event.index,
                            attempt: head.dispatch.attempt_count,
                            events: vec![],
                            consumers: None,
                        })
                        .await?;
                    seen.push((
                        head.event.index,
                        head.consumer,
                        head.lane,
                        head.dispatch.attempt_count,
                        matches!(outcome, CompleteResult::Completed { .. }),
                    ));
                }
            }
            other => {
                return Err(StoreError::backend(
                    "claim_available",
                    format!("unexpected claim result {other:?}"),
                ))
            }
        }
    }
}

async fn join_all<T>(
    tasks: Vec<tokio::task::JoinHandle<std::result::Result<T, StoreError>>>,
) -> std::result::Result<Vec<T>, Failure> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        match task.await {
            Ok(Ok(value)) => results.push(value),
            Ok(Err(error)) => return Err(error.into()),
            Err(join) => return Err(Failure::Fail(format!("a worker task failed: {join}"))),
        }
    }
    Ok(results)
}

/// Many workers claiming one session concurrently: every head is handed to
/// exactly one worker (attempt 1, no clock movement), every completion
/// applies, and each lane's heads complete in log order.
pub(crate) async fn concurrent_claims_never_hand_out_a_head_twice(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let mut batch = Vec::new();
    for n in 0..60 {
        batch.push(match n % 3 {
            0 => to_event(&format!("e{n}"), "notifier"),
            1 => to_lane(&format!("e{n}"), "agent", "L1"),
            _ => to_lane(&format!("e{n}"), "agent", "L2"),
        });
    }
    cx.append(&s, batch).await?;
    let tasks = (0..WORKERS)
        .map(|w| tokio::spawn(worker(cx.store.clone(), s.clone(), format!("w{w}"))))
        .collect();
    let seen: Vec<_> = join_all(tasks).await?.into_iter().flatten().collect();
    ensure_eq!(seen.len(), 60, "heads handed out");
    let distinct: BTreeSet<_> = seen
        .iter()
        .map(|(index, consumer, lane, _, _)| (*index, consumer.clone(), lane.clone()))
        .collect();
    ensure_eq!(distinct.len(), 60, "distinct heads among {seen:?}");
    ensure!(
        seen.iter().all(|(_, _, _, attempt, _)| *attempt == 1),
        "a head was handed out twice: {seen:?}"
    );
    ensure!(
        seen.iter().all(|(_, _, _, _, applied)| *applied),
        "a completion of a held claim was superseded: {seen:?}"
    );
    settled(cx.claim(&s, "w0").await?)?;
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=59 head=-", "agent/L2 lane pos=60 head=-"])
    );
    Ok(())
}

/// Concurrent appends get contiguous indexes; each batch's rows stay adjacent
/// and in batch order.
pub(crate) async fn concurrent_appends_keep_indexes_contiguous(cx: Cx) -> CaseResult {
    const BATCHES: usize = 20;
    const SIZE: usize = 3;
    let s = cx.session_id("s");
    let tasks = (0..WORKERS)
        .map(|w| {
            let (store, s) = (cx.store.clone(), s.clone());
            tokio::spawn(async move {
                for b in 0..BATCHES {
                    let batch = (0..SIZE).map(|k| msg(&format!("t{w}-b{b}-{k}"))).collect();
                    store.append(&s, batch, AppendOptions::default()).await?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    join_all(tasks).await?;
    let rows = cx.read_all(&s).await?;
    let total = (WORKERS * BATCHES * SIZE) as u64;
    ensure_eq!(idx(&rows), (1..=total).collect::<Vec<_>>());
    let mut batches: BTreeMap<String, Vec<(usize, u64)>> = BTreeMap::new();
    for row in &rows {
        let (batch, k) = row.id.rsplit_once('-').unwrap_or((&row.id, "?"));
        batches
            .entry(batch.to_owned())
            .or_default()
            .push((k.parse().unwrap_or(usize::MAX), row.index));
    }
    ensure_eq!(batches.len(), WORKERS * BATCHES);
    for (batch, members) in &batches {
        let first = members[0].1;
        let expected: Vec<_> = (0..SIZE).map(|k| (k, first + k as u64)).collect();
        ensure_eq!(members, &expected, "batch {batch} is not contiguous");
    }
    Ok(())
}

/// Racing completions of one attempt apply once: every caller gets the same
/// rows, the returned events are stored once and the lane advances once.
pub(crate) async fn concurrent_completions_apply_once(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(
        &s,
        vec![
            to_lane("a", "agent", "L1"),
            to_lane("b", "agent", "L1"),
            to_lane("c", "agent", "L1"),
        ],
    )
    .await?;
    let head = nth(&cx.claim_heads(&s, "w1").await?, 0)?;
    let tasks = (0..WORKERS)
        .map(|_| {
            let (store, s) = (cx.store.clone(), s.clone());
            let attempt = head.dispatch.attempt_count;
            tokio::spawn(async move {
                store
                    .complete_attempt(CompleteRequest {
                        incarnation: None,
                        session_id: s,
                        consumer: "agent".into(),
                        lane: Some("L1".into()),
                        index: 1,
                        attempt,
                        events: vec![ev("reply", "r1"), ev("reply", "r2")],
                        consumers: None,
                    })
                    .await
            })
        })
        .collect();
    let outcomes = join_all(tasks).await?;
    let mut results: Vec<Vec<StoredEvent>> = Vec::new();
    for outcome in outcomes {
        results.push(completed(outcome)?);
    }
    ensure!(
        results.windows(2).all(|pair| pair[0] == pair[1]),
        "completions returned different rows: {results:?}"
    );
    ensure_eq!(idx(&results[0]), vec![4, 5]);
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![1, 2, 3, 4, 5]);
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=2"])
    );
    Ok(())
}

/// Racing appends of the same batch write it once; every caller gets the stored rows.
pub(crate) async fn concurrent_identical_appends_write_once(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let tasks = (0..WORKERS)
        .map(|_| {
            let (store, s) = (cx.store.clone(), s.clone());
            tokio::spawn(async move {
                store
                    .append(
                        &s,
                        vec![to_event("x", "agent"), msg("y")],
                        AppendOptions::default(),
                    )
                    .await
            })
        })
        .collect();
    let results = join_all(tasks).await?;
    for result in &results {
        ensure_eq!(idx(&result.events), vec![1, 2]);
        ensure_eq!(ids(&result.events), strs(&["x", "y"]));
    }
    ensure_eq!(idx(&cx.read_all(&s).await?), vec![1, 2]);
    ensure_eq!(
        cursor_summaries(&cx.cursors(&s).await?),
        strs(&["agent/- event pos=0 head=1"])
    );
    Ok(())
}

/// Appends and claims racing on different sessions never block or mix each other.
pub(crate) async fn concurrent_sessions_stay_independent(cx: Cx) -> CaseResult {
    let tasks = (0..WORKERS)
        .map(|w| {
            let store = cx.store.clone();
            let s = cx.session_id(&format!("s{w}"));
            tokio::spawn(async move {
                let mut batch = Vec::new();
                for n in 0..=w {
                    batch.push(to_event(&format!("e{n}"), "agent"));
                }
                store.append(&s, batch, AppendOptions::default()).await?;
                worker(store, s, format!("w{w}")).await
            })
        })
        .collect();
    let seen = join_all(tasks).await?;
    for (w, heads) in seen.iter().enumerate() {
        ensure_eq!(heads.len(), w + 1, "heads of session s{w}");
    }
    Ok(())
}
