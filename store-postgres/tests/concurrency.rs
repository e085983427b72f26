//! Many workers on separate stores (separate pools, so separate connections)
//! sharing one schema: no head is ever held by two workers, every head is
//! completed exactly once, lanes stay FIFO, concurrent appends keep indexes
//! contiguous, and a lock held past the statement timeout is `Busy`.
//! Runs only when `A2_POSTGRES_URL` is set.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, ErrorCode, NewEvent,
    RandomIds, ReadOptions, Store, SystemClock, Target,
};
use a2_store_postgres::PostgresStore;
use serde_json::json;
use support::PgFactory;

const STORES: usize = 4;
const WORKERS_PER_STORE: usize = 2;

async fn stores(factory: &PgFactory, schema: &str) -> Vec<PostgresStore> {
    let mut stores = Vec::new();
    for _ in 0..STORES {
        let store = factory
            .store_on(schema, Arc::new(SystemClock), Arc::new(RandomIds))
            .await
            .expect("connect");
        stores.push(store);
    }
    stores
}

/// One completed head: (consumer, lane, index), and the order it finished in.
type Done = (String, Option<String>, u64);

#[derive(Default)]
struct Ledger {
    /// Heads currently held, by the worker holding them.
    held: HashMap<Done, String>,
    /// Every completion in the order they were acknowledged.
    completed: Vec<Done>,
    /// Heads two workers held at once (must stay empty).
    doubles: Vec<(Done, String, String)>,
    /// Per lane, the indexes in the order they were handed out. A worker
    /// notes a head before completing it, and the next head of a lane can
    /// only be claimed after that completion commits, so this order is exact.
    lane_claims: BTreeMap<String, Vec<u64>>,
}

async fn work(store: PostgresStore, holder: String, session: String, ledger: Arc<Mutex<Ledger>>) {
    let mut idle = 0;
    loop {
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: session.clone(),
                holder: holder.clone(),
                ttl_ms: Some(60_000),
                limit: Some(3),
                ..ClaimRequest::default()
            })
            .await
            .expect("claim");
        let heads = match claimed {
            ClaimResult::Claimed { heads, .. } => heads,
            _ => {
                idle += 1;
                if idle > 20 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        idle = 0;
        for head in heads {
            let key: Done = (head.consumer.clone(), head.lane.clone(), head.event.index);
            {
                let mut ledger = ledger.lock().unwrap();
                if let Some(other) = ledger.held.insert(key.clone(), holder.clone()) {
                    ledger.doubles.push((key.clone(), other, holder.clone()));
                }
                if let Some(lane) = &head.lane {
                    let claims = ledger.lane_claims.entry(lane.clone()).or_default();
                    claims.push(head.event.index);
                }
            }
            let done = store
                .complete_attempt(CompleteRequest {
                    incarnation: None,
                    session_id: session.clone(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    events: Vec::new(),
                    consumers: None,
                })
                .await
                .expect("complete");
            assert!(
                matches!(done, CompleteResult::Completed { .. }),
                "{holder} lost {key:?}: {done:?}"
            );
            let mut ledger = ledger.lock().unwrap();
            ledger.held.remove(&key);
            ledger.completed.push(key);
        }
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_on_separate_connections_never_share_a_head() {
    let Some(factory) = PgFactory::from_env("concurrency") else {
        return;
    };
    let schema = factory.schema();
    let stores = stores(&factory, &schema).await;
    let session = "shared-work".to_owned();
    // 120 events: each for its own event cursor of `fanout`, and queued on
    // one of 4 FIFO lanes of `ordered`.
    let mut expected = BTreeSet::new();
    let producer = {
        let store = stores[0].clone();
        let session = session.clone();
        tokio::spawn(async move {
            let mut appended = Vec::new();
            for batch in 0..30_u64 {
                let events = (0..4_u64)
                    .map(|k| {
                        NewEvent::new("job", json!({"batch": batch, "k": k}))
                            .with_target(Target::event("fanout"))
                            .with_target(Target::lane("ordered", format!("L{k}")))
                    })
                    .collect();
                let result = store
                    .append(&session, events, AppendOptions::default())
                    .await
                    .expect("append");
                appended.extend(result.events.into_iter().map(|e| e.index));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            appended
        })
    };
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut workers = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for w in 0..WORKERS_PER_STORE {
            workers.push(tokio::spawn(work(
                store.clone(),
                format!("store{s}-worker{w}"),
                session.clone(),
                ledger.clone(),
            )));
        }
    }
    let appended = producer.await.expect("producer");
    for worker in workers {
        worker.await.expect("worker");
    }
    for index in &appended {
        expected.insert(("fanout".to_owned(), None, *index));
        let lane = format!("L{}", (index - 1) % 4);
        expected.insert(("ordered".to_owned(), Some(lane), *index));
    }
    let ledger = ledger.lock().unwrap();
    assert!(
        ledger.doubles.is_empty(),
        "held twice: {:?}",
        ledger.doubles
    );
    let completed: BTreeSet<Done> = ledger.completed.iter().cloned().collect();
    assert_eq!(
        ledger.completed.len(),
        completed.len(),
        "a head completed twice"
    );
    assert_eq!(completed, expected);
    // Each FIFO lane handed its heads out once each, in log order.
    assert_eq!(ledger.lane_claims.len(), 4);
    for (lane, order) in &ledger.lane_claims {
        let mut sorted = order.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(order, &sorted, "lane {lane} handed out of order");
    }
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_keep_indexes_contiguous() {
    let Some(factory) = PgFactory::from_env("concurrency") else {
        return;
    };
    let schema = factory.schema();
    let stores = stores(&factory, &schema).await;
    let mut tasks = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for t in 0..3 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut batches = Vec::new();
                for b in 0..15 {
                    let events = (0..3)
                        .map(|k| NewEvent::new("e", json!(k)).with_id(format!("{s}-{t}-{b}-{k}")))
                        .collect();
                    let result = store
                        .append("race", events, AppendOptions::default())
                        .await
                        .expect("append");
                    batches.push(result.events.iter().map(|e| e.index).collect::<Vec<_>>());
                }
                batches
            }));
        }
    }
    let mut total = 0;
    for task in tasks {
        for batch in task.await.expect("task") {
            assert_eq!(batch.len(), 3);
            assert_eq!(batch[1], batch[0] + 1, "a batch is contiguous");
            assert_eq!(batch[2], batch[0] + 2, "a batch is contiguous");
            total += 3;
        }
    }
    let rows = stores[1]
        .read("race", ReadOptions::default())
        .await
        .expect("read");
    let indexes: Vec<u64> = rows.iter().map(|row| row.index).collect();
    assert_eq!(indexes, (1..=total).collect::<Vec<u64>>());
    let ids: BTreeSet<&str> = rows.iter().map(|row| row.id.as_str()).collect();
    assert_eq!(ids.len(), rows.len(), "every id stored once");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_past_the_statement_timeout_is_busy_and_changes_nothing() {
    let Some(factory) = PgFactory::from_env("concurrency") else {
        return;
    };
    let schema = factory.schema();
    let mut options = support::options(&schema, Arc::new(SystemClock), Arc::new(RandomIds));
    options.statement_timeout = Duration::from_millis(200);
    let store = PostgresStore::connect(factory.url(), options)
        .await
        .expect("connect");
    store
        .append(
            "locked",
            vec![NewEvent::new("e", json!(1))],
            AppendOptions::default(),
        )
        .await
        .expect("first append");
    // Another connection holds the session row.
    let mut client = support::raw_client(factory.url()).await;
    let tx = client.transaction().await.expect("begin");
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".sessions WHERE session_id = 'locked' FOR UPDATE"),
        &[],
    )
    .await
    .expect("lock the session row");
    let error = store
        .append(
            "locked",
            vec![NewEvent::new("e", json!(2))],
            AppendOptions::default(),
        )
        .await
        .expect_err("the append waits past the timeout");
    assert_eq!(error.code(), ErrorCode::Busy, "{error}");
    tx.rollback().await.expect("release");
    let rows = store
        .read("locked", ReadOptions::default())
        .await
        .expect("read");
    assert_eq!(rows.len(), 1, "the timed-out append wrote nothing");
}

/// Workers that complete, fail with a retry delay, or vanish without an
/// outcome (their lease expires and the head is claimed again as a new
/// attempt): every head still completes exactly once.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expiring_leases_and_failures_still_complete_each_head_once() {
    let Some(factory) = PgFactory::from_env("concurrency") else {
        return;
    };
    let schema = factory.schema();
    let stores = stores(&factory, &schema).await;
    let session = "chaos";
    let mut expected = BTreeSet::new();
    for batch in 0..20_u64 {
        let events = (0..3_u64)
            .map(|k| {
                NewEvent::new("job", json!(batch * 3 + k))
                    .with_target(Target::event("fanout"))
                    .with_target(Target::lane("ordered", format!("L{k}")))
            })
            .collect();
        let appended = stores[0]
            .append(session, events, AppendOptions::default())
            .await
            .expect("append");
        for event in appended.events {
            expected.insert(("fanout".to_owned(), None, event.index));
            let lane = format!("L{}", (event.index - 1) % 3);
            expected.insert(("ordered".to_owned(), Some(lane), event.index));
        }
    }
    let total = expected.len();
    let completed: Arc<Mutex<Vec<Done>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..6_u64 {
        let store = stores[usize::try_from(w).unwrap() % STORES].clone();
        let completed = completed.clone();
        workers.push(tokio::spawn(async move {
            let holder = format!("chaos-{w}");
            let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (w + 1);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
            while completed.lock().unwrap().len() < total {
                assert!(tokio::time::Instant::now() < deadline, "workers stalled");
                let claimed = store
                    .claim_available(ClaimRequest {
                        session_id: session.to_owned(),
                        holder: holder.clone(),
                        ttl_ms: Some(150),
                        limit: Some(2),
                        ..ClaimRequest::default()
                    })
                    .await
                    .expect("claim");
                let ClaimResult::Claimed { heads, .. } = claimed else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                for head in heads {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    match seed % 100 {
                        0..=14 => continue, // vanish: the lease runs out
                        15..=29 => {
                            store
                                .fail_attempt(a2_store_api::FailRequest {
                                    incarnation: None,
                                    session_id: session.to_owned(),
                                    consumer: head.consumer.clone(),
                                    lane: head.lane.clone(),
                                    index: head.event.index,
                                    attempt: head.dispatch.attempt_count,
                                    error: "flaky".to_owned(),
                                    max_failures: None,
                                    retry_after_ms: Some(20),
                                })
                                .await
                                .expect("fail");
                        }
                        _ => {
                            let result = store
                                .complete_attempt(CompleteRequest {
                                    incarnation: None,
                                    session_id: session.to_owned(),
                                    consumer: head.consumer.clone(),
                                    lane: head.lane.clone(),
                                    index: head.event.index,
                                    attempt: head.dispatch.attempt_count,
                                    events: Vec::new(),
                                    consumers: None,
                                })
                                .await
                                .expect("complete");
                            if matches!(result, CompleteResult::Completed { .. }) {
                                completed.lock().unwrap().push((
                                    head.consumer.clone(),
                                    head.lane.clone(),
                                    head.event.index,
                                ));
                            }
                        }
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let completed = completed.lock().unwrap();
    let unique: BTreeSet<Done> = completed.iter().cloned().collect();
    assert_eq!(unique.len(), completed.len(), "a head completed twice");
    assert_eq!(unique, expected);
}

/// A deadlock the store's transaction loses is retried, not reported: the
/// renewal locks cursor 1 then waits for cursor 2, held by another
/// connection that then waits for cursor 1. PostgreSQL aborts the store's
/// transaction (its deadlock check runs first), the store runs it again
/// once the other side committed, and the renewal succeeds.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_is_retried_and_the_call_succeeds() {
    let Some(factory) = PgFactory::from_env("concurrency") else {
        return;
    };
    let schema = factory.schema();
    let store = factory
        .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("connect");
    let events = (0..2)
        .map(|n| NewEvent::new("e", json!(n)).with_target(Target::event("a")))
        .collect();
    store
        .append("dl", events, AppendOptions::default())
        .await
        .expect("append");
    let claimed = store
        .claim_available(ClaimRequest {
            session_id: "dl".to_owned(),
            holder: "w".to_owned(),
            ttl_ms: Some(60_000),
            ..ClaimRequest::default()
        })
        .await
        .expect("claim");
    let ClaimResult::Claimed { heads, .. } = claimed else {
        panic!("claimed both heads: {claimed:?}");
    };
    assert_eq!(heads.len(), 2);
    let mut client = support::raw_client(factory.url()).await;
    let other = client.transaction().await.expect("begin");
    // This side must not be the one PostgreSQL picks as the victim.
    other
        .batch_execute("SET LOCAL deadlock_timeout = '20s'")
        .await
        .expect("deadlock timeout");
    let lock = |slot: i64| {
        format!("SELECT 1 FROM \"{schema}\".cursors WHERE session_id = 'dl' AND slot = {slot} FOR UPDATE")
    };
    other.batch_execute(&lock(2)).await.expect("lock cursor 2");
    let renewal = {
        let store = store.clone();
        let claims = heads
            .iter()
            .map(|head| a2_store_api::HeldClaim {
                cursor: head.cursor_ref(),
                attempt: head.dispatch.attempt_count,
            })
            .collect();
        tokio::spawn(async move {
            store
                .renew_claims(a2_store_api::RenewRequest {
                    incarnation: None,
                    session_id: "dl".to_owned(),
                    holder: "w".to_owned(),
                    claims,
                    ttl_ms: Some(90_000),
                    expires_at_ms: None,
                })
                .await
        })
    };
    // Let the renewal lock cursor 1 and wait for cursor 2, then close the cycle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    other
        .batch_execute(&lock(1))
        .await
        .expect("lock cursor 1 once the store gave up");
    other.commit().await.expect("commit");
    let renewed = tokio::time::timeout(Duration::from_secs(30), renewal)
        .await
        .expect("the renewal finishes")
        .expect("task")
        .expect("the deadlock was retried, not reported");
    assert_eq!(renewed.renewed.len(), 2, "{renewed:?}");
}

/// With every pooled connection busy past the statement timeout, a call
/// waiting for a connection fails with `Busy` instead of hanging.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_an_exhausted_pool_is_busy() {
    let Some(factory) = PgFactory::from_env("concurrency") else {
        return;
    };
    let schema = factory.schema();
    let mut options = support::options(&schema, Arc::new(SystemClock), Arc::new(RandomIds));
    options.pool_size = 1;
    options.statement_timeout = Duration::from_millis(300);
    let store = PostgresStore::connect(factory.url(), options)
        .await
        .expect("connect");
    store
        .append(
            "s",
            vec![NewEvent::new("e", json!(0))],
            AppendOptions::default(),
        )
        .await
        .expect("first append");
    let mut client = support::raw_client(factory.url()).await;
    let tx = client.transaction().await.expect("begin");
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".sessions WHERE session_id = 's' FOR UPDATE"),
        &[],
    )
    .await
    .expect("hold the session row");
    // The first call takes the only connection and waits for the row lock;
    // the second waits for the connection. Both give up as Busy.
    let calls = (0..2).map(|n| {
        let store = store.clone();
        async move {
            store
                .append(
                    "s",
                    vec![NewEvent::new("e", json!(n))],
                    AppendOptions::default(),
                )
                .await
        }
    });
    for result in futures::future::join_all(calls).await {
        let error = result.expect_err("busy");
        assert_eq!(error.code(), ErrorCode::Busy, "{error}");
    }
    tx.rollback().await.expect("release");
    let rows = store.read("s", ReadOptions::default()).await.expect("read");
    assert_eq!(rows.len(), 1, "the refused appends wrote nothing");
}
