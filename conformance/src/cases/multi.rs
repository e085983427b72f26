//! Multi-instance cases: two stores over one database (needs
//! `shared_database`; subscriptions across instances need
//! `cross_instance_subscribe`). Skipped when the backend lacks them.

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, ClaimResult, ClearRequest, CompleteRequest, CompleteResult, ErrorCode,
    FailOutcome, FailRequest, Head, HeldClaim, ReadOptions, RenewRequest, Store, StoreError,
};

use super::subscribe::take;
use crate::support::*;

async fn claim(
    store: &Arc<dyn Store>,
    cx: &Cx,
    s: &str,
    holder: &str,
) -> a2_store_api::Result<ClaimResult> {
    store.claim_available(cx.req(s, holder)).await
}

/// `holder`'s renewal of its claim of `head` in session `s` for [`TTL`].
fn renewal(s: &str, holder: &str, head: &Head) -> RenewRequest {
    RenewRequest {
        incarnation: None,
        session_id: s.to_owned(),
        holder: holder.to_owned(),
        claims: vec![HeldClaim {
            cursor: head.cursor_ref(),
            attempt: head.dispatch.attempt_count,
        }],
        ttl_ms: Some(TTL),
        expires_at_ms: None,
    }
}

/// The second instance reads the first one's appends and cursors.
pub(crate) async fn second_instance_sees_first_instance_appends(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    let written = a
        .append(
            &s,
            vec![to_lane("x", "agent", "L1"), msg("y")],
            AppendOptions::default(),
        )
        .await?;
    ensure_eq!(b.read(&s, ReadOptions::default()).await?, written.events);
    ensure_eq!(b.cursors(&s).await?, a.cursors(&s).await?);
    let more = b
        .append(&s, vec![msg("z")], AppendOptions::default())
        .await?;
    ensure_eq!(idx(&more.events), vec![3]);
    let replay = b
        .append(&s, vec![msg("y")], AppendOptions::default())
        .await?;
    ensure_eq!(idx(&replay.events), vec![2]);
    Ok(())
}

/// A head claimed through one instance is busy through the other.
pub(crate) async fn claims_are_exclusive_across_instances(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    a.append(
        &s,
        vec![to_lane("x", "agent", "L1"), to_event("y", "agent")],
        AppendOptions::default(),
    )
    .await?;
    let (heads, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["1 agent/L1 #1", "2 agent/- #1"])
    );
    ensure_eq!(busy(claim(&b, &cx, &s, "w2").await?)?, T0 + TTL);
    cx.advance(TTL);
    let (heads, _, _) = claimed(claim(&b, &cx, &s, "w2").await?)?;
    ensure_eq!(
        head_summaries(&heads),
        strs(&["1 agent/L1 #2", "2 agent/- #2"])
    );
    Ok(())
}

/// Workers racing through both instances never share a head.
pub(crate) async fn concurrent_claims_across_instances_never_share_a_head(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    let batch = (0..40)
        .map(|n| to_event(&format!("e{n}"), "agent"))
        .collect();
    a.append(&s, batch, AppendOptions::default()).await?;
    let mut tasks = Vec::new();
    for w in 0..6 {
        let store = if w % 2 == 0 { a.clone() } else { b.clone() };
        let request = cx.req(&s, &format!("w{w}"));
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                match store.claim_available(request.clone()).await? {
                    ClaimResult::Claimed { heads, .. } => {
                        got.extend(heads.iter().map(|head| head.event.index))
                    }
                    _ => return Ok::<_, StoreError>(got),
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(got)) => all.extend(got),
            Ok(Err(error)) => return Err(error.into()),
            Err(join) => return Err(Failure::Fail(format!("a worker failed: {join}"))),
        }
    }
    all.sort_unstable();
    ensure_eq!(all, (1..=40).collect::<Vec<u64>>());
    Ok(())
}

/// A completion sent through both instances applies once; the second is a replay.
pub(crate) async fn completion_applies_once_across_instances(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    a.append(
        &s,
        vec![to_lane("x", "agent", "L1"), to_lane("y", "agent", "L1")],
        AppendOptions::default(),
    )
    .await?;
    let (heads, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    let head = nth(&heads, 0)?;
    let request = CompleteRequest {
        incarnation: None,
        session_id: s.clone(),
        consumer: "agent".into(),
        lane: Some("L1".into()),
        index: 1,
        attempt: head.dispatch.attempt_count,
        events: vec![ev("reply", "r")],
        consumers: None,
    };
    let (first, second) = tokio::join!(
        a.complete_attempt(request.clone()),
        b.complete_attempt(request)
    );
    let (first, second) = (completed(first?)?, completed(second?)?);
    ensure_eq!(first, second);
    ensure_eq!(idx(&first), vec![3]);
    ensure_eq!(
        idx(&b.read(&s, ReadOptions::default()).await?),
        vec![1, 2, 3]
    );
    ensure_eq!(
        cursor_summaries(&b.cursors(&s).await?),
        strs(&["agent/L1 lane pos=1 head=2"])
    );
    Ok(())
}

/// A completion through the instance that claimed a head, after the other
/// instance renewed the claim, completes it once: the renewal is no reason
/// to refuse it (an instance deciding on the row it wrote at the claim must
/// find the renewed one).
pub(crate) async fn completion_after_renewal_on_other_instance_applies(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    a.append(&s, vec![to_event("x", "agent")], AppendOptions::default())
        .await?;
    let (heads, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    let head = nth(&heads, 0)?;
    cx.advance(TTL / 2);
    let renewed = b.renew_claims(renewal(&s, "w1", &head)).await?;
    ensure_eq!(ref_summaries(&renewed.renewed), strs(&["1 agent/-"]));
    let reply = a
        .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
        .await?;
    ensure_eq!(completed(reply)?, vec![]);
    ensure_eq!(b.cursors(&s).await?, vec![]);
    settled(claim(&b, &cx, &s, "w2").await?)?;
    settled(claim(&a, &cx, &s, "w2").await?)?;
    Ok(())
}

/// A failure through the instance that claimed a head, after the other
/// instance renewed the claim, is counted once, and after a late reclaim
/// through the other instance it is superseded and changes nothing.
pub(crate) async fn failure_after_renewal_or_reclaim_on_other_instance(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    a.append(&s, vec![to_event("x", "agent")], AppendOptions::default())
        .await?;
    let (heads, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    let head = nth(&heads, 0)?;
    cx.advance(TTL / 2);
    b.renew_claims(renewal(&s, "w1", &head)).await?;
    let failed = a
        .fail_attempt(FailRequest::for_head(&head, "down", None))
        .await?;
    ensure_eq!(failed.outcome, FailOutcome::Failed);
    ensure_eq!(failed.failure_count, 1);
    let (again, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    let again = nth(&again, 0)?;
    ensure_eq!(again.dispatch.attempt_count, 2);
    cx.advance(TTL);
    let (third, _, _) = claimed(claim(&b, &cx, &s, "w2").await?)?;
    ensure_eq!(nth(&third, 0)?.dispatch.attempt_count, 3);
    let before = b.cursors(&s).await?;
    let late = a
        .fail_attempt(FailRequest::for_head(&again, "late", None))
        .await?;
    ensure_eq!(late.outcome, FailOutcome::Superseded);
    ensure_eq!(a.cursors(&s).await?, before);
    Ok(())
}

/// A late completion through the instance that claimed first, after the
/// lease ran out and the other instance claimed the head again, is
/// superseded and changes nothing; the new attempt completes, and the old
/// instance then replays it.
pub(crate) async fn late_completion_after_reclaim_on_other_instance_is_superseded(
    cx: Cx,
) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    a.append(&s, vec![to_event("x", "agent")], AppendOptions::default())
        .await?;
    let (first, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    let first = nth(&first, 0)?;
    cx.advance(TTL);
    let (second, _, _) = claimed(claim(&b, &cx, &s, "w2").await?)?;
    let second = nth(&second, 0)?;
    ensure_eq!(second.dispatch.attempt_count, 2);
    let before = b.cursors(&s).await?;
    ensure_eq!(
        a.complete_attempt(CompleteRequest::for_head(&first, Vec::new()))
            .await?,
        CompleteResult::Superseded
    );
    ensure_eq!(a.cursors(&s).await?, before);
    let done = b
        .complete_attempt(CompleteRequest::for_head(&second, Vec::new()))
        .await?;
    ensure_eq!(completed(done)?, vec![]);
    let again = a
        .complete_attempt(CompleteRequest::for_head(&second, Vec::new()))
        .await?;
    ensure_eq!(completed(again)?, vec![]);
    ensure_eq!(a.cursors(&s).await?, vec![]);
    Ok(())
}

/// A completion through the instance that claimed a head, after the other
/// instance failed that attempt, is superseded: the failure stands (the
/// head waits for its retry) and nothing is completed.
pub(crate) async fn completion_after_failure_on_other_instance_is_superseded(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    a.append(&s, vec![to_event("x", "agent")], AppendOptions::default())
        .await?;
    let (heads, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    let head = nth(&heads, 0)?;
    b.fail_attempt(FailRequest::for_head(&head, "down", None))
        .await?;
    let before = b.cursors(&s).await?;
    ensure_eq!(
        a.complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
            .await?,
        CompleteResult::Superseded
    );
    ensure_eq!(a.cursors(&s).await?, before);
    let (again, _, _) = claimed(claim(&a, &cx, &s, "w1").await?)?;
    ensure_eq!(nth(&again, 0)?.dispatch.attempt_count, 2);
    Ok(())
}

/// A clear through one instance fences work scheduled through the other.
pub(crate) async fn clear_on_one_instance_fences_the_other(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    a.append(&s, vec![to_event("x", "agent")], AppendOptions::default())
        .await?;
    let (heads, _, _) = claimed(claim(&b, &cx, &s, "w1").await?)?;
    a.clear(ClearRequest {
        session_id: s.clone(),
        ..ClearRequest::default()
    })
    .await?;
    let options = AppendOptions {
        origin_index: Some(1),
        ..AppendOptions::default()
    };
    ensure_code!(
        b.append(&s, vec![msg("late")], options).await,
        ErrorCode::SessionCleared
    );
    ensure_code!(
        b.append(
            &s,
            vec![msg("late").with_cause(nth(&heads, 0)?.cause())],
            AppendOptions::default()
        )
        .await,
        ErrorCode::SupersededAttempt
    );
    ensure_eq!(b.cursors(&s).await?, vec![]);
    Ok(())
}

/// A subscription on one instance receives appends made through the other.
pub(crate) async fn subscribe_sees_appends_from_other_instance(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    if !cx.caps.cross_instance_subscribe {
        return Err(Failure::Skip(
            "the backend does not declare `cross_instance_subscribe`".to_owned(),
        ));
    }
    let s = cx.session_id("s");
    a.append(&s, vec![msg("x")], AppendOptions::default())
        .await?;
    let mut stream = b.subscribe(&s, 0).await?;
    a.append(&s, vec![msg("y"), msg("z")], AppendOptions::default())
        .await?;
    let got = take(&mut stream, 3).await?;
    ensure_eq!(ids(&got), strs(&["x", "y", "z"]));
    ensure_eq!(idx(&got), vec![1, 2, 3]);
    Ok(())
}

/// A claim waiting on one instance wakes when the other instance appends
/// work (another process's change, seen through the database).
pub(crate) async fn work_wait_wakes_on_append_from_other_instance(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let agent = cx.consumer("agent");
    let waiter = super::work::spawn_wait(&b, cx.work("w", &["agent"], 1).with_wait_ms(20_000));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    a.append(
        &cx.session_id("s"),
        vec![to_event("x", &agent)],
        AppendOptions::default(),
    )
    .await?;
    let result = super::work::woken(waiter).await?;
    let heads: Vec<String> = result
        .heads()
        .map(|(session, head)| format!("{session} {}", head.event.index))
        .collect();
    ensure_eq!(heads, vec![format!("{} 1", cx.session_id("s"))]);
    Ok(())
}

/// Claimers on both instances racing across sessions never share a head.
pub(crate) async fn work_claims_across_instances_never_share_a_head(cx: Cx) -> CaseResult {
    let [a, b] = cx.pair()?;
    let agent = cx.consumer("agent");
    for n in 0..8 {
        let batch = (0..4).map(|k| to_event(&format!("e{k}"), &agent)).collect();
        a.append(
            &cx.session_id(&format!("s{n}")),
            batch,
            AppendOptions::default(),
        )
        .await?;
    }
    let claimers: Vec<_> = (0..4)
        .map(|worker| {
            let store = Arc::clone(if worker % 2 == 0 { &a } else { &b });
            let request = cx.work(&format!("w{worker}"), &["agent"], 3);
            tokio::spawn(super::work::claim_until_busy(store, request))
        })
        .collect();
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(
            claimer
                .await
                .map_err(|error| Failure::Fail(format!("a claimer panicked: {error}")))??,
        );
    }
    all.sort();
    let total = all.len();
    all.dedup();
    ensure_eq!(all.len(), total, "a head was handed out twice");
    ensure_eq!(total, 32);
    Ok(())
}

/// Two stores on one database: a session deleted and created again
/// through one, the other's attempts from before are superseded.
pub(crate) async fn attempts_from_before_a_delete_on_another_instance_are_superseded(
    cx: Cx,
) -> CaseResult {
    let [a, b] = cx.pair()?;
    let s = cx.session_id("s");
    let (old, _) = super::retention::replaced(a.as_ref(), b.as_ref(), &cx, &s).await?;
    super::retention::stale_attempts_are_superseded(b.as_ref(), &cx, &s, &old).await?;
    super::retention::stale_attempts_are_superseded(a.as_ref(), &cx, &s, &old).await
}
