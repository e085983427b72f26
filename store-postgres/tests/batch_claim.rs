//! `claim_work` of several heads on PostgreSQL claims them in one
//! transaction (`ops::claims::batch`): a claim of 16 over 32 ready
//! sessions takes one head from each of the 16 that waited longest, and
//! every row it wrote carries one transaction id; a claim short of
//! sessions returns what it found; a lane gives only its head; claimers of
//! two stores never hand out one head twice; a claim that finds every
//! ready row held answers `Busy` at once; and the batch pick reads only the
//! work rows it locks (`EXPLAIN` of the very statement, generic plan).

mod support;

#[allow(dead_code)]
#[path = "../src/ops/work/sql.rs"]
mod work_sql;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use a2_store_api::{
    ClaimWorkRequest, ClaimWorkResult, Clock, CompleteRequest, ConsumerDeclaration, CounterIds,
    Head, ManualClock, NewEvent, RandomIds, Store, SystemClock, Target,
};
use a2_store_postgres::PostgresStore;
use serde_json::{json, Value};
use support::PgFactory;

const T0: i64 = 1_700_000_000_000;

/// A claim of up to `limit` heads of consumer `agent` by `holder`.
fn work(holder: &str, limit: usize) -> ClaimWorkRequest {
    ClaimWorkRequest::new(holder, vec![ConsumerDeclaration::targeted("agent")], 60_000)
        .with_limit(limit)
}

fn to_event(n: usize) -> NewEvent {
    NewEvent::new("e", json!({ "n": n })).with_target(Target::event("agent"))
}

fn to_lane(n: usize) -> NewEvent {
    NewEvent::new("e", json!({ "n": n })).with_target(Target::lane("agent", "L"))
}

fn complete(session_id: &str, head: &Head) -> CompleteRequest {
    CompleteRequest {
        incarnation: None,
        session_id: session_id.into(),
        consumer: head.consumer.clone(),
        lane: head.lane.clone(),
        index: head.event.index,
        attempt: head.dispatch.attempt_count,
        events: Vec::new(),
        consumers: None,
    }
}

/// The claimed heads as `(session, index)`, in the order served.
fn heads(result: &ClaimWorkResult) -> Vec<(String, u64)> {
    result
        .heads()
        .map(|(session, head)| (session.to_owned(), head.event.index))
        .collect()
}

/// A store on a fresh schema of `factory` with a manual clock at `T0`.
async fn manual_store(factory: &PgFactory, schema: &str, clock: &ManualClock) -> PostgresStore {
    factory
        .store_on(
            schema,
            Arc::new(clock.clone()),
            Arc::new(CounterIds::new("g")),
        )
        .await
        .expect("open store")
}

/// `n` sessions `s00`, `s01`, … each given `events` (one ms apart, so they
/// are ready in that order).
async fn sessions(
    store: &PostgresStore,
    clock: &ManualClock,
    n: usize,
    events: impl Fn() -> Vec<NewEvent>,
) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for k in 0..n {
        let id = format!("s{k:02}");
        store
            .append(&id, events(), Default::default())
            .await
            .expect("append");
        clock.advance(1);
        ids.push(id);
    }
    ids
}

/// The distinct transaction ids that last wrote the held `agent` cursors
/// of `sessions` and their `agent` work rows.
async fn writers(factory: &PgFactory, schema: &str, sessions: &[String]) -> (usize, usize) {
    let client = support::raw_client(factory.url()).await;
    let count = |table: &str, held: &str| {
        format!(
            "SELECT count(DISTINCT xmin::text) FROM \"{schema}\".{table} \
             WHERE session_id = ANY($1) AND consumer = 'agent' {held}"
        )
    };
    let cursors: i64 = client
        .query_one(
            &count("cursors", "AND claim_holder IS NOT NULL"),
            &[&sessions],
        )
        .await
        .expect("cursor writers")
        .get(0);
    let work: i64 = client
        .query_one(&count("work", ""), &[&sessions])
        .await
        .expect("work writers")
        .get(0);
    (
        usize::try_from(cursors).unwrap_or(0),
        usize::try_from(work).unwrap_or(0),
    )
}

/// A claim of 16 over 32 ready sessions takes one head from each of the 16
/// that waited longest, in that order, and every cursor and work row it
/// wrote was written by one transaction (one `xmin`): today's claim of one
/// session a step wrote them in 16. The heads complete (the rows the claim
/// remembered for the completion's fast path are the ones it wrote).
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_sixteen_takes_sixteen_sessions_in_one_transaction() {
    let Some(factory) = PgFactory::from_env("batch_claim") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = manual_store(&factory, &schema, &clock).await;
    let ids = sessions(&store, &clock, 32, || vec![to_event(0), to_event(1)]).await;
    let result = store.claim_work(work("w", 16)).await.expect("claim");
    let claimed = heads(&result);
    let want: Vec<(String, u64)> = ids[..16].iter().map(|id| (id.clone(), 1)).collect();
    assert_eq!(claimed, want, "one head of each of the first 16 sessions");
    let ClaimWorkResult::Claimed { sessions: served } = &result else {
        panic!("claimed: {result:?}");
    };
    assert!(served
        .iter()
        .all(|s| s.head == 2 && s.dead_lettered.is_empty()));
    assert_eq!(
        writers(&factory, &schema, &ids[..16]).await,
        (1, 1),
        "the claim's cursor writes and work rewrites are one transaction's"
    );
    assert_eq!(
        writers(&factory, &schema, &ids[16..]).await,
        (0, 16),
        "the 16 sessions left were written only by their appends"
    );
    for (session, head) in result.heads() {
        store
            .complete_attempt(complete(session, head))
            .await
            .expect("complete");
    }
    // The served sessions went behind the 16 that waited.
    let next = heads(&store.claim_work(work("w", 16)).await.expect("claim"));
    let want: Vec<(String, u64)> = ids[16..].iter().map(|id| (id.clone(), 1)).collect();
    assert_eq!(next, want);
    let last = heads(&store.claim_work(work("w", 32)).await.expect("claim"));
    let want: Vec<(String, u64)> = ids.iter().map(|id| (id.clone(), 2)).collect();
    assert_eq!(last, want, "then every second head, all served at one time");
}

/// A claim of 16 over 3 ready sessions returns the 3 at once, written by
/// one transaction; then, with every head held, it is busy until the
/// first lease ends.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_short_of_sessions_returns_what_it_found() {
    let Some(factory) = PgFactory::from_env("batch_claim") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = manual_store(&factory, &schema, &clock).await;
    let ids = sessions(&store, &clock, 3, || vec![to_event(0)]).await;
    let result = store.claim_work(work("w", 16)).await.expect("claim");
    let want: Vec<(String, u64)> = ids.iter().map(|id| (id.clone(), 1)).collect();
    assert_eq!(heads(&result), want);
    assert_eq!(writers(&factory, &schema, &ids).await, (1, 1));
    let now = clock.now_ms();
    assert_eq!(
        store.claim_work(work("w", 16)).await.expect("claim"),
        ClaimWorkResult::Busy {
            retry_at: now + 60_000
        }
    );
}

/// Sessions with one lane each (a serial queue per session): a claim of
/// eight gives each lane's head, in one transaction; once they complete, a
/// claim of eight with up to three heads per session gives only each
/// lane's next head.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_session_gives_only_its_lane_head() {
    let Some(factory) = PgFactory::from_env("batch_claim") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = manual_store(&factory, &schema, &clock).await;
    let ids = sessions(&store, &clock, 8, || (0..3).map(to_lane).collect()).await;
    let result = store.claim_work(work("w", 8)).await.expect("claim");
    let want: Vec<(String, u64)> = ids.iter().map(|id| (id.clone(), 1)).collect();
    assert_eq!(heads(&result), want, "each lane's head only");
    assert!(result.heads().all(|(_, h)| h.lane.as_deref() == Some("L")));
    assert_eq!(writers(&factory, &schema, &ids).await, (1, 1));
    let request = ClaimWorkRequest {
        per_session_limit: Some(3),
        ..work("w", 8)
    };
    assert!(matches!(
        store.claim_work(request.clone()).await.expect("claim"),
        ClaimWorkResult::Busy { .. }
    ));
    for (session, head) in result.heads() {
        store
            .complete_attempt(complete(session, head))
            .await
            .expect("complete");
    }
    let next = store.claim_work(request).await.expect("claim");
    let want: Vec<(String, u64)> = ids.iter().map(|id| (id.clone(), 2)).collect();
    assert_eq!(heads(&next), want, "each lane's next head");
}

/// Batch claimers on two stores over one schema (two tasks each) claim
/// and complete until nothing is left: every head is handed out exactly
/// once.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_claimers_of_two_stores_never_share_a_head() {
    let Some(factory) = PgFactory::from_env("batch_claim") else {
        return;
    };
    const SESSIONS: usize = 48;
    const EVENTS: usize = 3;
    let schema = factory.schema();
    let open = || async {
        Arc::new(
            factory
                .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
                .await
                .expect("open store"),
        )
    };
    let (one, two) = (open().await, open().await);
    for k in 0..SESSIONS {
        let events = (0..EVENTS)
            .map(|n| if k % 2 == 0 { to_event(n) } else { to_lane(n) })
            .collect();
        one.append(&format!("s{k:02}"), events, Default::default())
            .await
            .expect("append");
    }
    let mut claimers = Vec::new();
    for (n, store) in [&one, &one, &two, &two].into_iter().enumerate() {
        let store = Arc::clone(store);
        claimers.push(tokio::spawn(async move {
            let mut taken = Vec::new();
            let mut idle = 0;
            while idle < 20 {
                let result = store
                    .claim_work(work(&format!("w{n}"), 8))
                    .await
                    .expect("claim");
                if !matches!(result, ClaimWorkResult::Claimed { .. }) {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                idle = 0;
                for (session, head) in result.heads() {
                    taken.push((session.to_owned(), head.event.index));
                    store
                        .complete_attempt(complete(session, head))
                        .await
                        .expect("complete");
                }
            }
            taken
        }));
    }
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(claimer.await.expect("claimer"));
    }
    let distinct: BTreeSet<&(String, u64)> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a head was handed out twice");
    assert_eq!(all.len(), SESSIONS * EVENTS, "every head was claimed");
}

/// With every ready work row held by another transaction, a claim of
/// several answers `Busy` at the claim's time (contended) at once, and has
/// ended its transaction: once the holder lets go, the next claim takes
/// every session.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_finding_every_row_held_is_contended() {
    let Some(factory) = PgFactory::from_env("batch_claim") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = manual_store(&factory, &schema, &clock).await;
    let ids = sessions(&store, &clock, 4, || vec![to_event(0)]).await;
    let mut holder = support::raw_client(factory.url()).await;
    let tx = holder.transaction().await.expect("begin");
    tx.query(
        &format!("SELECT 1 FROM \"{schema}\".work WHERE consumer = 'agent' FOR UPDATE"),
        &[],
    )
    .await
    .expect("hold the work rows");
    let now = clock.now_ms();
    let held = tokio::time::timeout(Duration::from_secs(5), store.claim_work(work("w", 4)))
        .await
        .expect("answers without waiting for the holder")
        .expect("claim");
    assert_eq!(held, ClaimWorkResult::Busy { retry_at: now });
    tx.rollback().await.expect("let go");
    let result = store.claim_work(work("w", 4)).await.expect("claim");
    let want: Vec<(String, u64)> = ids.iter().map(|id| (id.clone(), 1)).collect();
    assert_eq!(heads(&result), want);
}

/// Work rows a plan node and its children read: rows returned plus rows
/// removed by a filter, over every loop, with the index of each scan.
fn work_rows_read(node: &Value, scans: &mut Vec<String>) -> f64 {
    let mut read = 0.0;
    if node["Relation Name"] == "work" {
        let loops = node["Actual Loops"].as_f64().unwrap_or(1.0);
        let rows = node["Actual Rows"].as_f64().unwrap_or(0.0);
        let removed = node["Rows Removed by Filter"].as_f64().unwrap_or(0.0);
        read += (rows + removed) * loops;
        let how = node["Index Name"]
            .as_str()
            .unwrap_or_else(|| node["Node Type"].as_str().unwrap_or("?"));
        scans.push(how.to_owned());
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        read += work_rows_read(child, scans);
    }
    read
}

/// The batch pick over 100,000 sessions' rows (1% of them ready) and
/// 100,000 ready rows of another consumer, with a generic plan (as a
/// cached statement may run): it reads about as many work rows as it picks,
/// in fairness order through `work_ready`, and its answer without a pick
/// is never run.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_pick_reads_only_the_rows_it_locks() {
    let Some(factory) = PgFactory::from_env("batch_claim") else {
        return;
    };
    let schema = factory.schema();
    let _store = manual_store(&factory, &schema, &ManualClock::new(T0)).await;
    let mut client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; \
             INSERT INTO work (session_id, consumer, ready_at) \
               SELECT 's' || n, 'agent', CASE WHEN n % 100 = 0 THEN n ELSE 1000000 + n END \
               FROM generate_series(1, 100000) AS n; \
             INSERT INTO work (session_id, consumer, ready_at) \
               SELECT 's' || n, 'other', n FROM generate_series(1, 100000) AS n; \
             ANALYZE work;"
        ))
        .await
        .expect("fill the work table");
    let tx = client.transaction().await.expect("begin");
    tx.batch_execute(&format!(
        "SET LOCAL search_path TO \"{schema}\"; SET LOCAL plan_cache_mode = force_generic_plan; \
         PREPARE pick_many (text[], bigint, text[], bigint) AS {}",
        work_sql::PICK_MANY
    ))
    .await
    .expect("prepare");
    let picked = tx
        .query_one("EXECUTE pick_many ('{agent}', 500000, '{s100}', 16)", &[])
        .await
        .expect("pick");
    let ids: Vec<String> = picked.get(0);
    let want: Vec<String> = (2..=17).map(|n| format!("s{}", n * 100)).collect();
    assert_eq!(ids, want, "the first 16 ready sessions but s100, in order");
    let row = tx
        .query_one(
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE pick_many ('{agent}', 500000, '{s100}', 16)",
            &[],
        )
        .await
        .expect("explain");
    tx.rollback().await.expect("rollback");
    client
        .batch_execute("DEALLOCATE pick_many")
        .await
        .expect("deallocate");
    let json: Value = row.get(0);
    let mut scans = Vec::new();
    let read = work_rows_read(&json[0]["Plan"], &mut scans);
    assert!(
        read <= 18.0,
        "pick: read {read} work rows through {scans:?}: {json}"
    );
    assert_eq!(scans[0], "work_ready", "pick: {scans:?}");
}

/// Not a test: a measurement, run by hand (`cargo test --release -p
/// a2-store-postgres --test batch_claim -- --ignored --nocapture`).
/// `A2_BATCH_WORKERS` workers (default 4) each claim up to `A2_BATCH_LIMIT`
/// heads (default 16) with `claim_work` and complete them one by one, over
/// 2,000 sessions of one ready head each (`A2_BATCH_LANES=1`: a lane head);
/// prints heads per second of the drain, claims per head and the time
/// spent in `claim_work` per head (summed over the workers).
#[ignore = "a measurement: run by hand"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure_claim_work_draining_sessions() {
    let Some(factory) = PgFactory::from_env("batch_claim") else {
        return;
    };
    let number = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (workers, limit) = (number("A2_BATCH_WORKERS", 4), number("A2_BATCH_LIMIT", 16));
    let lanes = number("A2_BATCH_LANES", 0) == 1;
    const SESSIONS: usize = 2_000;
    let schema = factory.schema();
    let store = Arc::new(
        factory
            .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
            .await
            .expect("open store"),
    );
    for k in 0..SESSIONS {
        let event = if lanes { to_lane(k) } else { to_event(k) };
        store
            .append(&format!("s{k:04}"), vec![event], Default::default())
            .await
            .expect("append");
    }
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for n in 0..workers {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let (mut heads, mut claims) = (0_usize, 0_usize);
            let mut claiming = Duration::ZERO;
            loop {
                let asked = std::time::Instant::now();
                let result = store
                    .claim_work(work(&format!("w{n}"), limit))
                    .await
                    .expect("claim");
                claiming += asked.elapsed();
                claims += 1;
                match result {
                    ClaimWorkResult::Claimed { .. } => {}
                    ClaimWorkResult::Busy { retry_at } if retry_at <= SystemClock.now_ms() => {
                        continue
                    }
                    _ => return (heads, claims, claiming),
                }
                for (session, head) in result.heads() {
                    store
                        .complete_attempt(complete(session, head))
                        .await
                        .expect("complete");
                    heads += 1;
                }
            }
        }));
    }
    let (mut heads, mut claims, mut claiming) = (0, 0, Duration::ZERO);
    for task in tasks {
        let (h, c, t) = task.await.expect("worker");
        heads += h;
        claims += c;
        claiming += t;
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(heads, SESSIONS);
    println!(
        "workers {workers} limit {limit} lanes {lanes}: {heads} heads in {secs:.2} s = {:.0} heads/s, \
         {:.2} claim calls and {:.3} ms in claim_work per head",
        heads as f64 / secs,
        claims as f64 / heads as f64,
        claiming.as_secs_f64() * 1000.0 / heads as f64
    );
}
