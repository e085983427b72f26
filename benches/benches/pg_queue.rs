//! The PostgreSQL backend next to what a hand-written queue on the same
//! server costs, in one run (PostgreSQL only; skipped without
//! `A2_POSTGRES_URL`):
//!
//! - `pg_claim_complete_16`: 16 workers claiming one head at a time and
//!   completing it. `bare_queue`: a table of jobs, claimed by `UPDATE ...
//!   WHERE id = (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`
//!   and completed by `DELETE`, each statement its own transaction (two
//!   commits per job, as the store's claim and completion are), each worker
//!   on its own connection. `store_own_session`: each worker drains its own
//!   session; `store_one_session`: all 16 drain one session.
//! - `pg_empty_claim`: one task; `select_1` is a prepared `SELECT 1` on a
//!   plain connection (one round trip), `store_empty_claim` a
//!   `claim_available` of a session with nothing to claim.
//!
//! Both sides connect with `sslmode=disable` (the bare queue has no TLS),
//! durable commits (the server's default), and a fresh schema each.
//!
//! Run: `A2_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p a2-benches --bench pg_queue`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_benches::bare_queue::BareQueue;
use a2_benches::postgres;
use a2_benches::settings;
use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimResult, CompleteRequest, NewEvent, RandomIds, Store,
    SystemClock, Target,
};
use a2_store_postgres::scratch::fresh_schema_name;
use a2_store_postgres::{PostgresOptions, PostgresStore};
use criterion::{BenchmarkId, Throughput};
use tokio_postgres::{Client, NoTls};

const WORKERS: usize = 16;

/// `url` with TLS off, so both sides of a comparison connect alike.
fn plain(url: &str) -> String {
    if url.contains("sslmode=") {
        return url.to_owned();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=disable")
}

async fn connect_raw(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(connection);
    client
}

async fn open_store(url: &str, pool_size: usize) -> PostgresStore {
    let schema = fresh_schema_name("a2bench_").expect("schema name");
    PostgresStore::connect(
        url,
        PostgresOptions {
            schema,
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            pool_size,
            ..PostgresOptions::default()
        },
    )
    .await
    .expect("connect the store")
}

fn job() -> NewEvent {
    NewEvent::new("job", serde_json::json!({"n": 1})).with_target(Target::event("agent"))
}

async fn fill(store: &PostgresStore, session: &str, heads: u64) {
    let mut left = heads;
    while left > 0 {
        let batch = left.min(500);
        let events = (0..batch).map(|_| job()).collect();
        store
            .append(session, events, AppendOptions::default())
            .await
            .expect("append");
        left -= batch;
    }
}

fn claim(session: &str, holder: &str) -> ClaimRequest {
    ClaimRequest {
        session_id: session.into(),
        holder: holder.into(),
        ttl_ms: Some(60_000),
        limit: Some(1),
        ..ClaimRequest::default()
    }
}

/// Claims and completes heads of `session` until none is left.
async fn drain(store: PostgresStore, session: String, holder: String) -> u64 {
    let mut done = 0;
    loop {
        let claimed = store
            .claim_available(claim(&session, &holder))
            .await
            .expect("claim");
        let ClaimResult::Claimed { heads, .. } = claimed else {
            return done;
        };
        for head in heads {
            store
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
            done += 1;
        }
    }
}

/// Runs exactly `iters` store cycles with [`WORKERS`] workers, each on its
/// own session (`shared` false) or all on one; only the draining is timed
/// (each worker ends with one claim finding nothing, as a bare worker ends
/// with one finding no job).
async fn store_cycles(store: &PostgresStore, iters: u64, shared: bool, round: u64) -> Duration {
    let workers = WORKERS as u64;
    // Exactly `iters` cycles: the first `iters % WORKERS` workers take one more.
    let share = |w: u64| iters / workers + u64::from(w < iters % workers);
    let sessions: Vec<String> = (0..WORKERS)
        .map(|w| {
            if shared {
                format!("shared-{round}")
            } else {
                format!("own-{round}-{w}")
            }
        })
        .collect();
    if shared {
        fill(store, &sessions[0], iters).await;
    } else {
        for (w, session) in (0..).zip(&sessions) {
            fill(store, session, share(w)).await;
        }
    }
    let start = Instant::now();
    let tasks: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(w, session)| tokio::spawn(drain(store.clone(), session, format!("w{w}"))))
        .collect();
    for task in tasks {
        task.await.expect("worker");
    }
    start.elapsed()
}

async fn bare_setup(client: &Client, schema: &str) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path TO {schema}; {}",
            BareQueue::UNBATCHED.create_table_sql()
        ))
        .await
        .expect("bare queue table");
}

async fn bare_worker(client: Arc<Client>) -> u64 {
    BareQueue::UNBATCHED
        .drain(&client, |_| {})
        .await
        .expect("bare queue worker")
}

async fn bare_cycles(clients: &[Arc<Client>], iters: u64) -> Duration {
    let per = iters.max(1);
    clients[0]
        .execute(
            "INSERT INTO jobs (payload) SELECT '{\"n\": 1}'::jsonb FROM generate_series(1::bigint, $1::bigint)",
            &[&i64::try_from(per).unwrap_or(i64::MAX)],
        )
        .await
        .expect("fill jobs");
    let start = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| tokio::spawn(bare_worker(client.clone())))
        .collect();
    for task in tasks {
        task.await.expect("worker");
    }
    start.elapsed()
}

fn main() {
    let Some(url) = postgres::url_from_env("pg_queue") else {
        return;
    };
    let url = plain(&url);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut c = settings::criterion();
    let store = rt.block_on(open_store(&url, WORKERS + 2));
    let schema = fresh_schema_name("a2bare_").expect("schema name");
    let clients: Vec<Arc<Client>> = rt.block_on(async {
        let mut clients = Vec::with_capacity(WORKERS);
        for _ in 0..WORKERS {
            let client = connect_raw(&url).await;
            clients.push(Arc::new(client));
        }
        bare_setup(&clients[0], &schema).await;
        for client in &clients[1..] {
            client
                .batch_execute(&format!("SET search_path TO {schema}"))
                .await
                .expect("search_path");
        }
        clients
    });
    {
        let mut group = c.benchmark_group("pg_claim_complete_16");
        group.throughput(Throughput::Elements(1));
        let mut round = 0;
        group.bench_function(BenchmarkId::new("bare_queue", WORKERS), |b| {
            b.iter_custom(|iters| rt.block_on(bare_cycles(&clients, iters)))
        });
        group.bench_function(BenchmarkId::new("store_own_session", WORKERS), |b| {
            b.iter_custom(|iters| {
                round += 1;
                rt.block_on(store_cycles(&store, iters, false, round))
            })
        });
        group.bench_function(BenchmarkId::new("store_one_session", WORKERS), |b| {
            b.iter_custom(|iters| {
                round += 1;
                rt.block_on(store_cycles(&store, iters, true, round))
            })
        });
        group.finish();
    }
    {
        let mut group = c.benchmark_group("pg_empty_claim");
        let one = rt
            .block_on(clients[0].prepare("SELECT 1"))
            .expect("prepare");
        group.bench_function("select_1", |b| {
            b.to_async(&rt).iter(|| async {
                clients[0].query_one(&one, &[]).await.expect("select 1");
            })
        });
        group.bench_function("store_empty_claim", |b| {
            b.to_async(&rt).iter(|| async {
                let result = store
                    .claim_available(claim("nothing-here", "w"))
                    .await
                    .expect("claim");
                assert!(matches!(result, ClaimResult::Settled), "{result:?}");
            })
        });
        group.finish();
    }
    rt.block_on(async {
        clients[0]
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("drop the bare queue schema");
        store.drop_schema().await.expect("drop the store schema");
    });
    c.final_summary();
}
