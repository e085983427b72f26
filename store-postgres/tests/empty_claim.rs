//! Empty claims (see the README, "Round trips"): a claim that finds nothing
//! answers after one round trip when it changes nothing, guided by what the
//! store's last claim of the session found. These check that the shortcuts
//! never change an answer or a work row: work appended through another
//! store is claimed by the next poll, a busy head answers `Busy` until its
//! lease ends, and a poll whose rewrite moves a row still moves it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, ListWork, ManualClock, NewEvent,
    PauseRequest, RandomIds, Store, Target,
};
use a2_store_postgres::PostgresStore;
use serde_json::json;
use support::PgFactory;

const START: i64 = 1_000_000;

fn claim(session: &str) -> ClaimRequest {
    ClaimRequest::new(session, "w", Duration::from_secs(1))
}

fn job() -> NewEvent {
    NewEvent::new("e", json!({})).with_target(Target::event("agent"))
}

/// Two stores (separate pools, as two processes) on one fresh schema.
async fn two_stores(factory: &PgFactory, clock: &ManualClock) -> (PostgresStore, PostgresStore) {
    let schema = factory.schema();
    let open = || async {
        factory
            .store_on(&schema, Arc::new(clock.clone()), Arc::new(RandomIds))
            .await
            .expect("connect")
    };
    (open().await, open().await)
}

async fn complete(store: &PostgresStore, result: ClaimResult) {
    for head in result.into_heads() {
        store
            .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
            .await
            .expect("complete");
    }
}

/// Claims with `request` `times` times in a row, each answering `expected`
/// (the polls after the first take the shortcuts the last claim chose).
async fn polls(store: &PostgresStore, request: &ClaimRequest, times: usize, expected: ClaimResult) {
    for poll in 1..=times {
        assert_eq!(
            store.claim_available(request.clone()).await.expect("claim"),
            expected,
            "poll {poll} of {times}"
        );
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_empty_session_claims_work_appended_through_another_store() {
    let Some(factory) = PgFactory::from_env("empty_claim") else {
        return;
    };
    let clock = ManualClock::new(START);
    let (poller, writer) = two_stores(&factory, &clock).await;
    polls(&poller, &claim("s"), 4, ClaimResult::Settled).await;
    writer
        .append("s", vec![job()], AppendOptions::default())
        .await
        .expect("append");
    let claimed = poller.claim_available(claim("s")).await.expect("claim");
    let indexes: Vec<u64> = claimed.heads().iter().map(|h| h.event.index).collect();
    assert_eq!(indexes, vec![1], "the poll after the append claims it");
    complete(&poller, claimed).await;
    polls(&poller, &claim("s"), 3, ClaimResult::Settled).await;
    // Served consumers named: another key, the same answers.
    let mut named = claim("s");
    named.consumers = Some(vec![a2_store_api::ConsumerDeclaration::targeted("agent")]);
    polls(&poller, &named, 3, ClaimResult::Settled).await;
    writer
        .append("s", vec![job()], AppendOptions::default())
        .await
        .expect("append");
    let claimed = poller.claim_available(named).await.expect("claim");
    assert_eq!(claimed.heads().len(), 1);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_busy_session_answers_busy_until_the_lease_ends() {
    let Some(factory) = PgFactory::from_env("empty_claim") else {
        return;
    };
    let clock = ManualClock::new(START);
    let (poller, writer) = two_stores(&factory, &clock).await;
    writer
        .append("s", vec![job()], AppendOptions::default())
        .await
        .expect("append");
    let first = poller.claim_available(claim("s")).await.expect("claim");
    assert_eq!(first.heads().len(), 1);
    let busy_until_first_lease = ClaimResult::Busy {
        retry_at: START + 1_000,
    };
    polls(&poller, &claim("s"), 4, busy_until_first_lease.clone()).await;
    clock.advance(500);
    writer
        .append("s", vec![job()], AppendOptions::default())
        .await
        .expect("append");
    let second = poller.claim_available(claim("s")).await.expect("claim");
    let indexes: Vec<u64> = second.heads().iter().map(|h| h.event.index).collect();
    assert_eq!(
        indexes,
        vec![2],
        "a poll after an append takes the new head"
    );
    polls(&poller, &claim("s"), 3, busy_until_first_lease).await;
    clock.advance(500);
    let again = poller.claim_available(claim("s")).await.expect("claim");
    let indexes: Vec<u64> = again.heads().iter().map(|h| h.event.index).collect();
    assert_eq!(indexes, vec![1], "the first lease ran out");
    complete(&poller, again).await;
    // Index 2 is leased until then.
    let busy_until_second_lease = ClaimResult::Busy {
        retry_at: START + 1_500,
    };
    polls(&poller, &claim("s"), 3, busy_until_second_lease).await;
}

/// A consumer paused in the session: its head is claimable but held, so a
/// poll takes nothing, and its rewrite moves the pair's row to the poll's
/// time (`served_row`). Every poll must still do so, so `list_work` reports
/// the latest poll as `ready_since`, as the reference store does.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_that_moves_a_work_row_still_moves_it() {
    let Some(factory) = PgFactory::from_env("empty_claim") else {
        return;
    };
    let clock = ManualClock::new(START);
    let (poller, writer) = two_stores(&factory, &clock).await;
    writer
        .append("s", vec![job()], AppendOptions::default())
        .await
        .expect("append");
    writer
        .pause(PauseRequest {
            consumer: "agent".into(),
            session_id: Some("s".into()),
            until_ms: None,
        })
        .await
        .expect("pause");
    let listed = || async {
        let work = writer
            .list_work(ListWork {
                consumers: vec!["agent".into()],
                after: None,
                limit: None,
            })
            .await
            .expect("list work");
        assert_eq!(work.len(), 1, "{work:?}");
        work[0].ready_since
    };
    assert_eq!(listed().await, Some(START));
    for step in 1..=4 {
        clock.advance(10);
        assert_eq!(
            poller.claim_available(claim("s")).await.expect("claim"),
            ClaimResult::Settled,
            "the paused consumer's head is held"
        );
        assert_eq!(listed().await, Some(START + 10 * step), "poll {step}");
    }
}
