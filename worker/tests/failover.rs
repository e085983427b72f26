//! Failover under load (issue 39), with no container: a primary and a
//! synchronous standby started from the installed PostgreSQL binaries
//! (`common::cluster`), a producer in this process and worker processes
//! (this test binary run again on its ignored `failover_worker_process`)
//! on the multi-host URL of both servers, the primary killed (SIGKILL,
//! every server process) mid-load and the standby promoted, then a fresh
//! standby made on the killed primary's port.
//!
//! After the last failover and the drain, the final log (read from the
//! new primary) is checked against the producer's acknowledgements and the
//! workers' own logs: every acknowledged input has exactly one output (none
//! lost, none doubled), no attempt number was handed out twice for one
//! head, lanes kept their order; and every worker resumed within 5 s (p50)
//! and 15 s (max) of each promotion.
//!
//! Each standby is promoted a while after the kill (0 to 3 s, in turn:
//! a failover manager's detection), so calls in flight fail, completions
//! are repeated and the workers' claim backoff grows;
//! `A2_FAILOVER_PROMOTION_DELAYS_MS` (e.g. `8000,25000`: past the workers'
//! 5 s lease) sets other delays.
//!
//! The short form (2 failovers, a few thousand jobs, well under a minute)
//! runs with the other tests; `A2_FAILOVER_ROUNDS=20` makes the long form.
//! `A2_FAILOVER_RATE` sets the jobs appended per second (default 100);
//! `A2_FAILOVER_KEEP_LOGS=1` keeps the workers' logs and prints where.
//! The figures show with `--nocapture`:
//!
//! ```text
//! cargo test -p a2-worker --test failover -- --nocapture
//! A2_FAILOVER_ROUNDS=20 cargo test -p a2-worker --test failover -- --nocapture
//! ```

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2_store::OpenOptions;
use a2_store_api::{ConsumerDeclaration, NewEvent, ReadOptions, Store, StoredEvent, Target};
use a2_worker::{handler_fn, Job, RetryPolicy, Worker};
use common::cluster::{Cluster, ClusterOptions, Failover};
use common::processes::{start_child, stop_worker};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

const CONSUMER: &str = "agent";
const INPUT: &str = "job";
const OUTPUT: &str = "out";

const CHILD_URL: &str = "A2_FAILOVER_CHILD_URL";
const CHILD_HOLDER: &str = "A2_FAILOVER_CHILD_HOLDER";
const CHILD_LOG: &str = "A2_FAILOVER_CHILD_LOG";

/// The issue's targets: workers resume within this long of a promotion.
const RESUME_P50: Duration = Duration::from_secs(5);
const RESUME_MAX: Duration = Duration::from_secs(15);

/// How long after each kill the standby is promoted, in turn (ms): the
/// outage a failover manager's detection makes, during which calls fail
/// and the workers' claim backoff grows.
const PROMOTION_DELAYS: &[u64] = &[1_000, 3_000, 0, 2_000, 500];

/// The workload and its rhythm.
#[derive(Debug)]
struct Plan {
    rounds: usize,
    /// Kill to promotion, ms, in turn.
    promotion_delays: Vec<u64>,
    workers: usize,
    sessions: usize,
    producers: usize,
    /// Jobs appended per second, over all producers.
    rate: f64,
    /// Load before the first kill (and the window of "jobs/s before").
    warmup: Duration,
    /// From a promotion to the making of the next standby.
    after_promotion: Duration,
    /// From a synchronous standby being back to the next kill.
    between: Duration,
    /// Load after the last failover (the window of "jobs/s after").
    tail: Duration,
}

impl Plan {
    fn from_env() -> Self {
        let number = |name: &str, default: f64| match std::env::var(name) {
            Ok(text) => text
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("{name}={text}: not a number")),
            Err(_) => default,
        };
        let promotion_delays = match std::env::var("A2_FAILOVER_PROMOTION_DELAYS_MS") {
            Ok(list) => list
                .split(',')
                .map(|ms| {
                    ms.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("{ms:?} in {list:?}: not a number of ms"))
                })
                .collect(),
            Err(_) => PROMOTION_DELAYS.to_vec(),
        };
        assert!(!promotion_delays.is_empty(), "no promotion delays");
        Self {
            rounds: number("A2_FAILOVER_ROUNDS", 2.0) as usize,
            promotion_delays,
            workers: 3,
            sessions: 200,
            producers: 4,
            rate: number("A2_FAILOVER_RATE", 100.0),
            warmup: Duration::from_secs(6),
            after_promotion: Duration::from_secs(3),
            between: Duration::from_secs(3),
            tail: Duration::from_secs(6),
        }
    }
}

fn now_ms() -> i64 {
    ms(SystemTime::now())
}

fn ms(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// Opens the store at `url`, trying again for a minute (a server may be
/// failing over).
async fn open_retrying(url: &str) -> Arc<dyn Store> {
    let start = Instant::now();
    loop {
        match a2_store::open(url, OpenOptions::default()).await {
            Ok(store) => return store,
            Err(error) if start.elapsed() < Duration::from_secs(60) => {
                eprintln!("open failed, trying again: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("open {url}: {error}"),
        }
    }
}

/// The workers' log directory: deleted at the end, or kept.
enum Kept {
    Temp(tempfile::TempDir),
    Path(PathBuf),
}

impl Kept {
    fn path(&self) -> &Path {
        match self {
            Self::Temp(dir) => dir.path(),
            Self::Path(path) => path,
        }
    }
}

/// One appended input the producer was told is stored.
#[derive(Debug, Clone)]
struct Acked {
    session: String,
    id: String,
    index: u64,
    lane: Option<String>,
    at_ms: i64,
}

/// A store error the producer saw.
#[derive(Debug, Clone)]
struct SeenError {
    at_ms: i64,
    code: String,
    text: String,
}

#[derive(Debug, Default)]
struct ProducerLog {
    acked: Vec<Acked>,
    errors: Vec<SeenError>,
    /// Batches refused with an error no repeat cures.
    refused: Vec<SeenError>,
}

/// The input batch number `seq` of `session`: one job on a lane (`L0`,
/// `L1` in turn, so lane order can be checked) and one on its own event
/// cursor, with ids fixed by the batch so that a repeat is a replay.
fn batch(session: &str, seq: u64) -> Vec<NewEvent> {
    let lane = format!("L{}", seq % 2);
    vec![
        NewEvent::new(INPUT, json!({"seq": seq, "lane": lane}))
            .with_id(format!("in-{session}-{seq}-lane"))
            .with_target(Target::lane(CONSUMER, lane)),
        NewEvent::new(INPUT, json!({"seq": seq}))
            .with_id(format!("in-{session}-{seq}-event"))
            .with_target(Target::event(CONSUMER)),
    ]
}

/// Appends batches to `sessions` in turn at `rate` jobs/s until `stop`,
/// repeating each batch (same ids) until it is acknowledged.
async fn produce(
    store: Arc<dyn Store>,
    sessions: Vec<String>,
    rate: f64,
    mut stop: watch::Receiver<bool>,
    log: Arc<Mutex<ProducerLog>>,
) {
    let interval = Duration::from_secs_f64(2.0 / rate);
    let mut next = tokio::time::Instant::now();
    let mut seqs = vec![0u64; sessions.len()];
    for turn in 0.. {
        if *stop.borrow() {
            return;
        }
        let slot = turn % sessions.len();
        let session = &sessions[slot];
        let events = batch(session, seqs[slot]);
        seqs[slot] += 1;
        let started = Instant::now();
        loop {
            let call = store.append(session, events.clone(), Default::default());
            let (error, retryable) = match tokio::time::timeout(Duration::from_secs(30), call).await
            {
                Ok(Ok(result)) => {
                    let at_ms = now_ms();
                    let mut log = log.lock().unwrap();
                    for (sent, stored) in events.iter().zip(&result.events) {
                        log.acked.push(Acked {
                            session: session.clone(),
                            id: stored.id.clone(),
                            index: stored.index,
                            lane: sent.targets[0].lane.clone(),
                            at_ms,
                        });
                    }
                    break;
                }
                // The contract: a server lost or failing over answers an
                // error that says a repeat may cure it; any other refuses.
                Ok(Err(error)) => (
                    SeenError {
                        at_ms: now_ms(),
                        code: error.code().as_str().to_owned(),
                        text: error.to_string(),
                    },
                    error.is_retryable(),
                ),
                // Repeated, and reported: every call is bounded by the store.
                Err(_) => (
                    SeenError {
                        at_ms: now_ms(),
                        code: "NO ANSWER".to_owned(),
                        text: "append gave no answer within 30 s".to_owned(),
                    },
                    true,
                ),
            };
            if !retryable {
                log.lock().unwrap().refused.push(error);
                break;
            }
            log.lock().unwrap().errors.push(error);
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "an append to {session} unacknowledged for 2 minutes"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Paced, without bursts to catch up after an outage.
        next = (next + interval).max(tokio::time::Instant::now());
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            _ = stop.changed() => {}
        }
    }
}

/// A line of a worker process's log.
#[derive(Debug, Clone)]
struct Line(Map<String, Value>);

impl Line {
    fn str(&self, key: &str) -> &str {
        self.0.get(key).and_then(Value::as_str).unwrap_or("")
    }

    fn num(&self, key: &str) -> i64 {
        self.0.get(key).and_then(Value::as_i64).unwrap_or(-1)
    }

    /// (session, consumer, lane, index, attempt).
    fn attempt(&self) -> AttemptKey {
        AttemptKey {
            session: self.str("session").to_owned(),
            consumer: self.str("consumer").to_owned(),
            lane: self.str("lane").to_owned(),
            index: self.num("index") as u64,
            attempt: self.num("attempt") as u32,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct AttemptKey {
    session: String,
    consumer: String,
    lane: String,
    index: u64,
    attempt: u32,
}

impl fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "({}, {}, {}, {}, attempt {})",
            self.session, self.consumer, self.lane, self.index, self.attempt
        )
    }
}

fn read_lines(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| match serde_json::from_str(line) {
            Ok(Value::Object(map)) => Line(map),
            _ => panic!("not a JSON object in {}: {line}", path.display()),
        })
        .collect()
}

/// The nearest-rank percentile `p` (0 to 1) of sorted `values`.
fn percentile(sorted: &[i64], p: f64) -> i64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Reads the whole log of every session.
async fn read_all(store: &dyn Store, sessions: &[String]) -> BTreeMap<String, Vec<StoredEvent>> {
    let mut logs = BTreeMap::new();
    for session in sessions {
        let rows = store
            .read(session, ReadOptions::default())
            .await
            .unwrap_or_else(|error| panic!("read {session}: {error}"));
        logs.insert(session.clone(), rows);
    }
    logs
}

/// How many acknowledged inputs have no output yet.
fn missing_outputs(acked: &[Acked], logs: &BTreeMap<String, Vec<StoredEvent>>) -> usize {
    let outputs: HashSet<(&str, u64)> = logs
        .iter()
        .flat_map(|(session, rows)| {
            rows.iter()
                .filter(|event| event.event_type == OUTPUT)
                .filter_map(move |event| Some((session.as_str(), event.cause.as_ref()?.index)))
        })
        .collect();
    acked
        .iter()
        .filter(|input| !outputs.contains(&(input.session.as_str(), input.index)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_primary_killed_under_load() {
    let plan = Plan::from_env();
    println!("failover: {plan:?}");
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(ClusterOptions::default()));
    let schema = a2_store::postgres::fresh_schema_name("a2fo_").expect("schema name");
    let url = cluster.url(
        "postgres",
        &format!("schema={schema}&pool_size=4&connect_timeout=2"),
    );
    println!("failover: {url}");
    let store = open_retrying(&url).await;
    let logs_dir = tempfile::Builder::new()
        .prefix("a2-failover-")
        .tempdir()
        .expect("a directory for the logs");
    // The workers' logs and standard error outlive the test when asked.
    let logs_dir = if std::env::var_os("A2_FAILOVER_KEEP_LOGS").is_some() {
        let kept = logs_dir.keep();
        println!("failover: worker logs in {}", kept.display());
        Kept::Path(kept)
    } else {
        Kept::Temp(logs_dir)
    };

    let mut workers = Vec::new();
    let mut log_paths = Vec::new();
    for n in 0..plan.workers {
        let holder = format!("fo-w{n}");
        let path = logs_dir.path().join(format!("{holder}.jsonl"));
        let stderr = File::create(logs_dir.path().join(format!("{holder}.stderr")))
            .expect("create a stderr file");
        let path_text = path.display().to_string();
        workers.push(start_child(
            "failover_worker_process",
            &[
                (CHILD_URL, url.as_str()),
                (CHILD_HOLDER, holder.as_str()),
                (CHILD_LOG, path_text.as_str()),
            ],
            Stdio::from(stderr),
        ));
        log_paths.push((holder, path));
    }

    let sessions: Vec<String> = (0..plan.sessions).map(|n| format!("fo-{n:03}")).collect();
    let producer_log = Arc::new(Mutex::new(ProducerLog::default()));
    let (stop, stopped) = watch::channel(false);
    let producers: Vec<_> = (0..plan.producers)
        .map(|k| {
            let mine: Vec<String> = sessions
                .iter()
                .skip(k)
                .step_by(plan.producers)
                .cloned()
                .collect();
            tokio::spawn(produce(
                Arc::clone(&store),
                mine,
                plan.rate / plan.producers as f64,
                stopped.clone(),
                Arc::clone(&producer_log),
            ))
        })
        .collect();

    let load_start = now_ms();
    tokio::time::sleep(plan.warmup).await;
    let mut failovers: Vec<Failover> = Vec::new();
    for round in 0..plan.rounds {
        let delay = plan.promotion_delays[round % plan.promotion_delays.len()];
        let failover =
            tokio::task::block_in_place(|| cluster.failover_after(Duration::from_millis(delay)));
        println!(
            "failover {}: killed :{}, promoted :{} {} ms later",
            round + 1,
            failover.killed,
            failover.promoted,
            ms(failover.promoted_at) - ms(failover.killed_at)
        );
        failovers.push(failover);
        tokio::time::sleep(plan.after_promotion).await;
        let rebuilt = Instant::now();
        tokio::task::block_in_place(|| cluster.replace_standby());
        println!(
            "failover {}: synchronous standby on :{} again after {} ms",
            round + 1,
            failover.killed,
            rebuilt.elapsed().as_millis()
        );
        if round + 1 < plan.rounds {
            tokio::time::sleep(plan.between).await;
        }
    }
    let tail_start = now_ms();
    tokio::time::sleep(plan.tail).await;
    stop.send_replace(true);
    for producer in producers {
        producer.await.expect("a producer panicked");
    }
    let load_end = now_ms();

    // The drain: every acknowledged input answered, or two minutes.
    let primary_url = format!("{}?schema={schema}", cluster.primary().url("postgres"));
    let final_store = open_retrying(&primary_url).await;
    // The producers are done: their log is the test's now.
    let producer = std::mem::take(&mut *producer_log.lock().unwrap());
    let drain_start = Instant::now();
    let mut final_logs = read_all(final_store.as_ref(), &sessions).await;
    while missing_outputs(&producer.acked, &final_logs) > 0
        && drain_start.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        final_logs = read_all(final_store.as_ref(), &sessions).await;
    }
    let mut summaries = Vec::new();
    for worker in workers {
        summaries.push(stop_worker(worker).await);
    }
    // Read again after the workers stopped: nothing may have come since.
    let final_logs_after = read_all(final_store.as_ref(), &sessions).await;
    let rows = |logs: &BTreeMap<String, Vec<StoredEvent>>| {
        logs.values().map(Vec::len).sum::<usize>() as i64
    };
    let later = rows(&final_logs_after) - rows(&final_logs);
    let final_logs = final_logs_after;

    let worker_logs: Vec<(String, Vec<Line>)> = log_paths
        .iter()
        .map(|(holder, path)| (holder.clone(), read_lines(path)))
        .collect();
    let mut dead = 0;
    let mut open_heads = 0;
    for session in &sessions {
        dead += final_store
            .dead_letters(session)
            .await
            .expect("dead letters")
            .len();
        open_heads += final_store
            .cursors(session)
            .await
            .expect("cursors")
            .iter()
            .filter(|cursor| cursor.head.is_some())
            .count();
    }
    let run = Run {
        plan,
        failovers,
        producer,
        final_logs,
        worker_logs,
        summaries,
        later,
        dead,
        open_heads,
        load_start,
        tail_start,
        load_end,
        drain_ms: drain_start.elapsed().as_millis() as i64,
    };
    let verdict = Verdict::of(&run);
    verdict.print(&run);
    verdict.assert_contract(&run);
    drop(cluster);
}

/// What a run left to check: the producer's acknowledgements, the final
/// log, the workers' logs and summaries, the failovers.
struct Run {
    plan: Plan,
    failovers: Vec<Failover>,
    producer: ProducerLog,
    final_logs: BTreeMap<String, Vec<StoredEvent>>,
    worker_logs: Vec<(String, Vec<Line>)>,
    summaries: Vec<Vec<(String, u64)>>,
    /// Rows that appeared after the workers stopped.
    later: i64,
    dead: usize,
    open_heads: usize,
    load_start: i64,
    tail_start: i64,
    load_end: i64,
    drain_ms: i64,
}

impl Run {
    /// The window from failover `n`'s promotion (or kill) to the next kill.
    fn until_next(&self, n: usize) -> i64 {
        self.failovers
            .get(n + 1)
            .map_or(i64::MAX, |next| ms(next.killed_at))
    }
}

/// The checks of a run, counted, with the first examples of each breach.
#[derive(Default)]
struct Verdict {
    problems: Vec<String>,
    lost_inputs: usize,
    unacked_inputs: usize,
    lost_jobs: usize,
    lost_completions: usize,
    doubled_jobs: usize,
    answered: usize,
    lane_order_breaks: usize,
    reissued: usize,
    completed_twice: usize,
    jobs_completed_twice: usize,
    /// Per failover, per worker: ms from the promotion to its first
    /// completion (`None`: none before the next kill).
    resumes: Vec<Vec<(String, Option<i64>)>>,
    completions_at: Vec<i64>,
    /// For each acknowledged input whose first attempt started: when it
    /// was acknowledged and how long after that its handler started (ms).
    start_latencies: Vec<(i64, i64)>,
    worker_problems: BTreeMap<String, usize>,
}

impl Verdict {
    fn of(run: &Run) -> Self {
        let mut verdict = Self::default();
        verdict.check_inputs(run);
        verdict.check_outputs(run);
        verdict.check_attempts(run);
        verdict.measure_resumes(run);
        verdict
    }

    /// Every acknowledged input is where it was acknowledged; no other.
    fn check_inputs(&mut self, run: &Run) {
        let mut inputs: HashMap<(&str, u64), &StoredEvent> = HashMap::new();
        for (session, rows) in &run.final_logs {
            for event in rows.iter().filter(|event| event.event_type == INPUT) {
                inputs.insert((session, event.index), event);
            }
        }
        for input in &run.producer.acked {
            match inputs.get(&(input.session.as_str(), input.index)) {
                Some(event) if event.id == input.id => {}
                other => {
                    self.lost_inputs += 1;
                    self.problems.push(format!(
                        "acknowledged input {} of {} at {} is not there: {:?}",
                        input.id,
                        input.session,
                        input.index,
                        other.map(|event| &event.id)
                    ));
                }
            }
        }
        let acked: HashSet<(&str, &str)> = run
            .producer
            .acked
            .iter()
            .map(|input| (input.session.as_str(), input.id.as_str()))
            .collect();
        self.unacked_inputs = inputs
            .values()
            .filter(|event| !acked.contains(&(event.session_id.as_str(), event.id.as_str())))
            .count();
        if self.unacked_inputs > 0 {
            self.problems.push(format!(
                "{} inputs stored that the producer never saw acknowledged",
                self.unacked_inputs
            ));
        }
        let unanswered = run
            .producer
            .errors
            .iter()
            .filter(|error| error.code == "NO ANSWER")
            .count();
        if unanswered > 0 {
            self.problems.push(format!(
                "{unanswered} appends gave no answer within 30 s (the store bounds every call)"
            ));
        }
        for refused in &run.producer.refused {
            self.problems
                .push(format!("append refused: {} {}", refused.code, refused.text));
        }
    }

    /// Exactly one output per acknowledged input, from its lane, and the
    /// outputs of a lane in the order of its inputs.
    fn check_outputs(&mut self, run: &Run) {
        let mut outputs_by_input: HashMap<(&str, u64), Vec<&StoredEvent>> = HashMap::new();
        for (session, rows) in &run.final_logs {
            let mut last_by_lane: HashMap<&str, u64> = HashMap::new();
            for event in rows.iter().filter(|event| event.event_type == OUTPUT) {
                let Some(cause) = &event.cause else {
                    self.problems
                        .push(format!("output {} of {session} has no cause", event.id));
                    continue;
                };
                outputs_by_input
                    .entry((session, cause.index))
                    .or_default()
                    .push(event);
                if let Some(lane) = &cause.lane {
                    let last = last_by_lane.entry(lane).or_default();
                    if cause.index <= *last {
                        self.lane_order_breaks += 1;
                        self.problems.push(format!(
                            "{session} lane {lane}: output for {} after the one for {}",
                            cause.index, *last
                        ));
                    }
                    *last = cause.index;
                }
            }
        }
        for input in &run.producer.acked {
            let outputs = outputs_by_input
                .get(&(input.session.as_str(), input.index))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            match outputs {
                [] => {
                    self.lost_jobs += 1;
                    self.problems
                        .push(format!("input {} has no output", input.id));
                }
                [output] => {
                    let cause = output.cause.as_ref().expect("checked above");
                    if cause.lane != input.lane || output.id != format!("out-{}", input.id) {
                        self.problems.push(format!(
                            "output {} answers {} on lane {:?}, its cause says lane {:?}",
                            output.id, input.id, input.lane, cause.lane
                        ));
                    }
                }
                _ => {
                    self.doubled_jobs += 1;
                    self.problems
                        .push(format!("input {} has {} outputs", input.id, outputs.len()));
                }
            }
        }
        self.answered = outputs_by_input.values().map(Vec::len).sum();
    }

    /// No attempt started twice (an attempt number issued twice for one
    /// head), none told completed twice, at most one attempt of a job told
    /// completed, each completion told in the log with its own output, and
    /// each output from an attempt a handler ran.
    fn check_attempts(&mut self, run: &Run) {
        let acked_at: HashMap<(&str, u64), i64> = run
            .producer
            .acked
            .iter()
            .map(|input| ((input.session.as_str(), input.index), input.at_ms))
            .collect();
        let mut starts: HashMap<AttemptKey, Vec<&str>> = HashMap::new();
        let mut completed: HashMap<AttemptKey, usize> = HashMap::new();
        for (holder, lines) in &run.worker_logs {
            for line in lines {
                match (line.str("kind"), line.str("message")) {
                    ("start", _) => {
                        let key = line.attempt();
                        if key.attempt == 1 {
                            if let Some(at) = acked_at.get(&(key.session.as_str(), key.index)) {
                                // The start may precede the acknowledgement's arrival.
                                let latency = (line.num("t_ms") - at).max(0);
                                self.start_latencies.push((*at, latency));
                            }
                        }
                        starts.entry(key).or_default().push(holder);
                    }
                    ("event", "completed") => {
                        *completed.entry(line.attempt()).or_default() += 1;
                        self.completions_at.push(line.num("t_ms"));
                    }
                    ("event", message) if line.str("level") != "INFO" => {
                        let error: String = line.str("error").chars().take(160).collect();
                        *self
                            .worker_problems
                            .entry(format!("{} {message}: {error}", line.str("level")))
                            .or_default() += 1;
                    }
                    _ => {}
                }
            }
        }
        for (key, holders) in &starts {
            if holders.len() > 1 {
                self.reissued += 1;
                self.problems.push(format!("{key} started by {holders:?}"));
            }
        }
        let mut completed_by_job: HashMap<(&str, &str, &str, u64), usize> = HashMap::new();
        for (key, count) in &completed {
            if *count > 1 {
                self.completed_twice += 1;
                self.problems
                    .push(format!("{key} told completed {count} times"));
            }
            *completed_by_job
                .entry((&key.session, &key.consumer, &key.lane, key.index))
                .or_default() += 1;
        }
        self.jobs_completed_twice = completed_by_job.values().filter(|n| **n > 1).count();
        let mut output_attempts: HashSet<AttemptKey> = HashSet::new();
        for (session, rows) in &run.final_logs {
            for output in rows.iter().filter(|event| event.event_type == OUTPUT) {
                let Some(cause) = &output.cause else { continue };
                let key = AttemptKey {
                    session: session.clone(),
                    consumer: cause.consumer.clone(),
                    lane: cause.lane.clone().unwrap_or_default(),
                    index: cause.index,
                    attempt: cause.attempt,
                };
                if !starts.contains_key(&key) {
                    self.problems.push(format!(
                        "output {} from {key}, which no handler ran",
                        output.id
                    ));
                }
                output_attempts.insert(key);
            }
        }
        // Another attempt's output in place of the one told completed
        // would mean that completion was lost and the job done again.
        for key in completed.keys() {
            if !output_attempts.contains(key) {
                self.lost_completions += 1;
                self.problems.push(format!(
                    "{key} told completed, its output is not in the log"
                ));
            }
        }
    }

    /// Per failover and worker: from the promotion to the worker's first
    /// completion after it.
    fn measure_resumes(&mut self, run: &Run) {
        for (n, failover) in run.failovers.iter().enumerate() {
            let from = ms(failover.promoted_at);
            let until = run.until_next(n);
            let mut row = Vec::new();
            for (holder, lines) in &run.worker_logs {
                let first = lines
                    .iter()
                    .filter(|line| {
                        line.str("kind") == "event" && line.str("message") == "completed"
                    })
                    .map(|line| line.num("t_ms"))
                    .filter(|at| *at >= from && *at < until)
                    .min();
                if first.is_none() {
                    self.problems.push(format!(
                        "{holder} completed nothing between failover {} and the next",
                        n + 1
                    ));
                }
                row.push((holder.clone(), first.map(|at| at - from)));
            }
            self.resumes.push(row);
        }
    }

    /// Resume times, sorted, a worker that never resumed as `i64::MAX`.
    fn resume_figures(&self) -> (usize, i64, i64) {
        let mut all: Vec<i64> = self
            .resumes
            .iter()
            .flatten()
            .map(|(_, resume)| resume.unwrap_or(i64::MAX))
            .collect();
        all.sort_unstable();
        match all.last() {
            Some(max) => (all.len(), percentile(&all, 0.5), *max),
            None => (0, 0, 0),
        }
    }

    /// Completions per second between `from` and `to` (ms).
    fn rate(&self, from: i64, to: i64) -> f64 {
        let count = self
            .completions_at
            .iter()
            .filter(|at| **at >= from && **at < to)
            .count();
        count as f64 * 1000.0 / (to - from).max(1) as f64
    }

    /// Append → first handler start of the inputs acknowledged between
    /// `from` and `to` (ms): p50 and p99.
    fn start_latency(&self, from: i64, to: i64) -> (i64, i64) {
        let mut latencies: Vec<i64> = self
            .start_latencies
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, latency)| *latency)
            .collect();
        latencies.sort_unstable();
        if latencies.is_empty() {
            return (-1, -1);
        }
        (percentile(&latencies, 0.5), percentile(&latencies, 0.99))
    }

    fn print(&self, run: &Run) {
        for (n, row) in self.resumes.iter().enumerate() {
            let row: Vec<String> = row
                .iter()
                .map(|(holder, resume)| match resume {
                    Some(ms) => format!("{holder} {ms} ms"),
                    None => format!("{holder} never"),
                })
                .collect();
            // Append -> start from a second after the promotion to the next
            // kill: a trend over the rounds would show wake-ups wearing off.
            let promoted = ms(run.failovers[n].promoted_at);
            let (p50, p99) =
                self.start_latency(promoted + 1000, run.until_next(n).min(run.load_end));
            println!(
                "failover {}: resumed {}; append -> start then p50 {p50} ms, p99 {p99} ms",
                n + 1,
                row.join(", ")
            );
        }
        let producer = &run.producer;
        for (n, failover) in run.failovers.iter().enumerate() {
            let (killed, promoted) = (ms(failover.killed_at), ms(failover.promoted_at));
            let errors: Vec<i64> = producer
                .errors
                .iter()
                .filter(|error| error.at_ms >= killed && error.at_ms < run.until_next(n))
                .map(|error| error.at_ms - killed)
                .collect();
            let first_ack = producer
                .acked
                .iter()
                .map(|input| input.at_ms)
                .filter(|at| *at >= promoted)
                .min();
            println!(
                "failover {}: producer: {} errors, the first {:?} ms after the kill; \
                 first acknowledgement {:?} ms after the promotion",
                n + 1,
                errors.len(),
                errors.first(),
                first_ack.map(|at| at - promoted)
            );
        }
        println!(
            "failover: {} failovers, {} jobs acknowledged over {:.1} s, {} answered; \
             lost {} (inputs {}, acknowledged completions {}), doubled {}, \
             attempts issued twice {}, attempts told completed twice {}, \
             jobs told completed twice {}, lane order breaks {}, dead letters {}, \
             open heads {}, rows after the workers stopped {}",
            run.failovers.len(),
            producer.acked.len(),
            (run.load_end - run.load_start) as f64 / 1000.0,
            self.answered,
            self.lost_jobs,
            self.lost_inputs,
            self.lost_completions,
            self.doubled_jobs,
            self.reissued,
            self.completed_twice,
            self.jobs_completed_twice,
            self.lane_order_breaks,
            run.dead,
            run.open_heads,
            run.later
        );
        let (samples, p50, max) = self.resume_figures();
        let first_kill = run
            .failovers
            .first()
            .map_or(run.tail_start, |f| ms(f.killed_at));
        // The warm-up's first second left out: the workers start then.
        let warm_from =
            (first_kill - run.plan.warmup.as_millis() as i64 + 1000).max(run.load_start);
        println!(
            "failover: resume after promotion p50 {p50} ms, max {} ({samples} samples); \
             jobs/s completed before {:.0}, after {:.0}; drain {} ms",
            if max == i64::MAX {
                "never".to_owned()
            } else {
                format!("{max} ms")
            },
            self.rate(warm_from, first_kill),
            self.rate(run.tail_start, run.load_end),
            run.drain_ms
        );
        // A worker with free slots waits in the store for work and is
        // woken by it: the same figures after the failovers as before
        // mean the wake-ups came back with the new primary.
        let (before_p50, before_p99) = self.start_latency(warm_from, first_kill);
        let (after_p50, after_p99) = self.start_latency(run.tail_start, run.load_end);
        println!(
            "failover: append -> handler start p50 {before_p50} ms, p99 {before_p99} ms before; \
             p50 {after_p50} ms, p99 {after_p99} ms after"
        );
        println!(
            "failover: producer errors {} (retried), refused {}",
            producer.errors.len(),
            producer.refused.len()
        );
        let mut producer_errors: BTreeMap<String, usize> = BTreeMap::new();
        for error in producer.errors.iter().chain(&producer.refused) {
            let text: String = error.text.chars().take(160).collect();
            *producer_errors
                .entry(format!("{} {text}", error.code))
                .or_default() += 1;
        }
        for (text, count) in &producer_errors {
            println!("  producer {count}x {text}");
        }
        for (text, count) in &self.worker_problems {
            println!("  workers {count}x {text}");
        }
        for summary in &run.summaries {
            println!("  worker summary {summary:?}");
        }
    }

    /// The issue's contract: nothing lost, nothing doubled, no attempt
    /// issued twice, lane order, and the resume targets.
    fn assert_contract(&self, run: &Run) {
        let problems: Vec<&String> = self.problems.iter().take(20).collect();
        assert_eq!(run.failovers.len(), run.plan.rounds);
        assert!(
            run.producer.acked.len() >= 1000,
            "only {} jobs acknowledged",
            run.producer.acked.len()
        );
        assert_eq!(
            self.lost_inputs, 0,
            "acknowledged inputs lost: {problems:#?}"
        );
        assert_eq!(self.lost_jobs, 0, "jobs without an output: {problems:#?}");
        assert_eq!(
            self.lost_completions, 0,
            "acknowledged completions lost: {problems:#?}"
        );
        assert_eq!(self.doubled_jobs, 0, "jobs with two outputs: {problems:#?}");
        assert_eq!(self.reissued, 0, "attempts issued twice: {problems:#?}");
        assert_eq!(
            self.jobs_completed_twice, 0,
            "jobs completed twice: {problems:#?}"
        );
        assert_eq!(
            self.lane_order_breaks, 0,
            "lane order broken: {problems:#?}"
        );
        assert_eq!(run.dead, 0, "dead letters: {problems:#?}");
        assert_eq!(run.open_heads, 0, "heads left with work: {problems:#?}");
        assert_eq!(run.later, 0, "rows appeared after the drain");
        assert!(problems.is_empty(), "{problems:#?}");
        let (_, p50, max) = self.resume_figures();
        assert!(
            max < RESUME_MAX.as_millis() as i64 && p50 < RESUME_P50.as_millis() as i64,
            "workers resumed p50 {p50} ms, max {max} ms after a promotion: the target is \
             p50 < {RESUME_P50:?}, max < {RESUME_MAX:?}"
        );
    }
}

/// A worker process's JSON-lines log: handler starts, written by the
/// handler, and the worker's own events (completion outcomes, claim
/// errors), written by [`Recorder`].
struct JsonLines(Mutex<File>);

impl JsonLines {
    fn write(&self, value: Value) {
        let mut line = value.to_string();
        line.push('\n');
        self.0
            .lock()
            .unwrap()
            .write_all(line.as_bytes())
            .expect("write the log");
    }
}

/// A `tracing` layer writing each INFO-or-worse event of the a2 crates
/// (the claims aside: the handler logs its starts) as a JSON line, with
/// the fields of its spans (`session`, `consumer`, `lane`, `index`,
/// `attempt` for the worker's attempts).
struct Recorder(Arc<JsonLines>);

struct SpanFields(Map<String, Value>);

struct Fields<'a>(&'a mut Map<String, Value>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0
            .insert(field.name().to_owned(), Value::String(value.to_owned()));
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
}

impl<S> tracing_subscriber::Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn enabled(
        &self,
        metadata: &tracing::Metadata<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        *metadata.level() <= tracing::Level::INFO && metadata.target().starts_with("a2")
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Map::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        if fields.get("message").and_then(Value::as_str) == Some("claimed") {
            return;
        }
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(SpanFields(span_fields)) = span.extensions().get::<SpanFields>() {
                    for (name, value) in span_fields {
                        fields.entry(name.clone()).or_insert_with(|| value.clone());
                    }
                }
            }
        }
        fields.insert("kind".into(), json!("event"));
        fields.insert("level".into(), json!(event.metadata().level().as_str()));
        fields.insert("target".into(), json!(event.metadata().target()));
        fields.insert("t_ms".into(), json!(now_ms()));
        self.0.write(Value::Object(fields));
    }
}

/// One worker process of the failover test: opens the store on the
/// multi-host URL and runs a worker whose handler answers each job with one
/// output (its id derived from the input's) until standard input closes,
/// logging each handler start and the worker's events to its log file.
#[test]
#[ignore = "a worker process that the failover test starts itself"]
fn failover_worker_process() {
    use tracing_subscriber::layer::SubscriberExt;

    let url = std::env::var(CHILD_URL).expect("started by the failover test, with a URL");
    let holder = std::env::var(CHILD_HOLDER).expect("a holder");
    let path = PathBuf::from(std::env::var(CHILD_LOG).expect("a log file"));
    let log = Arc::new(JsonLines(Mutex::new(
        File::create(&path).expect("create the log"),
    )));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Recorder(Arc::clone(&log))),
    )
    .expect("the only subscriber");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = open_retrying(&url).await;
        let handler = {
            let (log, holder) = (Arc::clone(&log), holder.clone());
            handler_fn(move |job: Job| {
                let (log, holder) = (Arc::clone(&log), holder.clone());
                async move {
                    log.write(json!({
                        "kind": "start",
                        "session": job.session_id(),
                        "consumer": job.consumer(),
                        "lane": job.lane().unwrap_or(""),
                        "index": job.index(),
                        "attempt": job.attempt(),
                        "holder": holder,
                        "t_ms": now_ms(),
                    }));
                    // Some work to do, so that attempts are in flight at the kill.
                    let work = 20 + job.index() % 9 * 20;
                    tokio::time::sleep(Duration::from_millis(work)).await;
                    let id = format!("out-{}", job.event().id);
                    Ok(vec![NewEvent::new(
                        OUTPUT,
                        json!({"holder": holder, "attempt": job.attempt()}),
                    )
                    .with_id(id)])
                }
            })
        };
        let worker = Worker::builder(store)
            .holder(&holder)
            .consumer(ConsumerDeclaration::targeted(CONSUMER), handler)
            // A head whose completion and failure were both lost with the
            // primary comes back within seconds, not the default 30.
            .lease_ttl(Duration::from_secs(5))
            .retry(RetryPolicy::exponential(
                Duration::from_millis(100),
                Duration::from_secs(2),
                30,
            ))
            .build()
            .expect("worker")
            .spawn()
            .expect("spawn");
        // Runs until the parent closes standard input.
        let _ = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)
        })
        .await;
        let summary = worker.shutdown().await;
        assert_eq!(summary.error, None);
        let stats = summary.stats;
        println!(
            "SUMMARY completed={} failed={} dead_lettered={} released={} superseded={} unsettled={}",
            stats.completed,
            stats.failed,
            stats.dead_lettered,
            stats.released,
            stats.superseded,
            stats.unsettled
        );
    });
}
