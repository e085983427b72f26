//! The batching writer: concurrent completions share transactions (counted
//! by the distinct `xmin` of the completion records), each caller gets its own verdict
//! (applied, replayed, superseded) exactly as alone, and every cursor ends
//! where the single path would leave it. Runs only when `A2_POSTGRES_URL`
//! is set.

mod support;

use std::sync::Arc;

use a2_store_api::{
    AppendOptions, ClaimRequest, Clock, CompleteRequest, CompleteResult, ErrorCode, Head, NewEvent,
    RandomIds, Store, SystemClock, Target,
};
use a2_store_postgres::PostgresStore;
use serde_json::json;

/// Sessions with one event head each, and as many with one lane.
const SESSIONS: usize = 48;

/// How many transactions wrote the completion records of `schema`: the
/// distinct `xmin` of its rows (a record rewritten by a replay keeps its
/// version, since a replay writes nothing).
async fn writing_transactions(url: &str, schema: &str) -> i64 {
    let client = support::raw_client(url).await;
    // A name made by the test's factory, never input: safe to format.
    let row = client
        .query_one(
            &format!("SELECT count(DISTINCT xmin::text)::bigint FROM {schema}.completions"),
            &[],
        )
        .await
        .expect("count the writing transactions");
    row.get(0)
}

/// A store on a fresh schema of `factory`'s server, and the schema.
async fn store(factory: &support::PgFactory) -> (PostgresStore, String) {
    let schema = factory.schema();
    let store = factory
        .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        .await
        .expect("connect");
    (store, schema)
}

/// A claim of `session` by `w` for a minute.
fn claim(session: &str) -> ClaimRequest {
    ClaimRequest::new(session, "w", std::time::Duration::from_secs(60))
}

/// The completion of `head` by its attempt, returning nothing.
fn completion(head: &Head) -> CompleteRequest {
    CompleteRequest::for_head(head, Vec::new())
}

/// Appends, per session, one event for `agent` (sessions `e*`) or two for
/// lane `L` of `serial` (sessions `l*`), and claims every head.
async fn claimed_heads(store: &PostgresStore) -> Vec<Head> {
    let mut heads = Vec::new();
    for n in 0..SESSIONS {
        let event = NewEvent::new("job", json!(n)).with_target(Target::event("agent"));
        let session = format!("e{n:03}");
        store
            .append(&session, vec![event], AppendOptions::default())
            .await
            .expect("append");
        heads.extend(
            store
                .claim_available(claim(&session))
                .await
                .expect("claim")
                .into_heads(),
        );
        let lane =
            |k: usize| NewEvent::new("job", json!(k)).with_target(Target::lane("serial", "L"));
        let session = format!("l{n:03}");
        store
            .append(&session, vec![lane(0), lane(1)], AppendOptions::default())
            .await
            .expect("append");
        heads.extend(
            store
                .claim_available(claim(&session))
                .await
                .expect("claim")
                .into_heads(),
        );
    }
    heads
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_completions_share_transactions_and_each_gets_its_verdict() {
    let Some(factory) = support::PgFactory::from_env("writer") else {
        return;
    };
    let (store, schema) = store(&factory).await;
    let heads = claimed_heads(&store).await;
    assert_eq!(heads.len(), 2 * SESSIONS);
    // Every head completed at once, each of the first eight twice more: once
    // with its own attempt (a replay) and once with the next (superseded).
    let mut requests: Vec<CompleteRequest> = heads.iter().map(completion).collect();
    for head in heads.iter().take(8) {
        requests.push(completion(head));
        let mut later = completion(head);
        later.attempt += 1;
        requests.push(later);
    }
    let answers = futures::future::join_all(requests.iter().cloned().map(|request| {
        let store = store.clone();
        async move { store.complete_attempt(request).await }
    }))
    .await;
    let completed = answers
        .iter()
        .filter(|a| matches!(a, Ok(CompleteResult::Completed { events }) if events.is_empty()))
        .count();
    let superseded = answers
        .iter()
        .filter(|a| matches!(a, Ok(CompleteResult::Superseded)))
        .count();
    assert_eq!(completed, 2 * SESSIONS + 8, "{answers:?}");
    assert_eq!(superseded, 8, "{answers:?}");
    // Far fewer transactions than completions: they were batched.
    let writers = writing_transactions(factory.url(), &schema).await;
    assert!(
        writers <= i64::try_from(heads.len() / 4).unwrap_or(i64::MAX),
        "{writers} transactions wrote {} completions",
        heads.len()
    );
    // The work index says so: no row for a finished event session, a ready
    // row (no later than now) for each lane with its next head waiting.
    let client = support::raw_client(factory.url()).await;
    // A name made by the test's factory, never input: safe to format.
    let rows = client
        .query(
            &format!("SELECT session_id, ready_at FROM {schema}.work ORDER BY session_id"),
            &[],
        )
        .await
        .expect("read the work rows");
    let now = SystemClock.now_ms();
    let lanes: Vec<String> = (0..SESSIONS).map(|n| format!("l{n:03}")).collect();
    let found: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(found, lanes);
    for row in &rows {
        let ready_at: Option<i64> = row.get(1);
        assert!(
            ready_at.is_some_and(|at| at <= now),
            "{:?} not ready by {now}",
            row
        );
    }
    // Every event session is done; every lane moved to its second event,
    // claimable now, and each replay still answers as the first completion.
    for n in 0..SESSIONS {
        let session = format!("e{n:03}");
        assert!(
            matches!(
                store.claim_available(claim(&session)).await,
                Ok(a2_store_api::ClaimResult::Settled)
            ),
            "{session} has work left"
        );
        let session = format!("l{n:03}");
        let next = store
            .claim_available(claim(&session))
            .await
            .expect("claim")
            .into_heads();
        assert_eq!(next.len(), 1, "{session}: {next:?}");
        assert_eq!(next[0].event.index, 2, "{session}: {next:?}");
    }
    for head in &heads {
        assert_eq!(
            store
                .complete_attempt(completion(head))
                .await
                .expect("replay"),
            CompleteResult::Completed { events: Vec::new() }
        );
    }
}

/// A batch with completions that cannot apply (a head that never existed,
/// an index no row can hold) answers each alone with the error the single
/// path gives, and still applies the rest.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_completions_in_a_batch_answer_alone() {
    let Some(factory) = support::PgFactory::from_env("writer") else {
        return;
    };
    let (store, _) = store(&factory).await;
    let heads = claimed_heads(&store).await;
    let mut requests: Vec<CompleteRequest> = heads.iter().map(completion).collect();
    let mut missing = completion(&heads[0]);
    missing.index = 999;
    requests.push(missing);
    let answers = futures::future::join_all(requests.into_iter().map(|request| {
        let store = store.clone();
        async move { store.complete_attempt(request).await }
    }))
    .await;
    let (last, applied) = answers.split_last().expect("answers");
    assert_eq!(
        last.as_ref().map_err(|e| e.code()),
        Err(ErrorCode::NoSuchEvent)
    );
    assert!(
        applied
            .iter()
            .all(|a| matches!(a, Ok(CompleteResult::Completed { .. }))),
        "{applied:?}"
    );
}

/// Connections killed while batches are in flight, at any point (their
/// locks, their writes, their `COMMIT`): every caller is answered, none is
/// applied twice. Each completion is retried until it answers `Completed`
/// (a replay when a lost `COMMIT` had applied it), and then every lane has
/// moved exactly one head and every record is there once.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_connections_lose_or_double_no_completion() {
    let Some(factory) = support::PgFactory::from_env("writer") else {
        return;
    };
    let schema = factory.schema();
    let name = format!("a2t_writer_kill_{}", uuid::Uuid::new_v4().simple());
    let options = a2_store_postgres::PostgresOptions {
        pool_size: 8,
        application_name: Some(name.clone()),
        ..support::options(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
    };
    let store = PostgresStore::connect(factory.url(), options)
        .await
        .expect("connect");
    let heads = claimed_heads(&store).await;
    let killer = support::raw_client(factory.url()).await;
    let burst = futures::future::join_all(heads.iter().map(|head| {
        let store = store.clone();
        let request = completion(head);
        async move {
            let mut tries = 0;
            loop {
                tries += 1;
                match store.complete_attempt(request.clone()).await {
                    Ok(CompleteResult::Completed { events }) if events.is_empty() => break tries,
                    Ok(other) => panic!("{request:?} answered {other:?}"),
                    Err(error) if tries < 50 => {
                        let _ = error;
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    Err(error) => panic!("{request:?} still failing: {error}"),
                }
            }
        }
    }));
    let kills = async {
        for _ in 0..5 {
            killer
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1",
                    &[&name],
                )
                .await
                .expect("terminate the store's connections");
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        }
    };
    let (tries, ()) = futures::join!(burst, kills);
    assert_eq!(tries.len(), heads.len());
    for n in 0..SESSIONS {
        let session = format!("l{n:03}");
        let next = store
            .claim_available(claim(&session))
            .await
            .expect("claim")
            .into_heads();
        assert_eq!(
            next.iter().map(|h| h.event.index).collect::<Vec<_>>(),
            vec![2],
            "{session} moved other than one head"
        );
    }
    let client = support::raw_client(factory.url()).await;
    // A name made by the test's factory, never input: safe to format.
    let records: i64 = client
        .query_one(
            &format!("SELECT count(*)::bigint FROM {schema}.completions"),
            &[],
        )
        .await
        .expect("count the records")
        .get(0);
    assert_eq!(records, i64::try_from(heads.len()).unwrap_or(i64::MAX));
}
