//! `a2-store bench`: the workload mix against each store, then the
//! comparison; or one of the worker workloads (`runtime`, `worker`, `idle`,
//! `fairness`) on scratch stores of each URL's backend.

mod cpu;
mod fleet;
mod home;
mod latency;
mod operation;
mod report;
mod work_report;
mod worker;
mod workload;
mod workloads;

pub use fleet::run_worker;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::{IdGenerator, RandomIds, SqliteLocation, SqliteUrlOptions, StoreUrl};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::args::{BenchArgs, Runner, Workload};
use crate::failure::Failure;
use crate::output::{print, print_json};
use crate::target;
use latency::Recorder;
use report::{BackendReport, BenchReport};
use workload::Shared;

/// Sessions of the mix when --sessions is not given.
const MIX_SESSIONS: u32 = 8;
/// The most sessions the mix runs (one task each).
const MIX_MAX_SESSIONS: u32 = 10_000;
/// Run length of the mix when --seconds is not given, s.
const MIX_SECONDS: f64 = 3.0;
/// Run length of `runtime`, `worker` and `idle` when --seconds is not given, s.
const WORK_SECONDS: f64 = 10.0;

/// Runs `bench`.
pub async fn run(args: &BenchArgs) -> Result<(), Failure> {
    if args.workload != Workload::Mix {
        return run_work(args).await;
    }
    let seconds = args.seconds.unwrap_or(MIX_SECONDS);
    let sessions = args.sessions.unwrap_or(MIX_SESSIONS);
    if sessions > MIX_MAX_SESSIONS {
        return Err(Failure::new(format!(
            "--sessions {sessions} is too many for the mix: give at most {MIX_MAX_SESSIONS}"
        )));
    }
    // Parse every URL before running anything, so a typo fails fast.
    let mut targets = Vec::new();
    for url in &args.urls {
        let parsed = target::parse(url)?;
        if !parsed.is_enabled() {
            // Opening gives the message naming the feature.
            target::open(url, &parsed).await?;
        }
        targets.push((url.clone(), parsed));
    }
    let scratch = if targets.is_empty() {
        let dir = tempfile::Builder::new()
            .prefix("a2-bench-")
            .tempdir()
            .map_err(|e| Failure::new(format!("creating a temporary directory for the SQLite bench file: {e} — set TMPDIR to a writable directory")))?;
        let path = dir.path().join("bench.db");
        targets.push(("memory:".to_owned(), StoreUrl::Memory));
        // Built, not parsed: a temporary directory's name may hold any character.
        let sqlite = StoreUrl::Sqlite {
            location: SqliteLocation::File(path),
            options: SqliteUrlOptions::default(),
        };
        targets.push((sqlite.to_string(), sqlite));
        Some(dir)
    } else {
        None
    };
    let length = Duration::from_secs_f64(seconds);
    let mut backends = Vec::new();
    for (url, parsed) in &targets {
        backends.push(run_one(url, parsed, length, sessions).await?);
    }
    drop(scratch);
    let report = BenchReport::new(seconds, sessions, backends);
    if args.json {
        print_json(&report)
    } else if args.csv {
        print(&report.csv())
    } else {
        print(&report.table())
    }
}

/// Runs the workload against one store for `length` with `sessions` concurrent sessions.
async fn run_one(
    url: &str,
    parsed: &StoreUrl,
    length: Duration,
    sessions: u32,
) -> Result<BackendReport, Failure> {
    if let StoreUrl::Sqlite {
        location: SqliteLocation::File(path),
        ..
    } = parsed
    {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                return Err(Failure::new(format!(
                    "cannot bench {url}: directory '{}' does not exist — create it or pick another path",
                    parent.display()
                )));
            }
        }
    }
    let store = target::open(url, parsed).await?;
    let shared = Shared::new();
    let progress = progress_bar(url, length);
    // Unique session ids per run, so runs against one database never collide.
    let run_id = RandomIds.next_id();
    let started = Instant::now();
    let deadline = started + length;
    let mut tasks = Vec::new();
    for n in 0..sessions {
        let session_id = format!("a2-bench-{run_id}-{n}");
        tasks.push(tokio::spawn(workload::run_session(
            Arc::clone(&store),
            session_id,
            deadline,
            shared.clone(),
        )));
    }
    let ticker = {
        let progress = progress.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            loop {
                let elapsed = started.elapsed();
                progress.set_position(elapsed.as_millis().min(u128::from(u64::MAX)) as u64);
                progress.set_message(format!("{} calls", shared.calls.load(Ordering::Relaxed)));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut recorder = Recorder::default();
    let mut first_failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(samples)) => recorder.merge(samples),
            Ok(Err(failure)) => {
                first_failure.get_or_insert(failure);
            }
            Err(join) => {
                shared.stop.store(true, Ordering::Relaxed);
                first_failure.get_or_insert(Failure::new(format!(
                    "a bench session against {url} stopped unexpectedly: {join}"
                )));
            }
        }
    }
    let elapsed = started.elapsed();
    ticker.abort();
    progress.finish_and_clear();
    if let Some(failure) = first_failure {
        return Err(Failure::new(format!("bench against {url}: {failure}")));
    }
    Ok(BackendReport::new(
        a2_store::StoreUrl::redact(url),
        elapsed.as_secs_f64(),
        shared.rounds.load(Ordering::Relaxed),
        recorder,
    ))
}

/// A progress bar over the run's length on stderr, hidden when stderr is not a terminal.
fn progress_bar(url: &str, length: Duration) -> ProgressBar {
    let total_ms = length.as_millis().min(u128::from(u64::MAX)) as u64;
    let bar = ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{prefix:>30} [{bar:30}] {elapsed:>4} {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(a2_store::StoreUrl::redact(url));
    bar
}

/// Runs a worker workload against every target, then prints its report.
async fn run_work(args: &BenchArgs) -> Result<(), Failure> {
    if args.csv {
        return Err(Failure::new(
            "--csv is for --workload mix: use --json for the worker workloads",
        ));
    }
    if args.workload == Workload::Fairness && args.seconds.is_some() {
        return Err(Failure::new(
            "--seconds does not apply to --workload fairness (it runs until every message is claimed): use --rate and --sessions",
        ));
    }
    let targets = home::targets(&args.urls).await?;
    let seconds = args.seconds.unwrap_or(WORK_SECONDS);
    let drain = Duration::from_secs_f64(args.drain_seconds);
    match args.workload {
        Workload::Mix => Ok(()),
        Workload::Runtime | Workload::Worker => {
            let (workload, runner, max_in_flight) = if args.workload == Workload::Worker {
                ("worker", Runner::A2Worker, Some(args.max_in_flight))
            } else {
                ("runtime", Runner::Loop, None)
            };
            let settings = work_report::RuntimeSettings {
                sessions: args.sessions.unwrap_or(200),
                workers: args.workers,
                rate: args.rate,
                seconds,
                warm_up_s: args.warm_up,
                new_every: args.new_every,
                lanes: args.lanes,
                wait_ms: args.wait_ms,
                claim_limit: args.claim_limit,
                max_in_flight,
            };
            let mut backends = Vec::new();
            for target in &targets {
                backends.push(workloads::runtime(target, &settings, drain, runner).await?);
            }
            let report = work_report::WorkReport {
                workload,
                settings,
                backends,
            };
            show(args, &report, || report.table())
        }
        Workload::Idle => {
            let settings = work_report::IdleSettings {
                sessions: args.sessions.unwrap_or(2_000),
                workers: args.workers,
                seconds,
                wait_ms: args.wait_ms,
            };
            let mut backends = Vec::new();
            for target in &targets {
                backends.push(workloads::idle(target, &settings).await?);
            }
            let report = work_report::WorkReport {
                workload: "idle",
                settings,
                backends,
            };
            show(args, &report, || report.table())
        }
        Workload::Fairness => {
            let settings = work_report::FairnessSettings {
                sessions: args.sessions.unwrap_or(199),
                backlog: args.backlog,
                workers: args.workers,
                rate: args.rate,
                warm_up_s: args.warm_up,
                wait_ms: args.wait_ms,
                claim_limit: args.claim_limit,
            };
            let mut backends = Vec::new();
            for target in &targets {
                backends.push(workloads::fairness(target, &settings, drain).await?);
            }
            let report = work_report::WorkReport {
                workload: "fairness",
                settings,
                backends,
            };
            show(args, &report, || report.table())
        }
    }
}

fn show<T: serde::Serialize>(
    args: &BenchArgs,
    report: &T,
    table: impl FnOnce() -> String,
) -> Result<(), Failure> {
    if args.json {
        print_json(report)
    } else {
        print(&table())
    }
}
