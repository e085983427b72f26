//! Crash safety of every write operation: a child process runs a loop mixing
//! append (with lane, event and log targets), claim, renew, complete (with
//! returned events), fail (with a retry delay, dead-lettering), redrive
//! (retry and skip), clear, reclaim, write_state (with a pin), set_presence
//! and wake_log, and is killed with SIGKILL at random moments.
//!
//! The child writes `BEGIN <op>` before each call, an acknowledgement line
//! after it returns, then a digest of the whole readable state. After every
//! kill the parent reopens the file and checks:
//! - when no call was in flight (no `BEGIN` after the last digest), the state
//!   equals the last digest exactly;
//! - always: every acknowledged batch whole, every acknowledged completion's
//!   returned event present with its cause and its cursor moved past the
//!   head, every acknowledged clear's marker present with no event or lane
//!   work at or below it and the log cursor parked at or after it, indexes
//!   contiguous from the reclaimed offset, no partial batch, no head
//!   completed twice, lane, event and log cursors agreeing with the log,
//!   acknowledged presence fields and snapshots readable.
//!
//! The child is this test binary re-executed with `CHILD_DB` set.

mod common;

use common::{kill_running, random_below, spawn_child, ChildVars};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use a2_store_api::{
    Cause, ClaimRequest, ClaimResult, ClearRequest, ClearResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, CursorKind, CursorRef, FailOutcome, FailRequest, HeldClaim, NewEvent,
    PresenceMeta, ReadOptions, ReadStateOptions, RedriveAction, RedriveRequest, RenewRequest,
    StateWrite, Store, StoredEvent, Target,
};
use a2_store_sqlite::{Durability, SqliteOptions, SqliteStore};
use serde_json::json;

const CHILD_DB: &str = "A2_SQLITE_CRASH_OPS_DB";
const CHILD_RUN: &str = "A2_SQLITE_CRASH_OPS_RUN";
const CHILD_LOG: &str = "A2_SQLITE_CRASH_OPS_LOG";
const KILLS: usize = 20;
const BATCH: usize = 4;
const TEST_NAME: &str = "every_acknowledged_write_survives_sigkill";
const SESSION: &str = "s";

const CHILD: ChildVars = ChildVars {
    db: CHILD_DB,
    run: CHILD_RUN,
    log: CHILD_LOG,
};

fn follower() -> ConsumerDeclaration {
    ConsumerDeclaration::log("follower", "F", Some(vec!["msg".into()]), true)
}

/// A digest of everything the store reads back that does not depend on the
/// time of reading: the log, cursors, dead letters, the snapshot and the
/// session listing.
async fn digest(store: &SqliteStore) -> u64 {
    let rows = store.read(SESSION, ReadOptions::default()).await.unwrap();
    let cursors = store.cursors(SESSION).await.unwrap();
    let dead = store.dead_letters(SESSION).await.unwrap();
    let snapshot = store
        .read_state(SESSION, "r", ReadStateOptions::default())
        .await
        .unwrap();
    let sessions = store.sessions(Default::default()).await.unwrap();
    let text = serde_json::to_string(&(rows, cursors, dead, snapshot, sessions)).unwrap();
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// What the children acknowledged, accumulated over every run.
#[derive(Default)]
struct Acked {
    /// Batch name → index of its first event.
    batches: BTreeMap<String, u64>,
    /// Completions: reply id, its index, and the cause it must carry.
    completions: Vec<(String, u64, Cause)>,
    /// Clear markers: index and id.
    clears: Vec<(u64, String)>,
    /// Presence fields and their values.
    presence: BTreeMap<String, u64>,
    /// Indexes snapshots were written at.
    states: Vec<u64>,
    /// Flaky heads skipped by a redrive (acknowledged or in flight).
    skips: BTreeSet<u64>,
    /// Calls of each kind acknowledged.
    calls: BTreeMap<String, usize>,
}

/// How one run's log ended.
struct RunEnd {
    /// The digest of the state after the last acknowledged call, if logged.
    last_digest: Option<u64>,
    /// Whether a call may have been in flight at the kill.
    in_flight: bool,
}

fn parse_run(written: &str, acked: &mut Acked) -> RunEnd {
    let mut end = RunEnd {
        last_digest: None,
        in_flight: false,
    };
    // Only whole lines count: a kill may cut the last one short.
    for line in written
        .split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
    {
        let words: Vec<&str> = line.split(' ').collect();
        match words[0] {
            "STATE" => {
                end.last_digest = Some(words[1].parse().unwrap());
                end.in_flight = false;
                continue;
            }
            "BEGIN" => {
                end.in_flight = true;
                if words[1] == "skip" {
                    acked.skips.insert(words[2].parse().unwrap());
                }
                continue;
            }
            "BATCH" => {
                acked
                    .batches
                    .insert(words[1].to_owned(), words[2].parse().unwrap());
            }
            "DONE" => {
                let cause = Cause {
                    consumer: words[2].to_owned(),
                    lane: (words[3] != "-").then(|| words[3].to_owned()),
                    index: words[4].parse().unwrap(),
                    attempt: words[5].parse().unwrap(),
                };
                acked
                    .completions
                    .push((words[1].to_owned(), words[6].parse().unwrap(), cause));
            }
            "CLEAR" => acked
                .clears
                .push((words[1].parse().unwrap(), words[2].to_owned())),
            "PRES" => {
                acked
                    .presence
                    .insert(words[1].to_owned(), words[2].parse().unwrap());
            }
            "WSTATE" => acked.states.push(words[1].parse().unwrap()),
            _ => {}
        }
        *acked.calls.entry(words[0].to_owned()).or_default() += 1;
    }
    end
}

/// Lines the child has logged so far (0 before it opened its log).
fn logged_lines(log: &Path) -> usize {
    std::fs::read(log)
        .map(|bytes| bytes.iter().filter(|byte| **byte == b'\n').count())
        .unwrap_or(0)
}

#[test]
fn every_acknowledged_write_survives_sigkill() {
    if let Ok(db) = std::env::var(CHILD_DB) {
        child(Path::new(&db));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash-ops.db");
    let started = Instant::now();
    let mut acked = Acked::default();
    let mut previous = on_runtime(|| async {
        let store = SqliteStore::open(&db, SqliteOptions::default()).unwrap();
        digest(&store).await
    });
    let mut exact = 0;
    for run in 0..KILLS {
        let log = dir.path().join(format!("acks-{run}.log"));
        let mut process = spawn_child(TEST_NAME, &CHILD, &db, run, &log);
        // Kill after a random amount of progress rather than of wall time,
        // so a loaded machine (a slow start, slow calls) still kills at
        // every point of the call mix, clears and reclaims included: wait
        // for 20-200 logged lines (about 3 per call), then 0-20 ms more.
        let progress = 20 + random_below(180) as usize;
        let deadline = Instant::now() + Duration::from_secs(30);
        while logged_lines(&log) < progress && Instant::now() < deadline {
            if process.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(random_below(20)));
        kill_running(&mut process);
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        let end = parse_run(&written, &mut acked);
        let now = verify(&db, &acked);
        if !end.in_flight {
            let expected = end.last_digest.unwrap_or(previous);
            assert_eq!(
                now, expected,
                "run {run}: killed with no call in flight, yet the state differs from the last acknowledged one"
            );
            exact += 1;
        }
        previous = now;
    }
    // About a third of the kills land between calls; none in 20 is a
    // broken harness, not bad luck (0.65^20 < 0.001).
    assert!(
        exact > 0,
        "no kill landed between calls: the exact check never ran"
    );
    let count = |kind: &str| acked.calls.get(kind).copied().unwrap_or_default();
    for kind in [
        "BATCH", "CLAIM", "RENEW", "DONE", "FAIL", "REDRIVE", "CLEAR", "RECLAIM", "WSTATE", "PRES",
        "WAKE",
    ] {
        assert!(
            count(kind) > 0,
            "no {kind} call was acknowledged: {:?}",
            acked.calls
        );
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    eprintln!(
        "{KILLS} kills ({exact} with no call in flight, checked exactly), acknowledged calls {:?} in {:?}",
        acked.calls,
        started.elapsed()
    );
}

fn on_runtime<F, Fut, T>(body: F) -> T
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(body())
}

/// Reopens the database, checks it against what was acknowledged and
/// returns its digest.
fn verify(db: &Path, acked: &Acked) -> u64 {
    on_runtime(|| async {
        let store = SqliteStore::open(db, SqliteOptions::default()).expect("reopen after a kill");
        let rows = store.read(SESSION, ReadOptions::default()).await.unwrap();
        let info = store.sessions(Default::default()).await.unwrap();
        let (reclaimed, clear) = info
            .iter()
            .find(|info| info.session_id == SESSION)
            .map_or((0, 0), |info| (info.reclaimed_through, info.clear_index));
        // Indexes contiguous from the reclaimed offset.
        for (offset, row) in rows.iter().enumerate() {
            assert_eq!(
                row.index,
                reclaimed + 1 + offset as u64,
                "indexes are contiguous"
            );
        }
        let by_index: HashMap<u64, &StoredEvent> =
            rows.iter().map(|row| (row.index, row)).collect();
        // Every acknowledged batch whole (where not reclaimed).
        for (batch, first) in &acked.batches {
            for j in 0..BATCH as u64 {
                let index = first + j;
                if index > reclaimed {
                    let row = by_index
                        .get(&index)
                        .unwrap_or_else(|| panic!("acknowledged batch {batch} lost index {index}"));
                    assert_eq!(row.id, format!("{batch}-e{j}"), "batch {batch} at {index}");
                }
            }
        }
        // No partial batch: every stored batch is whole and contiguous,
        // unless reclaim cut its start.
        let mut stored: BTreeMap<&str, Vec<&StoredEvent>> = BTreeMap::new();
        for row in rows.iter().filter(|row| row.event_type == "msg") {
            stored
                .entry(row.payload["batch"].as_str().unwrap())
                .or_default()
                .push(row);
        }
        for (batch, members) in &stored {
            let cut = members[0].index == reclaimed + 1;
            assert!(cut || members.len() == BATCH, "batch {batch} is partial");
            for pair in members.windows(2) {
                assert_eq!(pair[1].index, pair[0].index + 1, "batch {batch} is split");
            }
            for member in members {
                assert!(member.id.starts_with(&format!("{batch}-e")));
            }
        }
        // Replies: at most one per head; each acknowledged one present with its cause.
        let mut replies: HashMap<(String, Option<String>, u64), u32> = HashMap::new();
        for row in rows.iter().filter(|row| row.event_type == "done") {
            let cause = row.cause.clone().expect("a reply has a cause");
            let key = (cause.consumer, cause.lane, cause.index);
            assert!(
                replies.insert(key.clone(), cause.attempt).is_none(),
                "head {key:?} completed twice"
            );
        }
        let cursors = store.cursors(SESSION).await.unwrap();
        let dead = store.dead_letters(SESSION).await.unwrap();
        for (id, index, cause) in &acked.completions {
            if *index > reclaimed {
                let row = by_index
                    .get(index)
                    .unwrap_or_else(|| panic!("acknowledged completion {id} lost"));
                assert_eq!(&row.id, id);
                assert_eq!(
                    row.cause.as_ref(),
                    Some(cause),
                    "the reply {id} has its cause"
                );
            }
            for cursor in cursors
                .iter()
                .filter(|cursor| cursor.consumer == cause.consumer && cursor.lane == cause.lane)
            {
                match cursor.kind {
                    CursorKind::Event => assert_ne!(cursor.head, Some(cause.index), "{id}"),
                    _ => assert!(
                        cursor.head.is_none_or(|head| head > cause.index)
                            && cursor.position >= cause.index,
                        "{id}: cursor {cursor:?} did not move past the completed head"
                    ),
                }
            }
        }
        // Clears: markers present, no work at or below the clear, log parked.
        for (index, id) in &acked.clears {
            assert!(clear >= *index, "the clear index went back");
            if *index <= reclaimed {
                // An older marker below a later clear is reclaimed like any row.
                continue;
            }
            let marker = by_index
                .get(index)
                .unwrap_or_else(|| panic!("acknowledged clear marker {id} lost"));
            assert_eq!(marker.event_type, "a2.cleared");
            assert_eq!(&marker.id, id);
        }
        for cursor in &cursors {
            match cursor.kind {
                CursorKind::Log => assert!(cursor.position >= clear, "{cursor:?}"),
                _ => assert!(
                    cursor.head.is_none_or(|head| head > clear),
                    "work at or below the clear: {cursor:?}"
                ),
            }
        }
        assert!(dead.iter().all(|head| head.event.index > clear));
        // Cursors agree with the log.
        let targets = |suffix: &str| -> Vec<u64> {
            rows.iter()
                .filter(|row| {
                    row.event_type == "msg" && row.index > clear && row.id.ends_with(suffix)
                })
                .map(|row| row.index)
                .collect()
        };
        let lane = cursors
            .iter()
            .find(|cursor| cursor.kind == CursorKind::Lane);
        let lane_targets = targets("-e0");
        match lane {
            Some(lane) => {
                for index in &lane_targets {
                    let replied =
                        replies.contains_key(&("worker".into(), Some("L".into()), *index));
                    assert_eq!(
                        replied,
                        *index <= lane.position,
                        "lane index {index} vs {lane:?}"
                    );
                }
                let next = lane_targets
                    .iter()
                    .copied()
                    .find(|index| *index > lane.position);
                assert_eq!(
                    lane.head, next,
                    "the lane head is the first unfinished index"
                );
            }
            None => assert!(lane_targets.is_empty(), "targeted lane work has no cursor"),
        }
        let open = |consumer: &str| -> BTreeSet<u64> {
            cursors
                .iter()
                .filter(|cursor| cursor.kind == CursorKind::Event && cursor.consumer == consumer)
                .filter_map(|cursor| cursor.head)
                .chain(
                    dead.iter()
                        .filter(|head| head.consumer == consumer)
                        .map(|head| head.event.index),
                )
                .collect()
        };
        let notifier_open = open("notifier");
        for index in targets("-e1") {
            let replied = replies.contains_key(&("notifier".into(), None, index));
            assert_ne!(
                replied,
                notifier_open.contains(&index),
                "notifier at {index}"
            );
        }
        let flaky_open = open("flaky");
        for index in targets("-e2") {
            let replied = replies.contains_key(&("flaky".into(), None, index));
            let open = flaky_open.contains(&index);
            assert!(
                !(replied && open),
                "flaky at {index} is both finished and open"
            );
            assert!(
                replied || open || acked.skips.contains(&index),
                "flaky work at {index} vanished without a completion or a skip"
            );
        }
        if let Some(log) = cursors.iter().find(|cursor| cursor.kind == CursorKind::Log) {
            let next = rows
                .iter()
                .find(|row| row.event_type == "msg" && row.index > log.position)
                .map(|row| row.index);
            assert_eq!(
                log.head, next,
                "the log head is the next taken event: {log:?}"
            );
        }
        // Presence and snapshots acknowledged are readable.
        let presence = store.read_presence(SESSION).await.unwrap();
        for (field, value) in &acked.presence {
            assert!(
                presence
                    .iter()
                    .any(|row| &row.field == field && row.value == json!(value)),
                "acknowledged presence field {field} lost"
            );
        }
        let snapshot = store
            .read_state(SESSION, "r", ReadStateOptions::default())
            .await
            .unwrap();
        for index in acked.states.iter().filter(|index| **index > clear) {
            let kept = snapshot.snapshot.as_ref().map(|snapshot| snapshot.index);
            assert!(
                kept.is_some_and(|kept| kept >= *index),
                "acknowledged snapshot at {index} lost: {kept:?}"
            );
        }
        digest(&store).await
    })
}

/// The child's acknowledgement log.
struct Journal {
    log: std::fs::File,
    /// The digest of the state after the last acknowledged call.
    last: u64,
}

impl Journal {
    /// Appends one line with one `write`.
    fn note(&mut self, line: String) {
        self.log.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// Logs the digest of the state once a call is acknowledged.
    async fn settled(&mut self, store: &SqliteStore) {
        self.last = digest(store).await;
        self.note(format!("STATE {}", self.last));
    }

    /// Before a call: the state is still what the last call left (this
    /// child is the only writer), then `BEGIN`.
    async fn begin(&mut self, store: &SqliteStore, what: String) {
        assert_eq!(
            digest(store).await,
            self.last,
            "the state changed between calls"
        );
        self.note(format!("BEGIN {what}"));
    }
}

/// The child role: mix every write until killed, logging each call before
/// it starts and after it is acknowledged, then the digest of the state.
fn child(db: &Path) {
    let run: u64 = std::env::var(CHILD_RUN).unwrap().parse().unwrap();
    let log_path = PathBuf::from(std::env::var(CHILD_LOG).unwrap());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .unwrap();
    on_runtime(|| async {
        let durability = if run.is_multiple_of(2) {
            Durability::Full
        } else {
            Durability::Normal
        };
        let options = SqliteOptions {
            durability,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open(db, options).unwrap();
        let holder = format!("child-{run}");
        let mut journal = Journal { log, last: 0 };
        journal.settled(&store).await;
        for k in 0u64.. {
            let batch = format!("r{run}-b{k}");
            let events = (0..BATCH)
                .map(|j| {
                    let event = NewEvent::new("msg", json!({ "batch": batch }))
                        .with_id(format!("{batch}-e{j}"));
                    match j {
                        0 => event.with_target(Target::lane("worker", "L")),
                        1 => event.with_target(Target::event("notifier")),
                        2 => event.with_target(Target::event("flaky")),
                        _ => event,
                    }
                })
                .collect();
            journal.begin(&store, "append".into()).await;
            let appended = store
                .append(
                    SESSION,
                    events,
                    a2_store_api::AppendOptions {
                        consumers: Some(vec![follower()]),
                        origin_index: None,
                    },
                )
                .await
                .unwrap();
            journal.note(format!("BATCH {batch} {}", appended.events[0].index));
            journal.settled(&store).await;

            journal.begin(&store, "claim".into()).await;
            let claimed = store
                .claim_available(ClaimRequest {
                    session_id: SESSION.into(),
                    holder: holder.clone(),
                    ttl_ms: Some(300),
                    limit: Some(4),
                    ..ClaimRequest::default()
                })
                .await
                .unwrap();
            journal.note("CLAIM".into());
            journal.settled(&store).await;
            let heads = match claimed {
                ClaimResult::Claimed { heads, .. } => heads,
                _ => Vec::new(),
            };

            if !heads.is_empty() {
                journal.begin(&store, "renew".into()).await;
                store
                    .renew_claims(RenewRequest {
                        incarnation: None,
                        session_id: SESSION.into(),
                        holder: holder.clone(),
                        claims: heads
                            .iter()
                            .map(|head| HeldClaim {
                                cursor: head.cursor_ref(),
                                attempt: head.dispatch.attempt_count,
                            })
                            .collect(),
                        ttl_ms: Some(300),
                        expires_at_ms: None,
                    })
                    .await
                    .unwrap();
                journal.note("RENEW".into());
                journal.settled(&store).await;
            }

            if k % 3 == 0 {
                let head = appended.events[BATCH - 1].index;
                let pins: Vec<CursorRef> = heads.iter().take(1).map(|h| h.cursor_ref()).collect();
                journal.begin(&store, "write_state".into()).await;
                store
                    .write_state(
                        SESSION,
                        "r",
                        vec![StateWrite {
                            index: head,
                            state: json!({ "k": k }),
                            pins,
                        }],
                    )
                    .await
                    .unwrap();
                journal.note(format!("WSTATE {head}"));
                journal.settled(&store).await;
            }

            for head in heads {
                let attempt = head.dispatch.attempt_count;
                let index = head.event.index;
                if head.consumer == "flaky" && attempt < 3 {
                    journal.begin(&store, "fail".into()).await;
                    let failed = store
                        .fail_attempt(FailRequest {
                            incarnation: None,
                            session_id: SESSION.into(),
                            consumer: head.consumer.clone(),
                            lane: None,
                            index,
                            attempt,
                            error: "flaky".into(),
                            max_failures: Some(2),
                            retry_after_ms: Some(1),
                        })
                        .await
                        .unwrap();
                    if failed.outcome != FailOutcome::Superseded {
                        journal.note(format!("FAIL {index} {:?}", failed.outcome));
                    }
                    journal.settled(&store).await;
                    continue;
                }
                let id = format!("r{run}-k{k}-{}-{index}-a{attempt}", head.consumer);
                journal.begin(&store, "complete".into()).await;
                let outcome = store
                    .complete_attempt(CompleteRequest {
                        incarnation: None,
                        session_id: SESSION.into(),
                        consumer: head.consumer.clone(),
                        lane: head.lane.clone(),
                        index,
                        attempt,
                        events: vec![NewEvent::new("done", json!(null)).with_id(id.clone())],
                        consumers: Some(vec![follower()]),
                    })
                    .await
                    .unwrap();
                if let CompleteResult::Completed { events } = outcome {
                    journal.note(format!(
                        "DONE {id} {} {} {index} {attempt} {}",
                        head.consumer,
                        head.lane.as_deref().unwrap_or("-"),
                        events[0].index
                    ));
                }
                journal.settled(&store).await;
            }

            if let Some(dead) = store.dead_letters(SESSION).await.unwrap().first() {
                let index = dead.event.index;
                let action = if index % 2 == 0 {
                    RedriveAction::Retry
                } else {
                    RedriveAction::Skip
                };
                let begin = match action {
                    RedriveAction::Skip => format!("skip {index}"),
                    RedriveAction::Retry => format!("retry {index}"),
                };
                journal.begin(&store, begin).await;
                store
                    .redrive(RedriveRequest {
                        incarnation: None,
                        lane: None,
                        session_id: SESSION.into(),
                        consumer: dead.consumer.clone(),
                        index,
                        action,
                        consumers: None,
                    })
                    .await
                    .unwrap();
                journal.note(format!("REDRIVE {index}"));
                journal.settled(&store).await;
            }

            let field = format!("f{run}-{k}");
            journal.begin(&store, "presence".into()).await;
            store
                .set_presence(
                    SESSION,
                    "p",
                    BTreeMap::from([(field.clone(), json!(k))]),
                    PresenceMeta {
                        at: i64::try_from(run * 1_000_000 + k).unwrap(),
                        seen: None,
                        ttl_ms: 600_000,
                    },
                )
                .await
                .unwrap();
            journal.note(format!("PRES {field} {k}"));
            journal.settled(&store).await;

            if k % 5 == 1 {
                journal.begin(&store, "wake".into()).await;
                store.wake_log(SESSION, &follower()).await.unwrap();
                journal.note("WAKE".into());
                journal.settled(&store).await;
            }

            if k % 4 == 1 {
                journal.begin(&store, "clear".into()).await;
                let cleared = store
                    .clear(ClearRequest {
                        session_id: SESSION.into(),
                        ..ClearRequest::default()
                    })
                    .await
                    .unwrap();
                if let ClearResult::Cleared { marker } = cleared {
                    journal.note(format!("CLEAR {} {}", marker.index, marker.id));
                }
                journal.settled(&store).await;
            }

            journal.begin(&store, "reclaim".into()).await;
            store.reclaim(SESSION).await.unwrap();
            journal.note("RECLAIM".into());
            journal.settled(&store).await;
        }
    });
}
