//! The worker workloads of `bench`: `runtime` (and `worker`, the same run
//! with workers running `a2-worker`), `idle` and `fairness`.
//!
//! Each run gets a fresh scratch store ([`Home`]); a producer in this
//! process appends at a fixed rate while a [`Fleet`] of workers claims with
//! `claim_work`; after producing, the bench waits until `list_work` shows
//! no message left (or the drain time ends), then stops the workers and
//! summarises their samples.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::{
    AppendOptions, ClaimWorkRequest, CompleteRequest, IdGenerator, ListWork, NewEvent, RandomIds,
    Store,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::fleet::{Fleet, FleetConfig, FleetReport};
use super::home::{BenchTarget, Home, Place};
use super::work_report::{
    worker_lines, FairnessBackend, FairnessSettings, IdleBackend, IdleSettings, Latency,
    RuntimeBackend, RuntimeSettings,
};
use super::worker::{consumers, message, CONSUMER, POLL, WARM_UP};
use crate::args::Runner;
use crate::failure::Failure;

/// Appends in flight at most, producer and setup alike.
const IN_FLIGHT: usize = 64;
/// Events per append while building a backlog.
const BACKLOG_BATCH: usize = 500;

/// What the producer did.
struct Produced {
    /// Messages appended, by class.
    sent: BTreeMap<&'static str, u64>,
    /// Append call latencies, µs.
    append_us: Vec<u64>,
    /// Wall time from the first to the last append's end, s.
    elapsed_s: f64,
}

/// Appends `count` messages at `rate` per second, message `k` going where
/// `plan(k)` says (session, lane, class); appends run concurrently (at most
/// [`IN_FLIGHT`]), so a slow one does not hold the pace back.
async fn produce(
    store: &Arc<dyn Store>,
    label: &str,
    count: u64,
    rate: f64,
    mut plan: impl FnMut(u64) -> (String, String, &'static str),
) -> Result<Produced, Failure> {
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut appends = JoinSet::new();
    let mut sent: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut append_us = Vec::new();
    let started = Instant::now();
    for k in 0..count {
        interval.tick().await;
        let (session, lane, class) = plan(k);
        *sent.entry(class).or_default() += 1;
        let slot = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|_| Failure::new("the producer's slots closed"))?;
        let store = Arc::clone(store);
        appends.spawn(async move {
            let event = message(&lane, class);
            let started = Instant::now();
            let result = store
                .append(&session, vec![event], AppendOptions::default())
                .await;
            drop(slot);
            result
                .map(|_| u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))
                .map_err(|e| (session, e))
        });
        while let Some(done) = appends.try_join_next() {
            append_us.push(appended(done, label)?);
        }
    }
    while let Some(done) = appends.join_next().await {
        append_us.push(appended(done, label)?);
    }
    Ok(Produced {
        sent,
        append_us,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

type AppendOutcome = Result<u64, (String, a2_store::StoreError)>;

fn appended(
    done: Result<AppendOutcome, tokio::task::JoinError>,
    label: &str,
) -> Result<u64, Failure> {
    match done {
        Ok(Ok(us)) => Ok(us),
        Ok(Err((session, error))) => Err(Failure::store(
            label,
            &format!("appending to session '{session}'"),
            &error,
        )),
        Err(join) => Err(Failure::new(format!("an append task failed: {join}"))),
    }
}

/// Appends `events(n)` to every session of `ids`, [`IN_FLIGHT`] at a time.
async fn setup_sessions(
    store: &Arc<dyn Store>,
    label: &str,
    ids: &[String],
    events: impl Fn(usize) -> Vec<NewEvent>,
) -> Result<(), Failure> {
    let mut tasks = JoinSet::new();
    for (n, id) in ids.iter().enumerate() {
        if tasks.len() >= IN_FLIGHT {
            if let Some(done) = tasks.join_next().await {
                setup_done(done, label)?;
            }
        }
        let store = Arc::clone(store);
        let id = id.clone();
        let batch = events(n);
        tasks.spawn(async move {
            store
                .append(&id, batch, AppendOptions::default())
                .await
                .map(|_| ())
                .map_err(|e| (id, e))
        });
    }
    while let Some(done) = tasks.join_next().await {
        setup_done(done, label)?;
    }
    Ok(())
}

fn setup_done(
    done: Result<Result<(), (String, a2_store::StoreError)>, tokio::task::JoinError>,
    label: &str,
) -> Result<(), Failure> {
    match done {
        Ok(Ok(())) => Ok(()),
        Ok(Err((session, error))) => Err(Failure::store(
            label,
            &format!("setting up session '{session}'"),
            &error,
        )),
        Err(join) => Err(Failure::new(format!("a setup task failed: {join}"))),
    }
}

/// Claims and completes every head of [`CONSUMER`] from this process
/// until the store is settled (setup of `idle`).
async fn complete_everything(store: &Arc<dyn Store>, label: &str) -> Result<(), Failure> {
    let request = ClaimWorkRequest::new("a2-bench-setup", consumers(), 60_000).with_limit(1_000);
    loop {
        let result = store
            .claim_work(request.clone())
            .await
            .map_err(|e| Failure::store(label, "claiming setup work", &e))?;
        let heads: Vec<CompleteRequest> = result
            .heads()
            .map(|(session_id, head)| CompleteRequest {
                incarnation: None,
                session_id: session_id.to_owned(),
                consumer: head.consumer.clone(),
                lane: head.lane.clone(),
                index: head.event.index,
                attempt: head.dispatch.attempt_count,
                events: Vec::new(),
                consumers: Some(consumers()),
            })
            .collect();
        if heads.is_empty() {
            return Ok(());
        }
        let mut tasks = JoinSet::new();
        for request in heads {
            if tasks.len() >= IN_FLIGHT {
                if let Some(done) = tasks.join_next().await {
                    complete_done(done, label)?;
                }
            }
            let store = Arc::clone(store);
            tasks.spawn(async move { store.complete_attempt(request).await.map(|_| ()) });
        }
        while let Some(done) = tasks.join_next().await {
            complete_done(done, label)?;
        }
    }
}

fn complete_done(
    done: Result<Result<(), a2_store::StoreError>, tokio::task::JoinError>,
    label: &str,
) -> Result<(), Failure> {
    match done {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(Failure::store(label, "completing setup work", &error)),
        Err(join) => Err(Failure::new(format!("a setup task failed: {join}"))),
    }
}

/// Waits until no session but `ignore` has work of [`CONSUMER`] (claimable
/// or claimed), checking the workers meanwhile; `false` when `within` ends first.
async fn wait_drained(
    store: &Arc<dyn Store>,
    label: &str,
    fleet: &mut Fleet,
    ignore: Option<&str>,
    within: Duration,
) -> Result<bool, Failure> {
    let deadline = Instant::now() + within;
    loop {
        let page = store
            .list_work(ListWork {
                consumers: vec![CONSUMER.to_owned()],
                after: None,
                limit: Some(2),
            })
            .await
            .map_err(|e| Failure::store(label, "listing work", &e))?;
        if page
            .iter()
            .all(|work| Some(work.session_id.as_str()) == ignore)
        {
            return Ok(true);
        }
        fleet.check_alive().await?;
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The warm-up before a timed part: `seconds` of messages at `rate`, the
/// `k`th to where `place(k)` says (session, lane), claimed by the fleet
/// but counted nowhere ([`WARM_UP`]).
async fn warm_up(
    store: &Arc<dyn Store>,
    label: &str,
    seconds: f64,
    rate: f64,
    mut place: impl FnMut(u64) -> (String, String),
) -> Result<(), Failure> {
    if seconds <= 0.0 {
        return Ok(());
    }
    let count = (rate * seconds).ceil() as u64;
    produce(store, label, count, rate, |k| {
        let (session, lane) = place(k);
        (session, lane, WARM_UP)
    })
    .await
    .map(|_| ())
}

/// Unique session ids of one run.
fn run_prefix() -> String {
    format!("a2-bench-{}", RandomIds.next_id())
}

/// The samples of `class` from every worker.
fn samples(fleet: &FleetReport, class: &str) -> Vec<u64> {
    fleet
        .workers
        .iter()
        .filter_map(|w| w.samples.get(class))
        .flatten()
        .copied()
        .collect()
}

/// A spinner on stderr saying what runs, hidden when stderr is not a terminal.
fn status(message: String) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}") {
        bar.set_style(style);
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// A fleet of claim loops.
fn fleet_config(workers: u32, wait_ms: i64, claim_limit: u32) -> FleetConfig {
    FleetConfig {
        workers,
        wait_ms,
        claim_limit,
        runner: Runner::Loop,
        max_in_flight: 1,
    }
}

/// `runtime` against one target, its workers running `runner` (`Loop`:
/// the `runtime` workload; `A2Worker`: the `worker` workload, each running
/// `settings.max_in_flight` heads at once).
pub async fn runtime(
    target: &BenchTarget,
    settings: &RuntimeSettings,
    drain: Duration,
    runner: Runner,
) -> Result<RuntimeBackend, Failure> {
    let mut home = Home::new(target)?;
    let result = runtime_in(&mut home, target, settings, drain, runner).await;
    finish(&home, result).await
}

async fn runtime_in(
    home: &mut Home,
    target: &BenchTarget,
    s: &RuntimeSettings,
    drain: Duration,
    runner: Runner,
) -> Result<RuntimeBackend, Failure> {
    let label = target.label.as_str();
    let workload = match runner {
        Runner::Loop => "runtime",
        Runner::A2Worker => "worker",
    };
    let progress = status(format!(
        "{workload} on {label}: setting up {} sessions",
        s.sessions
    ));
    let (store, place) = home.fresh(label).await?;
    let prefix = run_prefix();
    let existing: Vec<String> = (0..s.sessions).map(|n| format!("{prefix}-{n}")).collect();
    // The sessions exist, with nothing to do.
    setup_sessions(&store, label, &existing, |_| {
        vec![NewEvent::new("hello", json!({}))]
    })
    .await?;
    progress.set_message(format!(
        "{workload} on {label}: starting {} workers",
        s.workers
    ));
    let config = FleetConfig {
        runner,
        max_in_flight: s.max_in_flight.unwrap_or(1),
        ..fleet_config(s.workers, s.wait_ms, s.claim_limit)
    };
    let mut fleet = Fleet::start(&store, &target.base_url, &place, config).await?;
    let sessions = u64::from(s.sessions);
    let lanes = u64::from(s.lanes);
    // Existing session and lane of the `n`th message to one.
    let existing_lane = |n: u64| {
        (
            existing[usize::try_from(n % sessions).unwrap_or(0)].clone(),
            format!("lane-{}", (n / sessions) % lanes),
        )
    };
    progress.set_message(format!("{workload} on {label}: warming up"));
    if let Err(failure) = warm_up(&store, label, s.warm_up_s, s.rate, existing_lane).await {
        let _ = fleet.stop().await;
        return Err(failure);
    }
    progress.set_message(format!("{workload} on {label}: producing {} msg/s", s.rate));
    let began = Instant::now();
    let count = (s.rate * s.seconds).ceil().max(1.0) as u64;
    let mut steady: u64 = 0;
    let mut fresh: u64 = 0;
    let new_every = u64::from(s.new_every);
    let produced = produce(&store, label, count, s.rate, |k| {
        if new_every > 0 && (k + 1) % new_every == 0 {
            fresh += 1;
            (format!("{prefix}-new-{fresh}"), "lane-0".to_owned(), "new")
        } else {
            let (session, lane) = existing_lane(steady);
            steady += 1;
            (session, lane, "existing")
        }
    })
    .await;
    let produced = match produced {
        Ok(produced) => produced,
        Err(failure) => {
            let _ = fleet.stop().await;
            return Err(failure);
        }
    };
    progress.set_message(format!(
        "{workload} on {label}: waiting for the workers to claim everything"
    ));
    let drained = wait_drained(&store, label, &mut fleet, None, drain).await?;
    let busy_s = began.elapsed().as_secs_f64();
    let report = fleet.stop().await?;
    progress.finish_and_clear();
    let mut all = samples(&report, "existing");
    let mut new = samples(&report, "new");
    all.extend(&new);
    let sent: u64 = produced.sent.values().sum();
    let mut append_us = produced.append_us;
    Ok(RuntimeBackend {
        url: target.label.clone(),
        worker_processes: !matches!(place, Place::InProcess),
        sent,
        sent_new: produced.sent.get("new").copied().unwrap_or(0),
        claimed: all.len() as u64,
        drained,
        achieved_rate: if produced.elapsed_s > 0.0 {
            sent as f64 / produced.elapsed_s
        } else {
            0.0
        },
        handled_per_s: if busy_s > 0.0 {
            all.len() as f64 / busy_s
        } else {
            0.0
        },
        append: Latency::of(&mut append_us),
        append_to_claim: Latency::of(&mut all),
        new_session_first: Latency::of(&mut new),
        workers: worker_lines(&report),
    })
}

/// `idle` against one target.
pub async fn idle(target: &BenchTarget, s: &IdleSettings) -> Result<IdleBackend, Failure> {
    let mut home = Home::new(target)?;
    let result = idle_in(&mut home, target, s).await;
    finish(&home, result).await
}

async fn idle_in(
    home: &mut Home,
    target: &BenchTarget,
    s: &IdleSettings,
) -> Result<IdleBackend, Failure> {
    let label = target.label.as_str();
    let progress = status(format!(
        "idle on {label}: setting up {} sessions with their work done",
        s.sessions
    ));
    let (store, place) = home.fresh(label).await?;
    let prefix = run_prefix();
    let ids: Vec<String> = (0..s.sessions).map(|n| format!("{prefix}-{n}")).collect();
    setup_sessions(&store, label, &ids, |_| vec![message("lane-0", "setup")]).await?;
    complete_everything(&store, label).await?;
    progress.set_message(format!("idle on {label}: starting {} workers", s.workers));
    let fleet = Fleet::start(
        &store,
        &target.base_url,
        &place,
        fleet_config(s.workers, s.wait_ms, 1),
    )
    .await?;
    progress.set_message(format!("idle on {label}: {} workers waiting", s.workers));
    tokio::time::sleep(Duration::from_secs_f64(s.seconds)).await;
    let report = fleet.stop().await?;
    progress.finish_and_clear();
    Ok(IdleBackend {
        url: target.label.clone(),
        worker_processes: !matches!(place, Place::InProcess),
        in_process_cpu_percent: report.in_process_cpu_s.and_then(|cpu| {
            super::cpu::percent_of_core(
                Duration::from_secs_f64(cpu),
                Duration::from_secs_f64(report.window_s),
            )
        }),
        workers: worker_lines(&report),
    })
}

/// `fairness` against one target: the run without the backlog, then with it.
pub async fn fairness(
    target: &BenchTarget,
    s: &FairnessSettings,
    drain: Duration,
) -> Result<FairnessBackend, Failure> {
    let mut home = Home::new(target)?;
    let result = async {
        let alone = fairness_run(&mut home, target, s, false, drain).await?;
        let beside = fairness_run(&mut home, target, s, true, drain).await?;
        Ok((alone, beside))
    }
    .await;
    let (
        (mut alone, mut alone_appends, alone_drained, _),
        (mut beside, mut beside_appends, beside_drained, backlog_claimed),
    ) = finish(&home, result).await?;
    let without_backlog = Latency::of(&mut alone);
    let with_backlog = Latency::of(&mut beside);
    let p99_ratio = match (with_backlog.p99_ms, without_backlog.p99_ms) {
        (Some(with), Some(without)) if without > 0.0 => Some(with / without),
        _ => None,
    };
    Ok(FairnessBackend {
        url: target.label.clone(),
        worker_processes: target.has_worker_processes(),
        without_backlog,
        with_backlog,
        p99_ratio,
        append_without_backlog: Latency::of(&mut alone_appends),
        append_with_backlog: Latency::of(&mut beside_appends),
        backlog_claimed,
        drained: alone_drained && beside_drained,
    })
}

/// One fairness run on a fresh store: the small sessions' samples, the
/// producer's append latencies, whether all were claimed, and how many
/// backlog events were claimed meanwhile.
async fn fairness_run(
    home: &mut Home,
    target: &BenchTarget,
    s: &FairnessSettings,
    with_backlog: bool,
    drain: Duration,
) -> Result<(Vec<u64>, Vec<u64>, bool, u64), Failure> {
    let label = target.label.as_str();
    let beside = if with_backlog {
        "beside the backlog"
    } else {
        "alone"
    };
    let progress = status(format!("fairness on {label}: setting up ({beside})"));
    let (store, place) = home.fresh(label).await?;
    let prefix = run_prefix();
    let backlog_id = format!("{prefix}-backlog");
    if with_backlog {
        let total = s.backlog as usize;
        let batches: Vec<String> = vec![backlog_id.clone(); total.div_ceil(BACKLOG_BATCH)];
        // One batch at a time: the backlog keeps its order on its one lane.
        for (n, id) in batches.iter().enumerate() {
            let size = BACKLOG_BATCH.min(total - n * BACKLOG_BATCH);
            let batch = (0..size).map(|_| message("lane-0", "backlog")).collect();
            store
                .append(id, batch, AppendOptions::default())
                .await
                .map_err(|e| Failure::store(label, "appending the backlog", &e))?;
        }
    }
    progress.set_message(format!(
        "fairness on {label}: starting {} workers",
        s.workers
    ));
    let mut fleet = Fleet::start(
        &store,
        &target.base_url,
        &place,
        fleet_config(s.workers, s.wait_ms, s.claim_limit),
    )
    .await?;
    progress.set_message(format!("fairness on {label}: warming up ({beside})"));
    let warmed = warm_up(&store, label, s.warm_up_s, s.rate, |k| {
        (format!("{prefix}-warm-{k}"), "lane-0".to_owned())
    });
    if let Err(failure) = warmed.await {
        let _ = fleet.stop().await;
        return Err(failure);
    }
    progress.set_message(format!(
        "fairness on {label}: {} small sessions ({beside})",
        s.sessions
    ));
    let produced = produce(&store, label, u64::from(s.sessions), s.rate, |k| {
        (format!("{prefix}-small-{k}"), "lane-0".to_owned(), "small")
    })
    .await;
    let produced = match produced {
        Ok(produced) => produced,
        Err(failure) => {
            let _ = fleet.stop().await;
            return Err(failure);
        }
    };
    let ignore = with_backlog.then_some(backlog_id.as_str());
    let drained = wait_drained(&store, label, &mut fleet, ignore, drain).await?;
    let report = fleet.stop().await?;
    progress.finish_and_clear();
    Ok((
        samples(&report, "small"),
        produced.append_us,
        drained,
        samples(&report, "backlog").len() as u64,
    ))
}

/// `result`, after removing the home's scratch schemas; a schema left
/// behind is said on stderr (the result stands).
async fn finish<T>(home: &Home, result: Result<T, Failure>) -> Result<T, Failure> {
    for line in home.finish().await {
        crate::output::eprint_line(&format!("warning: {line}"));
    }
    result
}
