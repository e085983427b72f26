//! Expired claims go back to the claimable heads once, in claim order, and
//! a head whose expiry is in the future again (the clock moved back) is busy.

use std::sync::Arc;

use a2_store_api::{ClaimRequest, ClaimResult, CounterIds, ManualClock, NewEvent, Store, Target};
use a2_store_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

const T: i64 = 1_000_000;

fn store(clock: &ManualClock) -> SqliteStore {
    SqliteStore::open_in_memory(SqliteOptions {
        clock: Arc::new(clock.clone()),
        ids: Arc::new(CounterIds::new("e")),
        ..SqliteOptions::default()
    })
    .unwrap()
}

fn claim(holder: &str, limit: Option<usize>, through: Option<u64>) -> ClaimRequest {
    ClaimRequest {
        session_id: "s".into(),
        holder: holder.into(),
        ttl_ms: Some(100),
        limit,
        through,
        ..ClaimRequest::default()
    }
}

#[tokio::test]
async fn expired_claims_are_handed_out_again_in_claim_order() {
    let clock = ManualClock::new(T);
    let store = store(&clock);
    let events = (0..50)
        .map(|n| NewEvent::new("msg", json!(n)).with_target(Target::event("worker")))
        .collect();
    store.append("s", events, Default::default()).await.unwrap();
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(claim("w1", None, None))
        .await
        .unwrap()
    else {
        panic!("50 heads to claim");
    };
    assert_eq!(heads.len(), 50);
    clock.set(T + 200);
    for expected in 1..=50u64 {
        let ClaimResult::Claimed { heads, .. } = store
            .claim_available(claim("w2", Some(1), None))
            .await
            .unwrap()
        else {
            panic!("head {expected} is claimable again");
        };
        assert_eq!(heads.len(), 1);
        assert_eq!(heads[0].event.index, expected);
        assert_eq!(heads[0].dispatch.attempt_count, 2);
        assert_eq!(
            heads[0].dispatch.failure_count, 1,
            "the expired claim counted"
        );
        assert_eq!(heads[0].dispatch.claim_holder.as_deref(), Some("w2"));
    }
    assert_eq!(
        store
            .claim_available(claim("w3", None, None))
            .await
            .unwrap(),
        ClaimResult::Busy { retry_at: T + 300 }
    );
}

#[tokio::test]
async fn an_expired_claim_is_busy_again_when_the_clock_moves_back() {
    let clock = ManualClock::new(T);
    let store = store(&clock);
    store
        .append(
            "s",
            vec![NewEvent::new("msg", json!(1)).with_target(Target::event("worker"))],
            Default::default(),
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .claim_available(claim("w1", None, None))
            .await
            .unwrap(),
        ClaimResult::Claimed { .. }
    ));
    // Expired at T + 150: this claim looks (promoting the head) but serves
    // nothing at or below index 0.
    clock.set(T + 150);
    assert_eq!(
        store
            .claim_available(claim("w2", None, Some(0)))
            .await
            .unwrap(),
        ClaimResult::Settled
    );
    clock.set(T + 50);
    assert_eq!(
        store
            .claim_available(claim("w2", None, None))
            .await
            .unwrap(),
        ClaimResult::Busy { retry_at: T + 100 }
    );
    clock.set(T + 100);
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(claim("w2", None, None))
        .await
        .unwrap()
    else {
        panic!("claimable at its expiry");
    };
    assert_eq!(heads[0].dispatch.attempt_count, 2);
}
