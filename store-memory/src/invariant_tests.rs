//! Randomised tests: after every operation the indexes must equal a
//! brute-force recomputation, claims must equal a brute-force scan of the
//! cursors, and a failed call must change nothing.

use std::collections::HashSet;
use std::sync::Arc;

use a2_store_api::{
    pause, AppendOptions, BulkRedrive, Cause, ClaimRequest, ClaimResult, ClearRequest, Clock,
    CompleteRequest, ConsumerDeclaration, CounterIds, FailRequest, Head, HeldClaim, ManualClock,
    NewEvent, NotBefore, Pause, PauseRequest, ReadOptions, RedriveAction, RedriveRequest,
    RenewRequest, RescheduleRequest, RescheduleResult, ResumeRequest, ScheduleChange, StateWrite,
    Store, Target,
};
use serde_json::json;

use crate::cursor::CursorState;
use crate::session::Session;
use crate::{MemoryOptions, MemoryStore};

/// A small deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len() as u64) as usize)
        }
    }
}

const SESSION: &str = "s";
const CONSUMERS: [&str; 3] = ["a", "b", "c"];

fn log_consumer(rng: &mut Rng) -> ConsumerDeclaration {
    let types = match rng.below(3) {
        0 => None,
        1 => Some(vec!["t1".to_owned()]),
        _ => Some(vec!["t1".to_owned(), "t2".to_owned()]),
    };
    ConsumerDeclaration::log("logger", "log", types, rng.chance(50))
}

fn random_consumers(rng: &mut Rng) -> Option<Vec<ConsumerDeclaration>> {
    if rng.chance(60) {
        return None;
    }
    let mut list: Vec<ConsumerDeclaration> = CONSUMERS
        .iter()
        .filter(|_| rng.chance(50))
        .map(|name| ConsumerDeclaration::targeted(*name))
        .collect();
    if rng.chance(50) {
        list.push(log_consumer(rng));
    }
    Some(list)
}

fn random_events(rng: &mut Rng, ids: &mut u64) -> Vec<NewEvent> {
    (0..1 + rng.below(3))
        .map(|_| {
            let event_type = if rng.chance(50) { "t1" } else { "t2" };
            let mut event = NewEvent::new(event_type, json!(rng.below(4)));
            if rng.chance(40) {
                // A small id pool makes replays and partial duplicates happen.
                event = event.with_id(format!("id{}", rng.below(*ids + 1)));
            } else if rng.chance(30) {
                *ids += 1;
                event = event.with_id(format!("id{ids}"));
            }
            for _ in 0..rng.below(3) {
                let consumer = *rng.pick(&CONSUMERS).unwrap_or(&"a");
                let target = match rng.below(4) {
                    0 => Target::event(consumer),
                    1 => Target::lane(consumer, "L1"),
                    2 => Target::lane(consumer, "L2"),
                    // Sometimes a target on the log consumer's lane: a conflict.
                    _ if rng.chance(20) => Target::lane("logger", "log"),
                    _ => Target::event(consumer),
                };
                // Some targets are scheduled: a delay, or a time that may
                // already have passed (the clock starts at 1000).
                let target = match rng.below(5) {
                    0 => target.delayed(std::time::Duration::from_millis(rng.below(40))),
                    1 => target.not_before_ms(900 + rng.below(300) as i64),
                    _ => target,
                };
                event = event.with_target(target);
            }
            event
        })
        .collect()
}

/// What a failed call must leave untouched.
/// A store on a manual clock at `now` with counter ids `<prefix>1`,
/// `<prefix>2`, ..., and the clock that drives it.
fn store_at(now: i64, prefix: &str) -> (ManualClock, MemoryStore) {
    let clock = ManualClock::new(now);
    let store = MemoryStore::with_options(MemoryOptions {
        clock: Arc::new(clock.clone()),
        ids: Arc::new(CounterIds::new(prefix)),
    });
    (clock, store)
}

async fn fingerprint(store: &MemoryStore) -> String {
    let cursors = store.cursors(SESSION).await.unwrap();
    let rows = store.read(SESSION, ReadOptions::default()).await.unwrap();
    let dead = store.dead_letters(SESSION).await.unwrap();
    let pauses = store.pauses(None).await.unwrap();
    let queues = store.inspect(SESSION, |s| {
        s.cursors
            .iter()
            .map(|c| c.queue.iter().copied().collect::<Vec<_>>())
            .collect::<Vec<_>>()
    });
    format!("{cursors:?}\n{rows:?}\n{dead:?}\n{pauses:?}\n{queues:?}")
}

type HeadId = (u64, String, Option<String>);

fn head_id(head: &Head) -> HeadId {
    (head.event.index, head.consumer.clone(), head.lane.clone())
}

fn cursor_id(cursor: &CursorState) -> HeadId {
    (
        cursor.head.unwrap_or(0),
        cursor.consumer.to_string(),
        cursor.lane.as_deref().map(str::to_owned),
    )
}

/// The claim a brute-force scan of every cursor predicts.
enum Expected {
    Claimed(Vec<HeadId>, Vec<HeadId>),
    Busy(i64),
    Settled,
}

fn expected_claim(
    session: &Session,
    now: i64,
    request: &ClaimRequest,
    pauses: &[Pause],
) -> Expected {
    let served: Option<HashSet<&str>> = request
        .consumers
        .as_ref()
        .map(|list| list.iter().map(|c| c.name.as_str()).collect());
    let excluded = |cursor: &CursorState| {
        request.exclude.iter().any(|ex| {
            ex.consumer == *cursor.consumer
                && ex.lane.as_deref() == cursor.lane.as_deref()
                && (ex.lane.is_some() || Some(ex.index) == cursor.head)
        })
    };
    let mut candidates: Vec<&CursorState> = session
        .cursors
        .iter()
        .filter(|c| c.head.is_some() && c.dispatch.failed_at.is_none())
        .filter(|c| served.as_ref().is_none_or(|s| s.contains(&*c.consumer)))
        .filter(|c| c.head <= Some(request.through.unwrap_or(u64::MAX)))
        .filter(|c| !excluded(c))
        .collect();
    candidates.sort_by_key(|c| cursor_id(c));
    let mut claims = Vec::new();
    let mut dead = Vec::new();
    let mut busy: Option<i64> = None;
    for cursor in candidates {
        let hold = pause::hold(pauses, &cursor.consumer, SESSION, now);
        if hold.hides() {
            continue;
        }
        if let Some(expiry) = cursor.dispatch.busy_until_held(now, hold) {
            busy = Some(busy.map_or(expiry, |b| b.min(expiry)));
            continue;
        }
        if claims.len() >= request.limit.unwrap_or(usize::MAX) {
            break;
        }
        let dies = cursor.dispatch.claim_holder.is_some()
            && request
                .max_failures
                .is_some_and(|max| cursor.dispatch.failure_count + 1 >= max);
        if dies {
            dead.push(cursor_id(cursor));
        } else {
            claims.push(cursor_id(cursor));
        }
    }
    if !claims.is_empty() || !dead.is_empty() {
        Expected::Claimed(claims, dead)
    } else if let Some(retry_at) = busy {
        Expected::Busy(retry_at)
    } else {
        Expected::Settled
    }
}

/// How much of the contract a random run exercised.
#[derive(Debug, Default)]
struct Coverage {
    claimed: usize,
    dead_lettered: usize,
    busy: usize,
    settled: usize,
    errors: usize,
    log_heads: usize,
    rescheduled: usize,
    cancelled: usize,
    bulk_redriven: usize,
    claims_under_pause: usize,
}

async fn run_random(seed: u64, steps: usize, coverage: &mut Coverage) {
    let (clock, store) = store_at(1_000, "gen");
    let mut rng = Rng(seed);
    let mut next_id = 0;
    let mut held: Vec<Head> = Vec::new();
    for step in 0..steps {
        let before = fingerprint(&store).await;
        let op = rng.below(17);
        let failed = match op {
            0..=3 => {
                let events = random_events(&mut rng, &mut next_id);
                let consumers = random_consumers(&mut rng);
                let origin_index = rng.chance(10).then(|| rng.below(5));
                store
                    .append(
                        SESSION,
                        events,
                        AppendOptions {
                            consumers,
                            origin_index,
                        },
                    )
                    .await
                    .err()
            }
            4..=6 => {
                let head = store.inspect(SESSION, |s| s.log.head());
                let exclude = match rng.pick(&held) {
                    Some(h) if rng.chance(30) => vec![h.cursor_ref()],
                    _ => Vec::new(),
                };
                let request = ClaimRequest {
                    session_id: SESSION.into(),
                    holder: format!("w{}", rng.below(2)),
                    ttl_ms: Some(1 + rng.below(40) as i64),
                    exclude,
                    consumers: random_consumers(&mut rng),
                    max_failures: rng.chance(50).then(|| 1 + rng.below(3) as u32),
                    through: rng.chance(20).then(|| rng.below(head + 2)),
                    limit: rng.chance(30).then(|| 1 + rng.below(3) as usize),
                    expires_at_ms: None,
                };
                let now = clock.now_ms();
                let pauses = store.pauses(None).await.unwrap();
                if !pauses.is_empty() {
                    coverage.claims_under_pause += 1;
                }
                let expected =
                    store.inspect(SESSION, |s| expected_claim(s, now, &request, &pauses));
                let result = store.claim_available(request).await.unwrap();
                match (expected, result) {
                    (
                        Expected::Claimed(claims, dead),
                        ClaimResult::Claimed {
                            heads,
                            dead_lettered,
                            ..
                        },
                    ) => {
                        let got: Vec<HeadId> = heads.iter().map(head_id).collect();
                        let got_dead: Vec<HeadId> = dead_lettered.iter().map(head_id).collect();
                        assert_eq!(got, claims, "seed {seed} step {step}: claimed heads");
                        assert_eq!(got_dead, dead, "seed {seed} step {step}: dead letters");
                        coverage.claimed += got.len();
                        coverage.dead_lettered += got_dead.len();
                        coverage.log_heads +=
                            heads.iter().filter(|h| h.consumer == "logger").count();
                        held.extend(heads);
                    }
                    (Expected::Busy(at), ClaimResult::Busy { retry_at }) => {
                        assert_eq!(retry_at, at, "seed {seed} step {step}: retry_at");
                        coverage.busy += 1;
                    }
                    (Expected::Settled, ClaimResult::Settled) => coverage.settled += 1,
                    (_, other) => panic!("seed {seed} step {step}: unexpected {other:?}"),
                }
                None
            }
            7 | 8 => {
                let Some(head) = rng.pick(&held).cloned() else {
                    continue;
                };
                let events = if rng.chance(50) {
                    random_events(&mut rng, &mut next_id)
                } else {
                    Vec::new()
                };
                store
                    .complete_attempt(CompleteRequest {
                        incarnation: None,
                        session_id: SESSION.into(),
                        consumer: head.consumer.clone(),
                        lane: head.lane.clone(),
                        index: head.event.index,
                        attempt: head.dispatch.attempt_count,
                        events,
                        consumers: random_consumers(&mut rng),
                    })
                    .await
                    .err()
            }
            9 => {
                let Some(head) = rng.pick(&held).cloned() else {
                    continue;
                };
                store
                    .fail_attempt(FailRequest {
                        incarnation: None,
                        session_id: SESSION.into(),
                        consumer: head.consumer.clone(),
                        lane: head.lane.clone(),
                        index: head.event.index,
                        attempt: head.dispatch.attempt_count,
                        error: "boom".into(),
                        max_failures: rng.chance(50).then(|| 1 + rng.below(3) as u32),
                        retry_after_ms: rng.chance(50).then(|| rng.below(20) as i64),
                    })
                    .await
                    .err()
            }
            10 => {
                let claims: Vec<HeldClaim> = held
                    .iter()
                    .filter(|_| rng.chance(50))
                    .map(|h| HeldClaim {
                        cursor: h.cursor_ref(),
                        attempt: h.dispatch.attempt_count,
                    })
                    .collect();
                store
                    .renew_claims(RenewRequest {
                        incarnation: None,
                        session_id: SESSION.into(),
                        holder: format!("w{}", rng.below(2)),
                        claims,
                        ttl_ms: Some(1 + rng.below(40) as i64),
                        expires_at_ms: None,
                    })
                    .await
                    .err()
            }
            11 => {
                let dead = store.dead_letters(SESSION).await.unwrap();
                let Some(head) = rng.pick(&dead) else {
                    continue;
                };
                let action = if rng.chance(50) {
                    RedriveAction::Retry
                } else {
                    RedriveAction::Skip
                };
                let lane = head.lane.clone().filter(|_| rng.chance(50));
                store
                    .redrive(RedriveRequest {
                        incarnation: None,
                        lane,
                        session_id: SESSION.into(),
                        consumer: head.consumer.clone(),
                        index: head.event.index,
                        action,
                        consumers: random_consumers(&mut rng),
                    })
                    .await
                    .err()
            }
            12 => {
                if rng.chance(15) {
                    held.clear();
                    store
                        .clear(ClearRequest {
                            session_id: SESSION.into(),
                            ..ClearRequest::default()
                        })
                        .await
                        .err()
                } else if rng.chance(30) {
                    store.reclaim(SESSION).await.err()
                } else {
                    let writes = vec![StateWrite {
                        index: store.inspect(SESSION, |s| s.log.head()),
                        state: json!(step),
                        pins: held.iter().take(2).map(Head::cursor_ref).collect(),
                    }];
                    store.write_state(SESSION, "r", writes).await.err()
                }
            }
            14 => {
                // Reschedule: a cursor's head, something queued behind it,
                // or an index nothing waits on; sometimes fenced.
                let cursors = store.cursors(SESSION).await.unwrap();
                let head = store.inspect(SESSION, |s| s.log.head());
                let (consumer, lane, index) = match rng.pick(&cursors) {
                    Some(cursor) if rng.chance(80) => {
                        let index = match cursor.head {
                            Some(index) if rng.chance(60) => index,
                            _ => cursor.position + 1 + rng.below(3),
                        };
                        (cursor.consumer.clone(), cursor.lane.clone(), index)
                    }
                    _ => ("a".to_owned(), None, rng.below(head + 2)),
                };
                let now = clock.now_ms();
                let change = match rng.below(3) {
                    0 => ScheduleChange::Cancel,
                    1 => ScheduleChange::To(NotBefore::AtMs(now - 20 + rng.below(80) as i64)),
                    _ => ScheduleChange::To(NotBefore::AfterMs(rng.below(40) as i64)),
                };
                let mut request =
                    RescheduleRequest::new(SESSION, consumer, lane.as_deref(), index, change);
                if let Some(held) = rng.pick(&held).filter(|_| rng.chance(20)) {
                    request = request.with_cause(Cause {
                        consumer: held.consumer.clone(),
                        lane: held.lane.clone(),
                        index: held.event.index,
                        attempt: held.dispatch.attempt_count,
                    });
                }
                match store.reschedule(request).await {
                    Ok(RescheduleResult::Rescheduled { .. }) => {
                        coverage.rescheduled += 1;
                        None
                    }
                    Ok(RescheduleResult::Cancelled) => {
                        coverage.cancelled += 1;
                        None
                    }
                    Ok(_) => None,
                    Err(err) => Some(err),
                }
            }
            15 => {
                let consumer = *rng.pick(&["a", "b", "c", "logger"]).unwrap_or(&"a");
                let session = rng.chance(50).then_some(SESSION);
                if rng.chance(40) {
                    let request = ResumeRequest {
                        consumer: consumer.to_owned(),
                        session_id: session.map(str::to_owned),
                    };
                    store.resume(request).await.err()
                } else {
                    let now = clock.now_ms();
                    let request = PauseRequest {
                        consumer: consumer.to_owned(),
                        session_id: session.map(str::to_owned),
                        until_ms: rng.chance(60).then(|| now - 5 + rng.below(60) as i64),
                    };
                    store.pause(request).await.err()
                }
            }
            16 => {
                let mut bulk = BulkRedrive::new(if rng.chance(50) {
                    RedriveAction::Retry
                } else {
                    RedriveAction::Skip
                });
                bulk.limit = rng.chance(50).then(|| 1 + rng.below(2) as usize);
                bulk.consumer = rng.chance(30).then(|| "a".to_owned());
                bulk.lane = rng.chance(20).then(|| "L1".to_owned());
                let before = store.dead_letters(SESSION).await.unwrap().len();
                match store.redrive_all(bulk.clone()).await {
                    Ok(done) => {
                        coverage.bulk_redriven += done.redriven.len();
                        let after = store.dead_letters(SESSION).await.unwrap();
                        assert!(
                            done.redriven.len() <= bulk.page_size(),
                            "seed {seed} step {step}: redrive_all over its limit"
                        );
                        let left = after.iter().any(|head| {
                            bulk.matches(
                                SESSION,
                                &head.consumer,
                                head.lane.as_deref(),
                                head.dispatch.failed_at.unwrap_or_default(),
                            )
                        });
                        assert!(
                            done.redriven.len() <= before,
                            "seed {seed} step {step}: redrove more than the dead letters"
                        );
                        if !done.more {
                            // A skip may uncover no new dead letter: none may match after.
                            assert!(!left, "seed {seed} step {step}: matches left, more false");
                        }
                        None
                    }
                    Err(err) => Some(err),
                }
            }
            _ => {
                if rng.chance(20) {
                    let consumer = log_consumer(&mut rng);
                    store.wake_log(SESSION, &consumer).await.err()
                } else {
                    clock.advance(rng.below(30) as i64);
                    None
                }
            }
        };
        if let Some(err) = failed {
            coverage.errors += 1;
            let after = fingerprint(&store).await;
            assert_eq!(
                before, after,
                "seed {seed} step {step}: {err} changed state"
            );
        }
        if let Err(problem) = store.check_invariants() {
            panic!("seed {seed} step {step} (op {op}): {problem}");
        }
        if let Err(problem) = store.check_work_invariants() {
            panic!("seed {seed} step {step} (op {op}): {problem}");
        }
        let pauses = store.pauses(None).await.unwrap();
        let now = clock.now_ms();
        let pending = store.inspect(SESSION, |s| {
            let brute = s.cursors.iter().any(|c| {
                c.head.is_some()
                    && c.dispatch.failed_at.is_none()
                    && !pause::hold(&pauses, &c.consumer, SESSION, now).is_held()
            });
            (brute, s.has_pending(None, &pauses, now))
        });
        assert_eq!(pending.0, pending.1, "seed {seed} step {step}: has_pending");
        held.retain(|h| h.dispatch.claim_expires_at.is_some());
        if held.len() > 12 {
            held.drain(..held.len() - 12);
        }
    }
}

#[tokio::test]
async fn indexes_match_a_brute_force_recomputation_after_random_operations() {
    let mut coverage = Coverage::default();
    for seed in [1, 7, 42, 1234, 99_991, 31_337, 271_828, 8_675_309] {
        run_random(seed, 1_500, &mut coverage).await;
    }
    eprintln!("{coverage:?}");
    assert!(coverage.claimed > 500, "{coverage:?}");
    assert!(coverage.dead_lettered > 10, "{coverage:?}");
    assert!(coverage.busy > 10 && coverage.settled > 10, "{coverage:?}");
    assert!(
        coverage.errors > 50 && coverage.log_heads > 10,
        "{coverage:?}"
    );
    assert!(
        coverage.rescheduled > 20 && coverage.cancelled > 20 && coverage.bulk_redriven > 10,
        "{coverage:?}"
    );
    assert!(coverage.claims_under_pause > 100, "{coverage:?}");
}

#[tokio::test]
async fn finished_event_cursors_leave_nothing_in_the_indexes() {
    let store = MemoryStore::new();
    let events: Vec<NewEvent> = (0..500)
        .map(|n| NewEvent::new("msg", json!(n)).with_target(Target::event("worker")))
        .collect();
    store
        .append(SESSION, events, AppendOptions::default())
        .await
        .unwrap();
    let request = ClaimRequest {
        session_id: SESSION.into(),
        holder: "w".into(),
        ttl_ms: Some(60_000),
        ..ClaimRequest::default()
    };
    let ClaimResult::Claimed { heads, .. } = store.claim_available(request.clone()).await.unwrap()
    else {
        panic!("expected claims");
    };
    assert_eq!(heads.len(), 500);
    for head in heads {
        store
            .complete_attempt(CompleteRequest {
                incarnation: None,
                session_id: SESSION.into(),
                consumer: head.consumer,
                lane: None,
                index: head.event.index,
                attempt: 1,
                events: Vec::new(),
                consumers: None,
            })
            .await
            .unwrap();
    }
    let (live, ready, busy) = store.inspect(SESSION, |s| {
        (
            s.cursors.iter().count(),
            s.cursors.heads().ready.len(),
            s.cursors.heads().busy.len(),
        )
    });
    assert_eq!((live, ready, busy), (0, 0, 0));
    assert_eq!(
        store.claim_available(request).await.unwrap(),
        ClaimResult::Settled
    );
    store.check_invariants().unwrap();
}

#[tokio::test]
async fn a_claim_walks_only_the_claimable_heads_it_may_take() {
    let (_clock, store) = store_at(0, "g");
    let bulk = |consumer: &str, n: usize| -> Vec<NewEvent> {
        (0..n)
            .map(|k| NewEvent::new("msg", json!(k)).with_target(Target::event(consumer)))
            .collect()
    };
    let request = |consumers: Option<Vec<&str>>| ClaimRequest {
        session_id: SESSION.into(),
        holder: "w".into(),
        ttl_ms: Some(1_000_000),
        consumers: consumers.map(|names| {
            names
                .into_iter()
                .map(ConsumerDeclaration::targeted)
                .collect()
        }),
        ..ClaimRequest::default()
    };
    // 3000 finished heads, 3000 busy heads, 3000 claimable heads of "idle".
    let options = AppendOptions::default();
    store
        .append(SESSION, bulk("done", 3000), options.clone())
        .await
        .unwrap();
    let ClaimResult::Claimed { heads, .. } = store
        .claim_available(request(Some(vec!["done"])))
        .await
        .unwrap()
    else {
        panic!("expected claims");
    };
    for head in heads {
        store
            .complete_attempt(CompleteRequest {
                incarnation: None,
                session_id: SESSION.into(),
                consumer: head.consumer,
                lane: None,
                index: head.event.index,
                attempt: 1,
                events: Vec::new(),
                consumers: None,
            })
            .await
            .unwrap();
    }
    store
        .append(SESSION, bulk("busy", 3000), options.clone())
        .await
        .unwrap();
    store
        .claim_available(request(Some(vec!["busy"])))
        .await
        .unwrap();
    store
        .append(SESSION, bulk("idle", 3000), options.clone())
        .await
        .unwrap();
    store
        .append(SESSION, bulk("x", 1), options.clone())
        .await
        .unwrap();

    let claimed = store
        .claim_available(request(Some(vec!["x"])))
        .await
        .unwrap();
    assert!(matches!(claimed, ClaimResult::Claimed { ref heads, .. } if heads.len() == 1));
    assert_eq!(store.inspect(SESSION, |s| s.last_claim_visits), 1);

    let limited = ClaimRequest {
        limit: Some(2),
        ..request(None)
    };
    store.claim_available(limited).await.unwrap();
    assert_eq!(store.inspect(SESSION, |s| s.last_claim_visits), 2);

    let below = ClaimRequest {
        through: Some(6000),
        ..request(None)
    };
    let result = store.claim_available(below).await.unwrap();
    assert!(matches!(result, ClaimResult::Busy { .. }), "{result:?}");
    assert_eq!(
        store.inspect(SESSION, |s| s.last_claim_visits),
        0,
        "stops at the first head above `through`"
    );
    store.check_invariants().unwrap();
}

#[tokio::test]
async fn a_clock_moving_back_keeps_a_promoted_claim_busy() {
    let (clock, store) = store_at(1_000, "g");
    let event = NewEvent::new("msg", json!(1)).with_target(Target::event("c"));
    store
        .append(SESSION, vec![event], AppendOptions::default())
        .await
        .unwrap();
    let request = |consumers: Option<Vec<ConsumerDeclaration>>| ClaimRequest {
        session_id: SESSION.into(),
        holder: "w".into(),
        ttl_ms: Some(100),
        consumers,
        ..ClaimRequest::default()
    };
    assert!(matches!(
        store.claim_available(request(None)).await.unwrap(),
        ClaimResult::Claimed { .. }
    ));
    clock.advance(200);
    // A claim for another consumer promotes the expired head without taking it.
    let other = Some(vec![ConsumerDeclaration::targeted("other")]);
    assert_eq!(
        store.claim_available(request(other)).await.unwrap(),
        ClaimResult::Settled
    );
    let promoted = store.inspect(SESSION, |s| s.cursors.heads().ready.len());
    assert_eq!(promoted, 1);
    clock.set(1_050);
    assert_eq!(
        store.claim_available(request(None)).await.unwrap(),
        ClaimResult::Busy { retry_at: 1_100 }
    );
    store.check_invariants().unwrap();
    clock.set(1_100);
    let ClaimResult::Claimed { heads, .. } = store.claim_available(request(None)).await.unwrap()
    else {
        panic!("expected the expired claim to be claimed again");
    };
    assert_eq!(
        (
            heads[0].dispatch.attempt_count,
            heads[0].dispatch.failure_count
        ),
        (2, 1)
    );
    store.check_invariants().unwrap();
}

#[tokio::test]
async fn a_second_consumer_gets_its_own_heads_once_the_first_has_some() {
    let (clock, store) = store_at(1_000, "g");
    let append = |events: Vec<NewEvent>| store.append(SESSION, events, AppendOptions::default());
    append(vec![
        NewEvent::new("msg", json!(1)).with_target(Target::event("a")),
        NewEvent::new("msg", json!(2)).with_target(Target::lane("a", "L")),
        NewEvent::new("msg", json!(3)).with_target(Target::event("a")),
    ])
    .await
    .unwrap();
    let request = |consumer: Option<&str>, limit| ClaimRequest {
        session_id: SESSION.into(),
        holder: "w".into(),
        ttl_ms: Some(100),
        consumers: consumer.map(|name| vec![ConsumerDeclaration::targeted(name)]),
        limit,
        ..ClaimRequest::default()
    };
    let claimed = |result: ClaimResult| match result {
        ClaimResult::Claimed { heads, .. } => heads
            .iter()
            .map(|head| (head.consumer.clone(), head.event.index))
            .collect::<Vec<_>>(),
        other => panic!("expected heads, got {other:?}"),
    };
    // One consumer: a busy head (index 1) and two ready ones.
    let first = store.claim_available(request(None, Some(1))).await.unwrap();
    assert_eq!(claimed(first), [("a".to_owned(), 1)]);
    // A second consumer appears on a lower index than a's ready heads.
    clock.advance(10);
    append(vec![NewEvent::new("msg", json!(4))
        .with_target(Target::event("b"))
        .with_target(Target::event("a"))])
    .await
    .unwrap();
    store.check_invariants().unwrap();
    let only_a = store.claim_available(request(Some("a"), None)).await;
    assert_eq!(
        claimed(only_a.unwrap()),
        [
            ("a".to_owned(), 2),
            ("a".to_owned(), 3),
            ("a".to_owned(), 4)
        ]
    );
    assert_eq!(
        store
            .claim_available(request(Some("a"), None))
            .await
            .unwrap(),
        ClaimResult::Busy { retry_at: 1_100 }
    );
    let only_b = store.claim_available(request(Some("b"), None)).await;
    assert_eq!(claimed(only_b.unwrap()), [("b".to_owned(), 4)]);
    assert_eq!(
        store
            .claim_available(request(Some("b"), None))
            .await
            .unwrap(),
        ClaimResult::Busy { retry_at: 1_110 }
    );
    store.check_invariants().unwrap();
}
