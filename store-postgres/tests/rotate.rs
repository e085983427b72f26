//! Rotation (`PostgresStore::rotate` and the store's periodic check): every
//! live row of every state table is kept, the tables shrink even while a
//! transaction holds vacuum back, a table locked elsewhere is skipped
//! within the lock timeout, a table above `max_live` is left alone, calls
//! running meanwhile lose nothing, and a store rotates by itself while
//! vacuum is held back, and vacuums instead while it is not.
//! Runs only when `A2_POSTGRES_URL` is set.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, ClaimRequest, CompleteRequest, CompleteResult, ConsumerDeclaration, NewEvent,
    PauseRequest, PresenceMeta, RandomIds, StateWrite, Store, SystemClock, Target,
};
use a2_store_postgres::{PostgresOptions, PostgresStore, Rotation, LOG_TABLES, STATE_TABLES};
use serde_json::json;
use support::PgFactory;

/// Held by the tests that hold vacuum's horizon and by the one that needs
/// it free: a store's periodic check sees every connection of the server.
static HORIZON: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A store on a fresh schema of `factory` with `rotation`.
async fn store_with(factory: &PgFactory, rotation: Rotation) -> (PostgresStore, String) {
    let schema = factory.schema();
    let store = PostgresStore::connect(
        factory.url(),
        PostgresOptions {
            rotation,
            ..support::options(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        },
    )
    .await
    .expect("connect");
    (store, schema)
}

/// A store whose periodic check runs every 20 ms, with `min_growth`, on a
/// fresh schema, while the test holds [`HORIZON`].
struct Checked {
    factory: PgFactory,
    store: PostgresStore,
    schema: String,
    _horizon: tokio::sync::MutexGuard<'static, ()>,
}

/// [`Checked`], once [`HORIZON`] is free; `None` without a server.
async fn checked_often(min_growth: u64) -> Option<Checked> {
    let factory = PgFactory::from_env("rotate")?;
    let _horizon = HORIZON.lock().await;
    let rotation = Rotation {
        interval: Some(Duration::from_millis(20)),
        min_growth,
        ..Rotation::default()
    };
    let (store, schema) = store_with(&factory, rotation).await;
    Some(Checked {
        factory,
        store,
        schema,
        _horizon,
    })
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since.as_millis()).expect("ms fit")
}

/// No periodic check: only the test rotates.
fn by_hand() -> Rotation {
    Rotation {
        interval: None,
        ..Rotation::default()
    }
}

/// Every row of every state table, as JSON text, sorted per table.
async fn dump(client: &tokio_postgres::Client, schema: &str) -> BTreeMap<String, Vec<String>> {
    let mut tables = BTreeMap::new();
    for table in STATE_TABLES.into_iter().chain(LOG_TABLES) {
        let rows = client
            .query(
                &format!("SELECT to_jsonb(t)::text FROM \"{schema}\".\"{table}\" t"),
                &[],
            )
            .await
            .expect("dump");
        let mut rows: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
        rows.sort();
        tables.insert(table.to_owned(), rows);
    }
    tables
}

/// Bytes of `table` with its indexes.
async fn bytes(client: &tokio_postgres::Client, schema: &str, table: &str) -> i64 {
    client
        .query_one(
            "SELECT pg_total_relation_size(format('%I.%I', $1::text, $2::text)::regclass)",
            &[&schema, &table],
        )
        .await
        .expect("size")
        .get(0)
}

/// The file `table` is stored in: a rotation gives it a new one.
async fn file_of(client: &tokio_postgres::Client, schema: &str, table: &str) -> u32 {
    client
        .query_one(
            "SELECT relfilenode FROM pg_class WHERE oid = format('%I.%I', $1::text, $2::text)::regclass",
            &[&schema, &table],
        )
        .await
        .expect("relfilenode")
        .get::<_, tokio_postgres::types::Oid>(0)
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_every_row_and_reclaims_under_a_held_transaction() {
    let Some(factory) = PgFactory::from_env("rotate") else {
        return;
    };
    let _horizon = HORIZON.lock().await;
    let (store, schema) = store_with(&factory, by_hand()).await;
    let raw = support::raw_client(factory.url()).await;

    // A row in every state table: live heads of both kinds, a lease held,
    // a dead letter, presence, a snapshot with a pin, a subscriber, a pause.
    let lane =
        |n: u64| NewEvent::new("job", json!({ "n": n })).with_target(Target::lane("agent", "main"));
    let each =
        |n: u64| NewEvent::new("note", json!({ "n": n })).with_target(Target::event("audit"));
    store
        .append(
            "s1",
            vec![lane(1), lane(2), each(3), each(4)],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    store
        .append("s2", vec![each(1)], AppendOptions::default())
        .await
        .expect("append");
    support::dead_letter_one(
        &store,
        ClaimRequest {
            session_id: "s2".into(),
            holder: "w".into(),
            ttl_ms: Some(60_000),
            ..ClaimRequest::default()
        },
    )
    .await;
    let held = store
        .claim_available(ClaimRequest {
            session_id: "s1".into(),
            holder: "w".into(),
            ttl_ms: Some(600_000),
            consumers: Some(vec![ConsumerDeclaration::targeted("agent")]),
            ..ClaimRequest::default()
        })
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(held.len(), 1);
    store
        .set_presence(
            "s1",
            "alice",
            BTreeMap::from([("typing".to_owned(), json!(true))]),
            PresenceMeta::new(now_ms(), Duration::from_secs(600)),
        )
        .await
        .expect("presence");
    store
        .write_state(
            "s1",
            "count",
            vec![StateWrite {
                index: 2,
                state: json!({ "n": 2 }),
                pins: vec![held[0].cursor_ref()],
            }],
        )
        .await
        .expect("state");
    let _stream = store.subscribe("s1", 0).await.expect("subscribe");
    store
        .pause(PauseRequest {
            consumer: "audit".into(),
            session_id: Some("s2".into()),
            until_ms: None,
        })
        .await
        .expect("pause");

    // Churn under a transaction that holds vacuum's horizon.
    let holder = support::raw_client(factory.url()).await;
    holder
        .batch_execute("BEGIN; SELECT txid_current()")
        .await
        .expect("hold a transaction");
    for _ in 0..500 {
        support::lane_cycle(&store, "churn", 1).await;
    }
    let before = dump(&raw, &schema).await;
    for table in STATE_TABLES {
        assert!(
            !before[table].is_empty(),
            "the workload left {table} empty: {before:?}"
        );
    }
    let cursors_before = bytes(&raw, &schema, "cursors").await;

    let report = store.rotate().await.expect("rotate");
    assert!(
        report.busy.is_empty() && report.too_large.is_empty(),
        "{report:?}"
    );
    let rotated: Vec<&str> = report.rotated.iter().map(|t| t.table.as_str()).collect();
    let every: Vec<&str> = STATE_TABLES.into_iter().chain(LOG_TABLES).collect();
    assert_eq!(rotated, every);
    for table in &report.rotated {
        assert_eq!(
            table.rows,
            before[&table.table].len() as u64,
            "{}",
            table.table
        );
    }
    assert_eq!(dump(&raw, &schema).await, before, "rows changed");
    let cursors_after = bytes(&raw, &schema, "cursors").await;
    assert!(
        cursors_after * 3 < cursors_before,
        "cursors: {cursors_before} bytes before, {cursors_after} after"
    );
    let reported = report
        .rotated
        .iter()
        .find(|t| t.table == "cursors")
        .expect("cursors rotated");
    assert_eq!(reported.bytes_after, cursors_after as u64);
    assert!(reported.bytes_before >= reported.bytes_after);

    // The store goes on over the rotated tables: the lease still holds, the
    // held head completes, the churn goes on.
    let again = store
        .claim_available(ClaimRequest {
            session_id: "s1".into(),
            holder: "other".into(),
            ttl_ms: Some(60_000),
            consumers: Some(vec![ConsumerDeclaration::targeted("agent")]),
            ..ClaimRequest::default()
        })
        .await
        .expect("claim");
    assert!(again.into_heads().is_empty(), "the lease was lost");
    let done = store
        .complete_attempt(CompleteRequest::for_head(&held[0], Vec::new()))
        .await
        .expect("complete");
    assert!(matches!(done, CompleteResult::Completed { .. }), "{done:?}");
    support::lane_cycle(&store, "churn", 1).await;
    holder.batch_execute("COMMIT").await.expect("commit");
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_locked_elsewhere_is_skipped_and_one_too_large_is_left() {
    let Some(factory) = PgFactory::from_env("rotate") else {
        return;
    };
    let (store, schema) = store_with(
        &factory,
        Rotation {
            max_live: 2,
            lock_timeout: Duration::from_millis(20),
            ..by_hand()
        },
    )
    .await;
    for session in ["a", "b", "c"] {
        support::lane_cycle(&store, session, 1).await;
    }
    let locker = support::raw_client(factory.url()).await;
    locker
        .batch_execute(&format!("BEGIN; SELECT count(*) FROM \"{schema}\".work"))
        .await
        .expect("lock work");
    let started = Instant::now();
    let report = store.rotate().await.expect("rotate");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.busy, vec!["work".to_owned()], "{report:?}");
    // Three sessions, three lane cursors: above max_live.
    assert!(
        report.too_large.contains(&"sessions".to_owned()),
        "{report:?}"
    );
    assert!(
        report.too_large.contains(&"cursors".to_owned()),
        "{report:?}"
    );
    assert!(
        report.rotated.iter().any(|t| t.table == "lane_queue"),
        "{report:?}"
    );
    locker.batch_execute("COMMIT").await.expect("unlock");
    let report = store.rotate().await.expect("rotate");
    assert!(report.busy.is_empty(), "{report:?}");
    assert!(
        report.rotated.iter().any(|t| t.table == "work"),
        "{report:?}"
    );
}

/// Eight workers drain four sessions while rotations run back to back:
/// every job is completed exactly once and nothing is left pending.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_during_rotations_lose_nothing() {
    let Some(factory) = PgFactory::from_env("rotate") else {
        return;
    };
    let (store, _schema) = store_with(&factory, by_hand()).await;
    const SESSIONS: usize = 4;
    const JOBS: u64 = 60;
    for s in 0..SESSIONS {
        let events = (0..JOBS)
            .map(|n| {
                let lane = format!("l{}", n % 3);
                NewEvent::new("job", json!({ "n": n })).with_target(Target::lane("agent", &lane))
            })
            .collect();
        store
            .append(&format!("s{s}"), events, AppendOptions::default())
            .await
            .expect("append");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rotator = {
        let store = store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut passes = 0;
            while !stop.load(Ordering::Relaxed) {
                let report = store.rotate().await.expect("rotate");
                passes += usize::from(!report.rotated.is_empty());
            }
            passes
        })
    };
    let mut workers = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let session = format!("s{}", w % SESSIONS);
            let mut done = Vec::new();
            let mut idle = 0;
            while idle < 20 {
                let heads = store
                    .claim_available(ClaimRequest {
                        session_id: session.clone(),
                        holder: format!("w{w}"),
                        ttl_ms: Some(60_000),
                        limit: Some(1),
                        ..ClaimRequest::default()
                    })
                    .await
                    .expect("claim")
                    .into_heads();
                let Some(head) = heads.into_iter().next() else {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                idle = 0;
                let result = store
                    .complete_attempt(CompleteRequest::for_head(&head, Vec::new()))
                    .await
                    .expect("complete");
                assert!(
                    matches!(result, CompleteResult::Completed { .. }),
                    "{result:?}"
                );
                done.push((session.clone(), head.event.index));
            }
            done
        }));
    }
    let mut done = Vec::new();
    for worker in workers {
        done.extend(worker.await.expect("worker"));
    }
    stop.store(true, Ordering::Relaxed);
    let passes = rotator.await.expect("rotator");
    assert!(
        passes > 1,
        "only {passes} rotations ran alongside the workers"
    );
    done.sort();
    let expected: Vec<(String, u64)> = (0..SESSIONS)
        .flat_map(|s| (1..=JOBS).map(move |i| (format!("s{s}"), i)))
        .collect();
    assert_eq!(done, expected, "each job completed exactly once");
    for s in 0..SESSIONS {
        let pending = store
            .append(&format!("s{s}"), Vec::new(), AppendOptions::default())
            .await
            .expect("has_pending");
        assert!(!pending.has_pending, "s{s} still has work");
    }
}

/// With a short interval and a small growth, a store rotates a churned
/// table by itself, again and again, while a transaction held open on
/// another connection keeps vacuum from reclaiming it: its file changes (a
/// table already past the growth when the store opens goes at the first
/// check, the churn's growth brings the next).
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_rotates_its_tables_by_itself() {
    let Some(Checked {
        factory,
        store,
        schema,
        _horizon,
    }) = checked_often(256 << 10).await
    else {
        return;
    };
    let raw = support::raw_client(factory.url()).await;
    let holder = support::raw_client(factory.url()).await;
    holder
        .batch_execute("BEGIN; SELECT txid_current();")
        .await
        .expect("a held transaction");
    let mut files = vec![file_of(&raw, &schema, "cursors").await];
    let mut cycles = 0;
    while files.len() < 3 {
        assert!(
            cycles < 50_000,
            "rotations after {cycles} cycles: {files:?}"
        );
        support::lane_cycle(&store, "s", 1).await;
        cycles += 1;
        let file = file_of(&raw, &schema, "cursors").await;
        if files.last() != Some(&file) {
            files.push(file);
            // Rotated down to its live rows: well below the growth.
            assert!(bytes(&raw, &schema, "cursors").await < 256 << 10);
        }
    }
}

/// While nothing holds vacuum's horizon, a store's periodic check vacuums
/// a churned table instead of rotating it: the table keeps its file (no
/// exclusive lock was taken), the statistics count the vacuums, and the
/// churn goes on.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_vacuums_what_vacuum_can_reclaim() {
    let Some(Checked {
        factory,
        store,
        schema,
        _horizon,
    }) = checked_often(64 << 10).await
    else {
        return;
    };
    let raw = support::raw_client(factory.url()).await;
    let file = file_of(&raw, &schema, "cursors").await;
    let vacuums = || async {
        let row = raw
            .query_one(
                "SELECT pg_stat_get_vacuum_count(c.oid) FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = 'cursors'",
                &[&schema],
            )
            .await
            .expect("vacuum count");
        row.get::<_, i64>(0)
    };
    let started = Instant::now();
    while vacuums().await < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no vacuums of cursors after {:?}",
            started.elapsed()
        );
        for _ in 0..20 {
            support::lane_cycle(&store, "s", 1).await;
        }
    }
    assert_eq!(
        file_of(&raw, &schema, "cursors").await,
        file,
        "cursors was rotated, though nothing held vacuum back"
    );
}

/// A store of one connection rotates on it: a pass measures, rotates and
/// measures again without asking the pool for a second connection.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_connection_store_rotates() {
    let Some(factory) = PgFactory::from_env("rotate") else {
        return;
    };
    let schema = factory.schema();
    let store = PostgresStore::connect(
        factory.url(),
        PostgresOptions {
            pool_size: 1,
            pool_timeout: Some(Duration::from_secs(2)),
            rotation: by_hand(),
            ..support::options(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
        },
    )
    .await
    .expect("connect");
    support::lane_cycle(&store, "s", 1).await;
    let report = store.rotate().await.expect("rotate on the one connection");
    assert_eq!(
        report.rotated.len(),
        STATE_TABLES.len() + LOG_TABLES.len(),
        "{report:?}"
    );
}
