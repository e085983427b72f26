//! The work index of the PostgreSQL backend (schema version 7): a schema
//! written before it opens with its pending work indexed; a waiting claim
//! wakes on another store's append through `NOTIFY`; claimers pass a
//! session whose work rows another transaction holds instead of queueing;
//! a claimer leaves a session another claimer served since it read it as
//! ready; claimers and writers racing never deadlock or share a head; and finding
//! ready sessions (and `claim_work`'s pick of one) reads only the rows it
//! returns, however many sessions have rows (`EXPLAIN` of the very
//! statement, included from the source); the pick passes rows other
//! transactions hold.

mod support;

#[allow(dead_code)]
#[path = "../src/ops/work/sql.rs"]
mod work_sql;

#[allow(dead_code)]
#[path = "../src/ops/claims/sql.rs"]
mod claim_sql;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    AppendOptions, ClaimRequest, ClaimWorkRequest, ClaimWorkResult, Clock, CompleteRequest,
    ConsumerDeclaration, CounterIds, FailRequest, Head, ListWork, ManualClock, NewEvent, RandomIds,
    Store, SystemClock, Target,
};
use a2_store_postgres::PostgresStore;
use serde_json::{json, Value};
use support::PgFactory;

const T0: i64 = 1_700_000_000_000;

fn targeted(consumer: &str) -> NewEvent {
    NewEvent::new("e", json!({})).with_target(Target::event(consumer))
}

fn work(holder: &str, ttl_ms: i64) -> ClaimWorkRequest {
    ClaimWorkRequest::new(holder, vec![ConsumerDeclaration::targeted("agent")], ttl_ms)
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

/// The only session and head a claim returned.
fn only(result: &ClaimWorkResult) -> (String, Head) {
    let heads: Vec<(&str, &Head)> = result.heads().collect();
    assert_eq!(heads.len(), 1, "one head claimed: {result:?}");
    (heads[0].0.to_owned(), heads[0].1.clone())
}

async fn store_on(factory: &PgFactory, schema: &str, clock: ManualClock) -> PostgresStore {
    factory
        .store_on(schema, Arc::new(clock), Arc::new(CounterIds::new("g")))
        .await
        .expect("connect")
}

/// A store on `schema` where sessions `a` (at `T0`) then `b` (1 ms later)
/// each have one claimable head of `agent`; the clock 2 ms past `T0`.
async fn two_ready_sessions(
    factory: &PgFactory,
    schema: &str,
    clock: &ManualClock,
) -> PostgresStore {
    let store = store_on(factory, schema, clock.clone()).await;
    for session in ["a", "b"] {
        store
            .append(session, vec![targeted("agent")], AppendOptions::default())
            .await
            .expect("append");
        clock.advance(1);
    }
    store
}

/// A schema at version 6 (no work table) holding an idle head (`idle`), a
/// head under a running lease (`leased`), a dead letter (`dead`) and a
/// finished session (`done`) opens at version 7 with each indexed: the
/// listing reports them, `claim_work` claims the idle head, then answers
/// `Busy` until the lease ends.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_from_version_6_indexes_pending_work() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = store_on(&factory, &schema, clock.clone()).await;
    for session in ["idle", "leased", "dead", "done"] {
        store
            .append(session, vec![targeted("agent")], AppendOptions::default())
            .await
            .expect("append");
    }
    let claim = |session: &str| ClaimRequest {
        session_id: session.into(),
        holder: "w".into(),
        ttl_ms: Some(1_000),
        ..ClaimRequest::default()
    };
    let mut heads = Vec::new();
    for session in ["leased", "dead", "done"] {
        let claimed = store.claim_available(claim(session)).await.expect("claim");
        let a2_store_api::ClaimResult::Claimed { heads: taken, .. } = claimed else {
            panic!("{session}: {claimed:?}");
        };
        heads.push(taken[0].clone());
    }
    let failure = FailRequest {
        incarnation: None,
        session_id: "dead".into(),
        consumer: "agent".into(),
        lane: None,
        index: heads[1].event.index,
        attempt: 1,
        error: "broken".into(),
        max_failures: Some(1),
        retry_after_ms: None,
    };
    store.fail_attempt(failure).await.expect("dead-letter");
    store
        .complete_attempt(complete("done", &heads[2]))
        .await
        .expect("complete");
    drop(store);
    let client = support::raw_client(factory.url()).await;
    client
        .batch_execute(&format!(
            "SET search_path TO \"{schema}\"; {} {} {} {} {} DROP TABLE work; \
             UPDATE schema_version SET version = 6",
            support::UNDO_15,
            support::UNDO_14,
            support::UNDO_12,
            support::UNDO_10,
            support::UNDO_9
        ))
        .await
        .expect("downgrade to version 6");
    let upgraded = store_on(&factory, &schema, clock.clone()).await;
    let listed = upgraded
        .list_work(ListWork {
            consumers: vec!["agent".into()],
            ..ListWork::default()
        })
        .await
        .expect("list");
    let counts: Vec<(&str, u64, u64, u64)> = listed
        .iter()
        .map(|w| (w.session_id.as_str(), w.claimable, w.busy, w.dead_lettered))
        .collect();
    assert_eq!(
        counts,
        vec![("dead", 0, 0, 1), ("idle", 1, 0, 0), ("leased", 0, 1, 0)]
    );
    let claimed = upgraded.claim_work(work("w2", 5_000)).await.expect("claim");
    assert_eq!(only(&claimed).0, "idle");
    assert_eq!(
        upgraded.claim_work(work("w2", 5_000)).await.expect("claim"),
        ClaimWorkResult::Busy {
            retry_at: T0 + 1_000
        }
    );
    clock.advance(1_000);
    let claimed = upgraded.claim_work(work("w2", 5_000)).await.expect("claim");
    assert_eq!(only(&claimed).0, "leased", "the expired lease is found");
}

/// A claim waiting on one store wakes on an append through another store
/// on the same schema (its own `LISTEN` connection): well before the 1 s
/// fallback poll would have claimed again.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_claim_wakes_on_an_append_through_another_store() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let open = || async {
        factory
            .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
            .await
            .expect("connect")
    };
    let (waiter, writer) = (open().await, open().await);
    // Twice: the first wait also starts the listener.
    for round in 0..2 {
        let session = format!("s{round}");
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let result = waiter
                    .claim_work(work("w", 60_000).with_wait_ms(10_000))
                    .await;
                (result, Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let appended = Instant::now();
        writer
            .append(&session, vec![targeted("agent")], AppendOptions::default())
            .await
            .expect("append");
        let (result, woke) = waiting.await.expect("the waiter ran");
        let result = result.expect("claim_work");
        assert_eq!(only(&result).0, session);
        let after = woke.duration_since(appended);
        assert!(
            after < Duration::from_millis(600),
            "round {round}: woke {after:?} after the append, as by the fallback poll"
        );
    }
}

/// A fresh store's first waiting claim starts the listener and returns
/// only once its connection listens: work made ready by a commit after that
/// claim's first read is notified to it, instead of waiting for the
/// listener's catch-up wake (which made a new worker process's first
/// messages wait 40 to 60 ms on a loaded machine).
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_waiting_claim_returns_once_the_store_listens() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let store = store_on(&factory, &schema, ManualClock::new(T0)).await;
    let raw = support::raw_client(factory.url()).await;
    let listening = || async {
        let listen = format!("LISTEN \"a2_store_{schema}\"");
        let row = raw
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query = $1",
                &[&listen],
            )
            .await
            .expect("pg_stat_activity");
        row.get::<_, i64>(0)
    };
    assert_eq!(
        listening().await,
        0,
        "nothing listens before the first wait"
    );
    let result = store
        .claim_work(work("w", 60_000).with_wait_ms(1))
        .await
        .expect("claim_work");
    assert!(matches!(result, ClaimWorkResult::Settled), "{result:?}");
    assert_eq!(
        listening().await,
        1,
        "the listener listens once the first waiting claim has returned"
    );
}

/// A claimer passes a session whose work rows another transaction holds (a
/// claimer serving it) without waiting for it, claims from the next one,
/// and finds the held session's work once it is released.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimer_passes_a_session_another_claimer_holds() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = two_ready_sessions(&factory, &schema, &clock).await;
    // Held as a claimer in the middle of serving `a` holds them.
    let mut client = support::raw_client(factory.url()).await;
    let holder = client.transaction().await.expect("begin");
    let sql = format!("SELECT consumer FROM \"{schema}\".work WHERE session_id = $1 FOR UPDATE");
    let held = holder.query(&sql, &[&"a"]).await.expect("lock a's rows");
    assert_eq!(held.len(), 1);
    let started = Instant::now();
    let claimed = store.claim_work(work("w", 1_000)).await.expect("claim");
    assert_eq!(only(&claimed).0, "b", "a is held: b is served");
    let mut only_a = work("w", 1_000);
    only_a.sessions = Some(vec!["a".into()]);
    let passed = store.claim_work(only_a.clone()).await.expect("claim");
    let now = clock.now_ms();
    assert!(
        matches!(passed, ClaimWorkResult::Busy { retry_at } if retry_at == now),
        "a held session is passed, contended: Busy at the claim's time: {passed:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no claim waited for the held rows: {:?}",
        started.elapsed()
    );
    // A waiting claim tries the held session again shortly, not at the
    // fallback poll: a rollback notifies nobody.
    let mut waiting = only_a.clone();
    waiting.wait_ms = Some(5_000);
    let claim = tokio::spawn({
        let store = store.clone();
        async move { store.claim_work(waiting).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    holder.rollback().await.expect("release");
    let claimed = claim.await.expect("join").expect("claim");
    assert_eq!(only(&claimed).0, "a");
    assert!(
        released.elapsed() < Duration::from_millis(900),
        "claimed {:?} after the release, before the fallback poll",
        released.elapsed()
    );
}

/// `claim_work`'s pick (one targeted consumer in every session), the very
/// statement, for one session wanted: it locks the first ready row in
/// fairness order that no other transaction holds and sets its session for
/// the transaction; with every
/// ready row held it answers contended; with none ready (or all left out)
/// the earliest `ready_at`.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pick_passes_held_rows_and_answers_without_one() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let _store = two_ready_sessions(&factory, &schema, &clock).await;
    let mut holder = support::raw_client(factory.url()).await;
    let mut picker = support::raw_client(factory.url()).await;
    for client in [&holder, &picker] {
        client
            .batch_execute(&format!("SET search_path TO \"{schema}\""))
            .await
            .expect("search_path");
    }
    let consumers = vec!["agent".to_owned()];
    let now = clock.now_ms();
    // (session picked, contended, earliest) and the session set.
    async fn pick(
        picker: &mut tokio_postgres::Client,
        consumers: &[String],
        now: i64,
        skip: &[String],
    ) -> (Option<String>, Option<bool>, Option<i64>, Option<String>) {
        let one: i64 = 1;
        let tx = picker.transaction().await.expect("begin");
        let row = tx
            .query_one(work_sql::PICK_MANY, &[&consumers, &now, &skip, &one])
            .await
            .expect("pick");
        let set: Option<String> = tx
            .query_one("SELECT current_setting('a2.claim_sessions', true)", &[])
            .await
            .expect("setting")
            .get(0);
        tx.rollback().await.expect("rollback");
        let ids: Vec<String> = row.get(0);
        assert!(ids.len() <= 1, "one session wanted, {ids:?} picked");
        // The setting is the picked sessions as a text array (`{a}`).
        let set = set.map(|set| set.trim_matches(|c| c == '{' || c == '}').to_owned());
        (ids.into_iter().next(), row.get(2), row.get(3), set)
    }
    // Free: the session waiting longest, set for the transaction.
    let (picked, contended, earliest, set) = pick(&mut picker, &consumers, now, &[]).await;
    assert_eq!(picked.as_deref(), Some("a"));
    assert_eq!(set.as_deref(), Some("a"));
    // Neither read when a session was picked.
    assert_eq!((contended, earliest), (None, None));
    // `a` held: `b`, without waiting.
    let held = holder.transaction().await.expect("begin");
    held.query("SELECT 1 FROM work WHERE session_id = 'a' FOR UPDATE", &[])
        .await
        .expect("hold a");
    let (picked, _, _, set) = pick(&mut picker, &consumers, now, &[]).await;
    assert_eq!((picked.as_deref(), set.as_deref()), (Some("b"), Some("b")));
    // `b` left out too: nothing picked, and the ready `a` is held.
    let (picked, contended, _, _) = pick(&mut picker, &consumers, now, &["b".into()]).await;
    assert_eq!((picked, contended), (None, Some(true)));
    held.rollback().await.expect("release");
    // Nothing ready: the earliest time (both rows are ready since T0 and
    // T0 + 1), not contended.
    let (picked, contended, earliest, _) = pick(&mut picker, &consumers, T0 - 1, &[]).await;
    assert_eq!((picked, contended, earliest), (None, Some(false), Some(T0)));
    // A consumer with no rows: no time at all.
    let nobody = vec!["nobody".to_owned()];
    let (picked, contended, earliest, _) = pick(&mut picker, &nobody, now, &[]).await;
    assert_eq!((picked, contended, earliest), (None, Some(false), None));
}

/// A claimer that read a session as ready just before another claimer
/// served it (its only head now leased, its row ready at the lease's end)
/// leaves it as it is: `Settled`, the head still the other holder's, the
/// row unchanged, and without trying its lock (another transaction
/// holding it changes nothing). Work that is due is still found: a new
/// head, and the leased head once its lease ends; and a row that is early
/// (ready with nothing claimable) is still corrected.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_served_since_the_ready_read_is_left_as_it_is() {
    use a2_store_api::work::WorkSource;
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = store_on(&factory, &schema, clock.clone()).await;
    store
        .append("a", vec![targeted("agent")], AppendOptions::default())
        .await
        .expect("append");
    let (_, served) = only(&store.claim_work(work("other", 1_000)).await.expect("claim"));
    let late = || ClaimRequest {
        consumers: Some(vec![ConsumerDeclaration::targeted("agent")]),
        ..ClaimRequest::new("a", "w", Duration::from_secs(1)).with_limit(1)
    };
    let listed = || async {
        store
            .list_work(ListWork::new(["agent"]))
            .await
            .expect("list")
    };
    let before = listed().await;
    let answer = store.claim_session(late()).await.expect("claim");
    assert!(
        matches!(answer, a2_store_api::ClaimResult::Settled),
        "nothing to take: {answer:?}"
    );
    assert_eq!(listed().await, before, "the row is left as it was");
    assert_eq!(before.len(), 1);
    assert_eq!(
        (before[0].busy, before[0].next_expiry),
        (1, Some(T0 + 1_000))
    );
    let cursors = store.cursors("a").await.expect("cursors");
    let holders: Vec<Option<&str>> = cursors
        .iter()
        .map(|c| c.dispatch.claim_holder.as_deref())
        .collect();
    assert_eq!(
        holders,
        vec![Some("other")],
        "the head is still the other holder's"
    );
    // Nothing is ready, so the claim does not even try the row's lock: a
    // row another transaction holds makes no difference (not contended).
    let mut client = support::raw_client(factory.url()).await;
    let holder = client.transaction().await.expect("begin");
    let sql = format!("SELECT consumer FROM \"{schema}\".work WHERE session_id = $1 FOR UPDATE");
    assert_eq!(holder.query(&sql, &[&"a"]).await.expect("lock").len(), 1);
    let answer = store.claim_session(late()).await.expect("claim");
    assert!(
        matches!(answer, a2_store_api::ClaimResult::Settled),
        "a held row with nothing ready: {answer:?}"
    );
    holder.rollback().await.expect("release");

    clock.advance(1);
    store
        .append("a", vec![targeted("agent")], AppendOptions::default())
        .await
        .expect("append");
    match store.claim_session(late()).await.expect("claim") {
        a2_store_api::ClaimResult::Claimed { heads, .. } => {
            assert_eq!(heads.len(), 1);
            assert_eq!(heads[0].event.index, served.event.index + 1, "the new head");
        }
        other => panic!("a new head is claimed: {other:?}"),
    }
    clock.advance(1_000);
    match store.claim_session(late()).await.expect("claim") {
        a2_store_api::ClaimResult::Claimed { heads, .. } => {
            assert_eq!(heads.len(), 1);
            assert_eq!(
                heads[0].event.index, served.event.index,
                "the expired lease's head"
            );
            assert_eq!(heads[0].dispatch.attempt_count, 2);
        }
        other => panic!("a head whose lease ended is claimed: {other:?}"),
    }

    // An early row (ready now with nothing claimable; the operations keep
    // rows exact, so it is made here by hand) is still corrected by the
    // claim: `Busy` until the lease ends, not at once.
    store
        .append("b", vec![targeted("agent")], AppendOptions::default())
        .await
        .expect("append");
    let mut only_b = work("other", 1_000);
    only_b.sessions = Some(vec!["b".into()]);
    only(&store.claim_work(only_b.clone()).await.expect("claim"));
    let leased_until = a2_store_api::Clock::now_ms(&clock) + 1_000;
    clock.advance(1);
    let client = support::raw_client(factory.url()).await;
    let early = format!("UPDATE \"{schema}\".work SET ready_at = $1 WHERE session_id = 'b'");
    let moved = client
        .execute(&early, &[&a2_store_api::Clock::now_ms(&clock)])
        .await
        .expect("make b's row early");
    assert_eq!(moved, 1);
    let answer = store.claim_work(only_b).await.expect("claim");
    assert!(
        matches!(answer, ClaimWorkResult::Busy { retry_at } if retry_at == leased_until),
        "the lane waits for its lease: {answer:?}"
    );
}

/// Claimers (claim, then complete) and appenders race over a few sessions:
/// no call fails (no deadlock surfaces as `Busy`), and every appended head
/// is completed exactly once.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn claimers_and_writers_race_without_deadlock_or_sharing() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    const SESSIONS: usize = 6;
    const APPENDS: usize = 40;
    let schema = factory.schema();
    let open = || async {
        factory
            .store_on(&schema, Arc::new(SystemClock), Arc::new(RandomIds))
            .await
            .expect("connect")
    };
    let (one, two) = (open().await, open().await);
    let mut writers = Vec::new();
    for writer in 0..2 {
        let store = if writer == 0 {
            one.clone()
        } else {
            two.clone()
        };
        writers.push(tokio::spawn(async move {
            for n in 0..APPENDS {
                let session = format!("s{}", (n + writer) % SESSIONS);
                let events = vec![targeted("agent"), targeted("agent")];
                store
                    .append(&session, events, AppendOptions::default())
                    .await
                    .expect("append");
            }
        }));
    }
    let mut claimers = Vec::new();
    for claimer in 0..6 {
        let store = if claimer % 2 == 0 {
            one.clone()
        } else {
            two.clone()
        };
        claimers.push(tokio::spawn(async move {
            let mut done = Vec::new();
            loop {
                let mut request = work(&format!("c{claimer}"), 60_000)
                    .with_limit(3)
                    .with_wait_ms(1_500);
                request.per_session_limit = Some(2);
                let result = store.claim_work(request).await.expect("claim_work");
                let ClaimWorkResult::Claimed { sessions } = result else {
                    return done;
                };
                for session in sessions {
                    for head in session.heads {
                        store
                            .complete_attempt(complete(&session.session_id, &head))
                            .await
                            .expect("complete");
                        done.push((session.session_id.clone(), head.event.index));
                    }
                }
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    let mut completed = Vec::new();
    for claimer in claimers {
        completed.extend(claimer.await.expect("claimer"));
    }
    let distinct: BTreeSet<&(String, u64)> = completed.iter().collect();
    assert_eq!(
        distinct.len(),
        completed.len(),
        "a head was handed out twice"
    );
    assert_eq!(completed.len(), 2 * APPENDS * 2, "every head was completed");
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

/// A raw client on `schema` whose work table holds 100,000 sessions' rows
/// of `agent`, 1% of them (`s100`, `s200`, …) ready at their number and
/// the rest at 1,000,000 + it, and 100,000 rows of `other` ready at their
/// number; analyzed.
async fn filled_work_table(factory: &PgFactory, schema: &str) -> tokio_postgres::Client {
    let client = support::raw_client(factory.url()).await;
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
    client
}

/// Finding ready sessions among 100,000 sessions with rows, 1% of them
/// ready, and 100,000 rows of another consumer all ready, reads about as
/// many work rows as it returns, through `work_ready`, both with the plan
/// for the values bound and with a generic plan (as a cached statement
/// may run). The earliest-ready probe reads one row per consumer (and
/// none for the pauses when nothing is paused).
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_ready_sessions_reads_only_the_rows_returned() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let _store = store_on(&factory, &schema, ManualClock::new(T0)).await;
    let mut client = filled_work_table(&factory, &schema).await;
    let limit: i64 = 9;
    let skip: Vec<String> = vec!["s100".into()];
    let consumers = vec!["agent".to_owned()];
    let now: i64 = 500_000;
    for plan in ["custom", "generic"] {
        let tx = client.transaction().await.expect("begin");
        tx.batch_execute(&format!("SET LOCAL search_path TO \"{schema}\""))
            .await
            .expect("search path");
        let (ready, earliest) = if plan == "custom" {
            let ready = tx
                .query_one(
                    &format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", work_sql::READY),
                    &[&consumers, &now, &skip, &limit],
                )
                .await
                .expect("explain");
            let earliest = tx
                .query_one(
                    &format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", work_sql::EARLIEST),
                    &[&consumers, &now],
                )
                .await
                .expect("explain");
            (ready, earliest)
        } else {
            tx.batch_execute(&format!(
                "SET LOCAL plan_cache_mode = force_generic_plan; \
                 PREPARE ready (text[], bigint, text[], bigint) AS {}; \
                 PREPARE earliest (text[], bigint) AS {}",
                work_sql::READY,
                work_sql::EARLIEST
            ))
            .await
            .expect("prepare");
            let ready = tx
                .query_one(
                    "EXPLAIN (ANALYZE, FORMAT JSON) \
                     EXECUTE ready ('{agent}', 500000, '{s100}', 9)",
                    &[],
                )
                .await
                .expect("explain");
            let earliest = tx
                .query_one(
                    "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE earliest ('{agent}', 500000)",
                    &[],
                )
                .await
                .expect("explain");
            (ready, earliest)
        };
        tx.rollback().await.expect("rollback");
        if plan == "generic" {
            client
                .batch_execute("DEALLOCATE ready; DEALLOCATE earliest")
                .await
                .expect("deallocate");
        }
        for (what, row, most) in [("ready", ready, 12.0), ("earliest", earliest, 1.0)] {
            let json: Value = row.get(0);
            let mut scans = Vec::new();
            let read = work_rows_read(&json[0]["Plan"], &mut scans);
            assert!(
                read <= most,
                "{plan} {what}: read {read} work rows through {scans:?}"
            );
            // The earliest probe's second part joins the consumer's
            // per-session pauses with their pairs' rows: with no pause it
            // reads no row (counted above), whatever index it names.
            let probes = if what == "earliest" {
                &scans[..1]
            } else {
                &scans[..]
            };
            assert_eq!(probes, ["work_ready"], "{plan} {what}: {scans:?}");
        }
    }
    // `claim_work`'s pick, generic plan: the first free ready row, through
    // `work_ready`; its answer without a pick is never run.
    let tx = client.transaction().await.expect("begin");
    tx.batch_execute(&format!(
        "SET LOCAL search_path TO \"{schema}\"; SET LOCAL plan_cache_mode = force_generic_plan; \
         PREPARE pick (text[], bigint, text[], bigint) AS {}",
        work_sql::PICK_MANY
    ))
    .await
    .expect("prepare");
    let row = tx
        .query_one(
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE pick ('{agent}', 500000, '{s100}', 1)",
            &[],
        )
        .await
        .expect("explain");
    tx.rollback().await.expect("rollback");
    client
        .batch_execute("DEALLOCATE pick")
        .await
        .expect("deallocate");
    let json: Value = row.get(0);
    let mut scans = Vec::new();
    let read = work_rows_read(&json[0]["Plan"], &mut scans);
    assert!(
        read <= 2.0,
        "pick: read {read} work rows through {scans:?}: {json}"
    );
    assert_eq!(scans[0], "work_ready", "pick: {scans:?}");
}

/// The ready sessions, or the earliest time when none is ready, in one
/// statement: its rows are the ready read's when something is ready (and
/// its plan reads the same work rows, the earliest probe never run), and
/// the earliest probe's answer when nothing is (one row read); the same
/// for a session list.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_or_earliest_is_one_of_the_two_reads() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let _store = store_on(&factory, &schema, ManualClock::new(T0)).await;
    let mut client = filled_work_table(&factory, &schema).await;
    let consumers = vec!["agent".to_owned()];
    let skip: Vec<String> = vec!["s100".into()];
    let limit: i64 = 9;
    let listed: Vec<String> = ["s5", "s300", "s200", "s100", "s7"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let ids = |rows: &[tokio_postgres::Row]| -> Vec<Option<String>> {
        rows.iter().map(|row| row.get(0)).collect()
    };
    let tx = client.transaction().await.expect("begin");
    tx.batch_execute(&format!("SET LOCAL search_path TO \"{schema}\""))
        .await
        .expect("search path");
    for now in [500_000_i64, 250, 50] {
        let ready = tx
            .query(work_sql::READY, &[&consumers, &now, &skip, &limit])
            .await
            .expect("ready");
        let both = tx
            .query(
                work_sql::READY_OR_EARLIEST,
                &[&consumers, &now, &skip, &limit],
            )
            .await
            .expect("ready or earliest");
        let ready_listed = tx
            .query(
                work_sql::READY_LISTED,
                &[&listed, &consumers, &now, &skip, &limit],
            )
            .await
            .expect("ready listed");
        let both_listed = tx
            .query(
                work_sql::READY_OR_EARLIEST_LISTED,
                &[&listed, &consumers, &now, &skip, &limit],
            )
            .await
            .expect("ready or earliest listed");
        let earliest: Option<i64> = tx
            .query_one(work_sql::EARLIEST, &[&consumers, &now])
            .await
            .expect("earliest")
            .get(0);
        let earliest_listed: Option<i64> = tx
            .query_one(work_sql::EARLIEST_LISTED, &[&listed, &consumers, &now])
            .await
            .expect("earliest listed")
            .get(0);
        for (what, ready, both, earliest, column) in [
            ("every session", &ready, &both, earliest, 3),
            ("listed", &ready_listed, &both_listed, earliest_listed, 2),
        ] {
            if ready.is_empty() {
                assert_eq!(both.len(), 1, "{what} at {now}: one earliest row");
                assert_eq!(both[0].get::<_, Option<String>>(0), None, "{what} at {now}");
                assert_eq!(
                    both[0].get::<_, Option<i64>>(column),
                    earliest,
                    "{what} at {now}: the earliest probe's answer"
                );
                assert!(earliest.is_some(), "{what} at {now}: the fixture has rows");
            } else {
                assert_eq!(ids(both), ids(ready), "{what} at {now}: the ready rows");
            }
        }
        assert_eq!(ready.is_empty(), now == 50, "the fixture at {now}");
    }
    let explain = |statement: &str| format!("EXPLAIN (ANALYZE, FORMAT JSON) {statement}");
    for (now, most) in [(500_000_i64, 12.0), (50, 1.0)] {
        let ready = tx
            .query_one(
                &explain(work_sql::READY),
                &[&consumers, &now, &skip, &limit],
            )
            .await
            .expect("explain ready");
        let both = tx
            .query_one(
                &explain(work_sql::READY_OR_EARLIEST),
                &[&consumers, &now, &skip, &limit],
            )
            .await
            .expect("explain ready or earliest");
        let (mut ready_scans, mut both_scans) = (Vec::new(), Vec::new());
        let ready_read = work_rows_read(&ready.get::<_, Value>(0)[0]["Plan"], &mut ready_scans);
        let both_read = work_rows_read(&both.get::<_, Value>(0)[0]["Plan"], &mut both_scans);
        assert!(
            both_read <= most,
            "at {now}: read {both_read} work rows through {both_scans:?}"
        );
        if now == 500_000 {
            assert_eq!(
                both_read, ready_read,
                "with sessions ready the earliest probe is not run: {both_scans:?}"
            );
        }
    }
    tx.rollback().await.expect("rollback");
}

/// Rows of `cursors` a transaction has read so far: heap tuples fetched
/// through indexes and read by sequential scans (`pg_stat_xact_user_tables`
/// counts the current transaction's reads at once).
async fn cursor_rows_read(tx: &tokio_postgres::Transaction<'_>) -> i64 {
    tx.query_one(
        "SELECT COALESCE(idx_tup_fetch, 0) + COALESCE(seq_tup_read, 0) \
         FROM pg_stat_xact_user_tables WHERE relid = 'cursors'::regclass",
        &[],
    )
    .await
    .expect("read the transaction's table statistics")
    .get(0)
}

/// The work-row rewrite of claims, completions and failures
/// (`rewrite_work`, schema versions 11 and 13) reads a few cursor rows
/// however many heads the pair holds: in a session with 400 claimable
/// heads, 100 under lease, 20 dead letters and 50 finished cursors it reads
/// at most 10 (1 to 3; version 8's read 520, or 725 after `ANALYZE`),
/// before and after `ANALYZE`, and stores what the work rule says:
/// claimable (ready now; since version 13 the busy and dead-letter probes
/// are skipped then, and reported as 0), busy only (ready when the first
/// lease ends), dead letters only.
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_rewrite_reads_a_few_heads_whatever_the_backlog() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = store_on(&factory, &schema, clock.clone()).await;
    let lease = 60_000;
    // `big`: 570 heads; 170 claimed, of which 50 completed and 20
    // dead-lettered. `leased`: every head claimed. `dead`: every head
    // dead-lettered.
    for (session, heads) in [("big", 570), ("leased", 30), ("dead", 5)] {
        for _ in 0..heads / 5 {
            let batch = (0..5).map(|_| targeted("agent")).collect();
            store
                .append(session, batch, AppendOptions::default())
                .await
                .expect("append");
        }
    }
    for (session, claims) in [("big", 170), ("leased", 30), ("dead", 5)] {
        let claimed = store
            .claim_available(ClaimRequest {
                session_id: session.into(),
                holder: "w".into(),
                ttl_ms: Some(lease),
                limit: Some(claims),
                ..ClaimRequest::default()
            })
            .await
            .expect("claim")
            .into_heads();
        assert_eq!(claimed.len(), claims, "{session}: heads claimed");
        for (n, head) in claimed.iter().enumerate() {
            if session == "dead" || (session == "big" && n < 20) {
                store
                    .fail_attempt(FailRequest::for_head(head, "down", 1))
                    .await
                    .expect("dead-letter");
            } else if session == "big" && n < 70 {
                store
                    .complete_attempt(complete(session, head))
                    .await
                    .expect("complete");
            }
        }
    }
    drop(store);
    let mut client = support::raw_client(factory.url()).await;
    let consumers = vec!["agent".to_owned()];
    for analyzed in [false, true] {
        if analyzed {
            client
                .batch_execute(&format!("ANALYZE \"{schema}\".cursors"))
                .await
                .expect("analyze");
        }
        for (session, claimable, busy, dead, new_at) in [
            ("big", 1i64, 0i64, 0i64, Some(T0)),
            ("leased", 0, 1, 0, Some(T0 + lease)),
            ("dead", 0, 0, 1, None),
        ] {
            let tx = client.transaction().await.expect("begin");
            tx.batch_execute(&format!("SET LOCAL search_path TO \"{schema}\""))
                .await
                .expect("search path");
            let before = cursor_rows_read(&tx).await;
            let row = tx
                .query_one(
                    "SELECT r_claimable, r_busy, r_dead, r_keep, r_new_at \
                     FROM rewrite_work($1, $2, $3, true)",
                    &[&session, &consumers, &T0],
                )
                .await
                .expect("rewrite");
            let read = cursor_rows_read(&tx).await - before;
            tx.rollback().await.expect("rollback");
            let got: (i64, i64, i64, bool, Option<i64>) =
                (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
            assert_eq!(
                got,
                (claimable, busy, dead, true, new_at),
                "{session} (analyzed: {analyzed}): summary and stored row"
            );
            assert!(
                read <= 10,
                "{session} (analyzed: {analyzed}): the rewrite read {read} cursor rows"
            );
        }
    }
}

/// A claimer that finds a session's work rows held by another claimer
/// (`TRY_LOCK` passes over them) locks none of its heads with the
/// statements it sends after that lock in the same round trip: the
/// promotion's selection and the walk find nothing while the row is held,
/// and find the heads once it is free. (Before, the walk locked the free
/// head, so the holder's own walk skipped it, took nothing and answered
/// `Busy`, and both claimers left the work.)
#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimer_passing_a_held_session_locks_none_of_its_heads() {
    let Some(factory) = PgFactory::from_env("work") else {
        return;
    };
    let schema = factory.schema();
    let clock = ManualClock::new(T0);
    let store = store_on(&factory, &schema, clock.clone()).await;
    // Heads 1 (failed, retry at once) and 2 (its lease ended) due for
    // promotion, head 3 idle.
    store
        .append(
            "s",
            vec![targeted("agent"), targeted("agent")],
            AppendOptions::default(),
        )
        .await
        .expect("append");
    let leased = store
        .claim_available(ClaimRequest {
            session_id: "s".into(),
            holder: "w".into(),
            ttl_ms: Some(1_000),
            limit: Some(2),
            ..ClaimRequest::default()
        })
        .await
        .expect("claim")
        .into_heads();
    assert_eq!(leased.len(), 2);
    store
        .fail_attempt(FailRequest {
            retry_after_ms: Some(0),
            ..FailRequest::for_head(&leased[0], "again", None)
        })
        .await
        .expect("release head 1");
    store
        .append("s", vec![targeted("agent")], AppendOptions::default())
        .await
        .expect("append an idle head");
    clock.advance(2_000);
    let now = clock.now_ms();
    drop(store);
    let mut holder = support::raw_client(factory.url()).await;
    let mut claimer = support::raw_client(factory.url()).await;
    let consumers: Option<Vec<String>> = Some(vec!["agent".to_owned()]);
    let walk = claim_sql::walk("c.head");
    let none_text: Vec<String> = Vec::new();
    let none_slot: Vec<i64> = Vec::new();
    let through: Option<i64> = None;
    let limit: Option<i64> = None;
    for held in [true, false] {
        let hold = holder.transaction().await.expect("begin the holder");
        hold.batch_execute(&format!("SET LOCAL search_path TO \"{schema}\""))
            .await
            .expect("search path");
        if held {
            hold.execute("SELECT 1 FROM work WHERE session_id = 's' FOR UPDATE", &[])
                .await
                .expect("hold the work row");
        }
        let tx = claimer.transaction().await.expect("begin the claimer");
        tx.batch_execute(&format!("SET LOCAL search_path TO \"{schema}\""))
            .await
            .expect("search path");
        let locked = tx
            .query(work_sql::TRY_LOCK, &[&"s", &consumers, &now])
            .await
            .expect("try the lock");
        let taken = locked
            .iter()
            .filter(|row| row.get::<_, Option<&str>>(0).is_some())
            .count();
        assert_eq!(taken, usize::from(!held), "work rows locked (held: {held})");
        let due: Vec<i64> = tx
            .query(claim_sql::DUE, &[&"s", &now])
            .await
            .expect("due heads")
            .iter()
            .map(|row| row.get::<_, i64>(2))
            .collect();
        let walked: Vec<i64> = tx
            .query(
                walk.as_str(),
                &[
                    &"s", &through, &consumers, &none_text, &none_text, &none_slot, &now, &limit,
                ],
            )
            .await
            .expect("walk")
            .iter()
            .map(|row| row.get::<_, i64>(0))
            .collect();
        if held {
            assert_eq!(
                (due, walked),
                (vec![], vec![]),
                "nothing locked past a held row"
            );
        } else {
            assert_eq!(
                (due, walked),
                (vec![1, 2], vec![3]),
                "the due heads and the idle one"
            );
        }
        tx.rollback().await.expect("rollback the claimer");
        hold.rollback().await.expect("rollback the holder");
    }
}
