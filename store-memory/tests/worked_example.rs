//! The guide's worked example (`a2_store_api::guide`), step by step,
//! against the memory store.

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, Cause, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, CounterIds,
    ErrorCode, Head, ManualClock, NewEvent, Store, Target,
};
use a2_store_memory::{MemoryOptions, MemoryStore};
use serde_json::json;

const T: i64 = 1_000_000;

fn store() -> (MemoryStore, ManualClock) {
    let clock = ManualClock::new(T);
    let store = MemoryStore::with_options(MemoryOptions {
        clock: Arc::new(clock.clone()),
        ids: Arc::new(CounterIds::new("gen-")),
    });
    (store, clock)
}

fn claim(holder: &str) -> ClaimRequest {
    ClaimRequest {
        session_id: "s".into(),
        holder: holder.into(),
        ttl_ms: Some(1000),
        ..ClaimRequest::default()
    }
}

fn claimed(result: ClaimResult) -> (Vec<Head>, Vec<Head>, u64) {
    match result {
        ClaimResult::Claimed {
            heads,
            dead_lettered,
            head,
        } => (heads, dead_lettered, head),
        other => panic!("expected Claimed, got {other:?}"),
    }
}

fn complete(head: &Head, events: Vec<NewEvent>) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: "s".into(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events,
        consumers: None,
    }
}

fn reply() -> NewEvent {
    NewEvent::new("reply", json!("hello"))
        .with_id("reply-1")
        .with_target(Target::event("notifier"))
}

async fn append_three(store: &MemoryStore) {
    let events = (1..=3)
        .map(|n| NewEvent::new("msg", json!(n)).with_target(Target::lane("agent", "L1")))
        .collect();
    let appended = store
        .append("s", events, AppendOptions::default())
        .await
        .unwrap();
    let indexes: Vec<u64> = appended.events.iter().map(|e| e.index).collect();
    assert_eq!(indexes, [1, 2, 3]);
    assert!(appended.has_pending);
}

#[tokio::test]
async fn the_worked_example() {
    let (store, _clock) = store();
    // 1.
    append_three(&store).await;

    // 2. The lane hands out only its first head.
    let (heads, dead, log_head) = claimed(store.claim_available(claim("w1")).await.unwrap());
    assert!(dead.is_empty());
    assert_eq!(log_head, 3);
    assert_eq!(heads.len(), 1);
    let first = &heads[0];
    assert_eq!(first.event.index, 1);
    assert_eq!(
        (first.consumer.as_str(), first.lane.as_deref()),
        ("agent", Some("L1"))
    );
    assert_eq!(first.dispatch.attempt_count, 1);
    assert_eq!(first.dispatch.claim_holder.as_deref(), Some("w1"));
    assert_eq!(first.dispatch.claim_expires_at, Some(T + 1000));

    // 3.
    assert_eq!(
        store.claim_available(claim("w2")).await.unwrap(),
        ClaimResult::Busy { retry_at: T + 1000 }
    );

    // 4.
    let done = store
        .complete_attempt(complete(first, vec![reply()]))
        .await
        .unwrap();
    let CompleteResult::Completed { events } = done else {
        panic!("expected Completed, got {done:?}");
    };
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].index, 4);
    assert_eq!(events[0].id, "reply-1");
    assert_eq!(
        events[0].cause,
        Some(Cause {
            consumer: "agent".into(),
            lane: Some("L1".into()),
            index: 1,
            attempt: 1
        })
    );

    // 5.
    let (heads, _, _) = claimed(store.claim_available(claim("w1")).await.unwrap());
    let got: Vec<(u64, &str, Option<&str>)> = heads
        .iter()
        .map(|h| (h.event.index, h.consumer.as_str(), h.lane.as_deref()))
        .collect();
    assert_eq!(got, [(2, "agent", Some("L1")), (4, "notifier", None)]);
    for head in &heads {
        let result = store
            .complete_attempt(complete(head, vec![]))
            .await
            .unwrap();
        assert_eq!(result, CompleteResult::Completed { events: vec![] });
    }
    let (heads, _, _) = claimed(store.claim_available(claim("w1")).await.unwrap());
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].event.index, 3);
    store
        .complete_attempt(complete(&heads[0], vec![]))
        .await
        .unwrap();
    assert_eq!(
        store.claim_available(claim("w1")).await.unwrap(),
        ClaimResult::Settled
    );

    // 6. Replays.
    let again = store
        .complete_attempt(complete(first, vec![reply()]))
        .await
        .unwrap();
    let CompleteResult::Completed { events: replayed } = again else {
        panic!("expected a replay, got {again:?}");
    };
    assert_eq!(replayed, events);
    assert_eq!(
        store.read("s", Default::default()).await.unwrap().len(),
        4,
        "a replay writes nothing"
    );
    let mut newer = complete(first, vec![reply()]);
    newer.attempt = 2;
    assert_eq!(
        store.complete_attempt(newer).await.unwrap(),
        CompleteResult::Superseded
    );
    let other = complete(
        first,
        vec![NewEvent::new("reply", json!("hello")).with_id("reply-2")],
    );
    assert_eq!(
        store.complete_attempt(other).await.unwrap_err().code(),
        ErrorCode::PartialDuplicateBatch
    );
}

#[tokio::test]
async fn step_seven_an_expired_claim_counts_as_a_failure() {
    let (store, clock) = store();
    append_three(&store).await;
    let (heads, _, _) = claimed(store.claim_available(claim("w1")).await.unwrap());
    assert_eq!(heads[0].dispatch.attempt_count, 1);
    clock.advance(1001);
    let (heads, dead, _) = claimed(store.claim_available(claim("w2")).await.unwrap());
    assert!(dead.is_empty());
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].event.index, 1);
    assert_eq!(heads[0].dispatch.attempt_count, 2);
    assert_eq!(heads[0].dispatch.failure_count, 1);
    assert_eq!(heads[0].dispatch.first_claimed_at, Some(T));
    assert_eq!(heads[0].dispatch.last_claimed_at, Some(T + 1001));
    assert_eq!(heads[0].dispatch.claim_holder.as_deref(), Some("w2"));
}
