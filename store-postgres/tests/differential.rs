//! The differential model test: random operation sequences run against the
//! in-memory reference and PostgreSQL side by side, on the same manual clock
//! and id sequence; every result (value, or error code) must be equal, and
//! so must every cursor listing along the way. Runs only when
//! `A2_POSTGRES_URL` is set.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use a2_store_api::{
    AppendOptions, BulkRedrive, Cause, ClaimRequest, ClaimResult, ClearRequest, Clock,
    CompleteRequest, ConsumerDeclaration, CounterIds, CursorRef, FailRequest, ForkRequest, Head,
    HeldClaim, ListSessions, ManualClock, NewEvent, NotBefore, PauseRequest, PresenceMeta,
    ReadOptions, ReadStateOptions, RedriveAction, RedriveRequest, RenewRequest, RescheduleRequest,
    Result, ResumeRequest, ScheduleChange, StateWrite, Store, Target,
};
use a2_store_memory::{MemoryOptions, MemoryStore};
use serde::Serialize;
use serde_json::{json, Value};
use support::PgFactory;

/// A small deterministic generator (xorshift64*), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(usize::try_from(self.below(items.len() as u64)).unwrap())
        }
    }
}

fn outcome<T: Serialize>(result: &Result<T>) -> Value {
    let mut value = match result {
        Ok(value) => json!({ "ok": value }),
        Err(error) => json!({ "err": error.code().as_str() }),
    };
    without_incarnations(&mut value);
    value
}

/// Drops every `incarnation` field: each store numbers its sessions its
/// own way (PostgreSQL from a sequence of the schema, drawn also for rows
/// made only to be locked), and this run deletes no session, so the
/// numbers say nothing the other fields do not (`a2-differential`
/// compares them by order of appearance, deletes included).
fn without_incarnations(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.remove("incarnation");
            fields.values_mut().for_each(without_incarnations);
        }
        Value::Array(items) => items.iter_mut().for_each(without_incarnations),
        _ => {}
    }
}

const SESSIONS: [&str; 2] = ["s0", "s1"];

fn consumers(rng: &mut Rng) -> Option<Vec<ConsumerDeclaration>> {
    if !rng.chance(35) {
        return None;
    }
    let types = if rng.chance(50) {
        None
    } else {
        Some(vec!["t1".to_owned()])
    };
    let mut list = vec![ConsumerDeclaration::log(
        "log",
        "LOG",
        types,
        rng.chance(50),
    )];
    if rng.chance(60) {
        list.push(ConsumerDeclaration::targeted("a"));
    }
    if rng.chance(30) {
        list.push(ConsumerDeclaration::targeted("b"));
    }
    Some(list)
}

/// A not-before for a target, sometimes: a time around `now` (some
/// already reached) or a delay.
fn not_before(rng: &mut Rng, now: i64) -> Option<NotBefore> {
    match rng.below(10) {
        0 => Some(NotBefore::AtMs(
            now + i64::try_from(rng.below(2_000)).unwrap() - 500,
        )),
        1 => Some(NotBefore::AfterMs(i64::try_from(rng.below(1_500)).unwrap())),
        _ => None,
    }
}

fn new_events(rng: &mut Rng, heads: &[Head], count: u64, now: i64) -> Vec<NewEvent> {
    (0..count)
        .map(|_| {
            let kind = if rng.chance(50) { "t1" } else { "t2" };
            let mut event = NewEvent::new(kind, json!(rng.below(3)));
            if rng.chance(50) {
                event = event.with_id(format!("e{}", rng.below(40)));
            }
            if rng.chance(40) {
                let mut target = Target::event("a");
                target.not_before = not_before(rng, now);
                event = event.with_target(target);
            }
            if rng.chance(40) {
                let lane = if rng.chance(50) { "L1" } else { "L2" };
                let mut target = Target::lane("b", lane);
                target.not_before = not_before(rng, now);
                event = event.with_target(target);
            }
            if rng.chance(3) {
                event = event.with_target(Target::lane("log", "LOG"));
            }
            if rng.chance(8) {
                if let Some(head) = rng.pick(heads) {
                    event = event.with_cause(head.cause());
                }
            }
            event
        })
        .collect()
}

fn cause_of(rng: &mut Rng, heads: &[Head]) -> Option<Cause> {
    let head = rng.pick(heads)?;
    let mut cause = head.cause();
    if rng.chance(15) {
        cause.attempt += 1;
    }
    Some(cause)
}

async fn run_seed(seed: u64, memory: &MemoryStore, postgres: &dyn Store, clock: &ManualClock) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut heads: Vec<Head> = Vec::new();
    let mut dead: Vec<Head> = Vec::new();
    for step in 0..500 {
        let session = SESSIONS[usize::try_from(rng.below(2)).unwrap()].to_owned();
        let mine: Vec<Head> = heads
            .iter()
            .filter(|h| h.event.session_id == session)
            .cloned()
            .collect();
        let op = rng.below(112);
        let (name, expected, actual) = match op {
            0..=24 => {
                let count = 1 + rng.below(3);
                let events = new_events(&mut rng, &mine, count, clock.now_ms());
                let options = AppendOptions {
                    consumers: consumers(&mut rng),
                    origin_index: rng.chance(10).then(|| rng.below(12)),
                };
                let m = memory
                    .append(&session, events.clone(), options.clone())
                    .await;
                let p = postgres.append(&session, events, options).await;
                ("append", outcome(&m), outcome(&p))
            }
            25..=44 => {
                let exclude = if rng.chance(15) {
                    rng.pick(&mine).map(Head::cursor_ref).into_iter().collect()
                } else {
                    Vec::new()
                };
                let (ttl_ms, expires_at_ms) = if rng.chance(80) {
                    (Some(1000), None)
                } else {
                    (None, Some(clock.now_ms() + 700))
                };
                let request = ClaimRequest {
                    session_id: session.clone(),
                    holder: if rng.chance(50) { "w1" } else { "w2" }.to_owned(),
                    ttl_ms,
                    expires_at_ms,
                    exclude,
                    consumers: consumers(&mut rng),
                    max_failures: rng.chance(50).then_some(2),
                    through: rng.chance(10).then(|| rng.below(10)),
                    limit: rng.chance(30).then(|| 1 + rng.below(2) as usize),
                };
                let m = memory.claim_available(request.clone()).await;
                let p = postgres.claim_available(request).await;
                if let Ok(ClaimResult::Claimed {
                    heads: claimed,
                    dead_lettered,
                    ..
                }) = &m
                {
                    heads.extend(claimed.iter().cloned());
                    dead.extend(dead_lettered.iter().cloned());
                }
                ("claim", outcome(&m), outcome(&p))
            }
            45..=59 => {
                let Some(head) = rng.pick(&mine).cloned() else {
                    continue;
                };
                let count = rng.below(3);
                let mut events = new_events(&mut rng, &[], count, clock.now_ms());
                for event in &mut events {
                    event.cause = None;
                }
                let request = CompleteRequest {
                    incarnation: None,
                    session_id: session.clone(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count + u32::from(rng.chance(10)),
                    events,
                    consumers: consumers(&mut rng),
                };
                let m = memory.complete_attempt(request.clone()).await;
                let p = postgres.complete_attempt(request).await;
                ("complete", outcome(&m), outcome(&p))
            }
            60..=66 => {
                let Some(head) = rng.pick(&mine).cloned() else {
                    continue;
                };
                let request = FailRequest {
                    incarnation: None,
                    session_id: session.clone(),
                    consumer: head.consumer.clone(),
                    lane: head.lane.clone(),
                    index: head.event.index,
                    attempt: head.dispatch.attempt_count,
                    error: "boom".to_owned(),
                    max_failures: rng.chance(60).then_some(2),
                    retry_after_ms: rng.chance(30).then_some(500),
                };
                let m = memory.fail_attempt(request.clone()).await;
                let p = postgres.fail_attempt(request).await;
                ("fail", outcome(&m), outcome(&p))
            }
            67..=71 => {
                let claims: Vec<HeldClaim> = (0..1 + rng.below(2))
                    .filter_map(|_| rng.pick(&mine).cloned())
                    .map(|head| HeldClaim {
                        cursor: head.cursor_ref(),
                        attempt: head.dispatch.attempt_count,
                    })
                    .collect();
                let request = RenewRequest {
                    incarnation: None,
                    session_id: session.clone(),
                    holder: if rng.chance(50) { "w1" } else { "w2" }.to_owned(),
                    claims,
                    ttl_ms: Some(2000),
                    expires_at_ms: None,
                };
                let m = memory.renew_claims(request.clone()).await;
                let p = postgres.renew_claims(request).await;
                ("renew", outcome(&m), outcome(&p))
            }
            72..=74 => {
                let request = ClearRequest {
                    incarnation: None,
                    session_id: session.clone(),
                    if_last_index: rng.chance(30).then(|| rng.below(15)),
                    cause: if rng.chance(20) {
                        cause_of(&mut rng, &mine)
                    } else {
                        None
                    },
                };
                let m = memory.clear(request.clone()).await;
                let p = postgres.clear(request).await;
                ("clear", outcome(&m), outcome(&p))
            }
            75..=76 => {
                let m = memory.reclaim(&session).await;
                let p = postgres.reclaim(&session).await;
                ("reclaim", outcome(&m), outcome(&p))
            }
            77..=79 => {
                let target = rng.pick(&dead).cloned();
                let (consumer, index) = match target {
                    Some(head) if head.event.session_id == session => {
                        (head.consumer, head.event.index)
                    }
                    _ => ("a".to_owned(), rng.below(10)),
                };
                let lane = match rng.below(4) {
                    0 => Some("L1".to_owned()),
                    1 => Some("L2".to_owned()),
                    _ => None,
                };
                let request = RedriveRequest {
                    incarnation: None,
                    lane,
                    session_id: session.clone(),
                    consumer,
                    index,
                    action: if rng.chance(50) {
                        RedriveAction::Retry
                    } else {
                        RedriveAction::Skip
                    },
                    consumers: consumers(&mut rng),
                };
                let m = memory.redrive(request.clone()).await;
                let p = postgres.redrive(request).await;
                ("redrive", outcome(&m), outcome(&p))
            }
            80..=82 => {
                let declaration = consumers(&mut rng)
                    .and_then(|list| list.into_iter().next())
                    .unwrap_or_else(|| ConsumerDeclaration::log("log", "LOG", None, true));
                let m = memory.wake_log(&session, &declaration).await;
                let p = postgres.wake_log(&session, &declaration).await;
                ("wake_log", outcome(&m), outcome(&p))
            }
            83..=86 => {
                let writes: Vec<StateWrite> = (0..1 + rng.below(2))
                    .map(|_| StateWrite {
                        index: rng.below(12),
                        state: json!({"n": rng.below(100)}),
                        pins: rng.pick(&mine).map(Head::cursor_ref).into_iter().collect(),
                    })
                    .collect();
                let m = memory.write_state(&session, "r", writes.clone()).await;
                let p = postgres.write_state(&session, "r", writes).await;
                ("write_state", outcome(&m), outcome(&p))
            }
            87..=89 => {
                let options = ReadStateOptions {
                    at: rng.chance(60).then(|| rng.below(12)),
                };
                let m = memory.read_state(&session, "r", options).await;
                let p = postgres.read_state(&session, "r", options).await;
                ("read_state", outcome(&m), outcome(&p))
            }
            90..=91 => {
                let mut values = BTreeMap::new();
                let value = if rng.chance(25) {
                    Value::Null
                } else {
                    json!(rng.below(5))
                };
                values.insert(format!("f{}", rng.below(2)), value);
                let meta = PresenceMeta {
                    at: clock.now_ms() - i64::try_from(rng.below(3)).unwrap(),
                    seen: rng.chance(50).then(|| rng.below(9)),
                    ttl_ms: 800,
                };
                let participant = if rng.chance(50) { "p1" } else { "p2" };
                let m = memory
                    .set_presence(&session, participant, values.clone(), meta)
                    .await;
                let p = postgres
                    .set_presence(&session, participant, values, meta)
                    .await;
                ("set_presence", outcome(&m), outcome(&p))
            }
            92 => {
                let m = memory.read_presence(&session).await;
                let p = postgres.read_presence(&session).await;
                ("read_presence", outcome(&m), outcome(&p))
            }
            93..=95 => {
                clock.advance(i64::try_from(rng.below(1500)).unwrap());
                continue;
            }
            96 => {
                let m = memory.dead_letters(&session).await;
                let p = postgres.dead_letters(&session).await;
                ("dead_letters", outcome(&m), outcome(&p))
            }
            97 => {
                let options = ReadOptions {
                    after: Some(rng.below(6)),
                    through: rng.chance(50).then(|| rng.below(14)),
                    limit: rng.chance(30).then(|| rng.below(4) as usize),
                };
                let m = memory.read(&session, options).await;
                let p = postgres.read(&session, options).await;
                ("read", outcome(&m), outcome(&p))
            }
            100..=102 => {
                let (lane, consumer) = match rng.below(4) {
                    0 => (None, "a"),
                    1 => (Some("L1"), "b"),
                    2 => (Some("L2"), "b"),
                    _ => (Some("LOG"), "log"),
                };
                let change = match rng.below(3) {
                    0 => ScheduleChange::Cancel,
                    _ => ScheduleChange::To(
                        not_before(&mut rng, clock.now_ms()).unwrap_or(NotBefore::AtMs(0)),
                    ),
                };
                let mut request =
                    RescheduleRequest::new(session.clone(), consumer, lane, rng.below(12), change);
                if rng.chance(10) {
                    request.cause = cause_of(&mut rng, &mine);
                }
                let m = memory.reschedule(request.clone()).await;
                let p = postgres.reschedule(request).await;
                ("reschedule", outcome(&m), outcome(&p))
            }
            103..=104 => {
                let consumer = if rng.chance(50) { "a" } else { "b" };
                let mut request = if rng.chance(70) {
                    PauseRequest::in_session(consumer, session.clone())
                } else {
                    PauseRequest::everywhere(consumer)
                };
                if rng.chance(50) {
                    request.until_ms =
                        Some(clock.now_ms() + i64::try_from(rng.below(2_000)).unwrap() - 200);
                }
                let m = memory.pause(request.clone()).await;
                let p = postgres.pause(request).await;
                ("pause", outcome(&m), outcome(&p))
            }
            105..=106 => {
                let consumer = if rng.chance(50) { "a" } else { "b" };
                let request = if rng.chance(70) {
                    ResumeRequest::in_session(consumer, session.clone())
                } else {
                    ResumeRequest::everywhere(consumer)
                };
                let m = memory.resume(request.clone()).await;
                let p = postgres.resume(request).await;
                ("resume", outcome(&m), outcome(&p))
            }
            107 => {
                let scope = rng.chance(50).then_some(session.as_str());
                let m = memory.pauses(scope).await;
                let p = postgres.pauses(scope).await;
                ("pauses", outcome(&m), outcome(&p))
            }
            108..=109 => {
                let action = if rng.chance(50) {
                    RedriveAction::Retry
                } else {
                    RedriveAction::Skip
                };
                let mut request = BulkRedrive::new(action);
                request.limit = Some(1 + rng.below(3) as usize);
                if rng.chance(40) {
                    request.session_id = Some(session.clone());
                }
                if rng.chance(30) {
                    request.consumer = Some(if rng.chance(50) { "a" } else { "b" }.to_owned());
                }
                if rng.chance(20) {
                    request.lane = Some("L1".to_owned());
                }
                let m = memory.redrive_all(request.clone()).await;
                let p = postgres.redrive_all(request).await;
                ("redrive_all", outcome(&m), outcome(&p))
            }
            110 => {
                let into = format!("f{}", rng.below(3));
                let mut request = ForkRequest::new(session.clone(), into);
                if rng.chance(50) {
                    request.through = Some(rng.below(12));
                }
                let m = memory.fork(request.clone()).await;
                let p = postgres.fork(request).await;
                ("fork", outcome(&m), outcome(&p))
            }
            _ => {
                let m = memory.sessions(ListSessions::default()).await;
                let p = postgres.sessions(ListSessions::default()).await;
                ("sessions", outcome(&m), outcome(&p))
            }
        };
        assert_eq!(
            actual, expected,
            "seed {seed} step {step}: {name} on {session} differs (left: postgres, right: memory)"
        );
        let m = memory.cursors(&session).await;
        let p = postgres.cursors(&session).await;
        assert_eq!(
            outcome(&p),
            outcome(&m),
            "seed {seed} step {step}: cursors of {session} differ after {name}"
        );
    }
    let _ = CursorRef::new("unused", None, 0);
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_match_the_reference() {
    let Some(factory) = PgFactory::from_env("differential") else {
        return;
    };
    for seed in 1..=8_u64 {
        let clock = ManualClock::new(1_700_000_000_000);
        let memory = MemoryStore::with_options(MemoryOptions {
            clock: Arc::new(clock.clone()),
            ids: Arc::new(CounterIds::new("g")),
        });
        let schema = factory.schema();
        let postgres = factory
            .store_on(
                &schema,
                Arc::new(clock.clone()),
                Arc::new(CounterIds::new("g")),
            )
            .await
            .expect("connect");
        run_seed(seed, &memory, &postgres, &clock).await;
        assert_work_rows_match_heads(factory.url(), &schema, seed).await;
    }
}

/// The work rows `has_pending` reads must say what the cursors hold after
/// every random sequence: a pair with a live head has a row with a
/// `ready_at`, a pair with dead letters only a row without one, and a pair
/// with no unfinished head no row.
async fn assert_work_rows_match_heads(url: &str, schema: &str, seed: u64) {
    let client = support::raw_client(url).await;
    let sql = format!(
        "SELECT coalesce(w.session_id, c.session_id), coalesce(w.consumer, c.consumer), \
           w.session_id IS NOT NULL, w.ready_at IS NOT NULL, \
           coalesce(c.live, 0), coalesce(c.dead, 0) \
         FROM \"{schema}\".work w \
         FULL JOIN (SELECT session_id, consumer, \
             count(*) FILTER (WHERE failed_at IS NULL) AS live, \
             count(*) FILTER (WHERE failed_at IS NOT NULL) AS dead \
           FROM \"{schema}\".cursors WHERE head IS NOT NULL GROUP BY session_id, consumer) c \
           ON c.session_id = w.session_id AND c.consumer = w.consumer"
    );
    let rows = client.query(&sql, &[]).await.expect("read the rows");
    assert!(!rows.is_empty(), "seed {seed}: some cursor had a head once");
    for row in rows {
        let (session, consumer): (String, String) = (row.get(0), row.get(1));
        let (stored, ready): (bool, bool) = (row.get(2), row.get(3));
        let (live, dead): (i64, i64) = (row.get(4), row.get(5));
        assert_eq!(
            (stored, ready),
            (live + dead > 0, live > 0),
            "seed {seed}: {consumer} in {session} has {live} live and {dead} dead heads \
             but its work row is stored: {stored}, ready: {ready}"
        );
    }
}
