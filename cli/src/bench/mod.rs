//! `a2-store bench`: the workload mix against each store, then the comparison.

mod latency;
mod operation;
mod report;
mod workload;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::{IdGenerator, RandomIds, SqliteLocation, SqliteUrlOptions, StoreUrl};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::args::BenchArgs;
use crate::failure::Failure;
use crate::output::{print, print_json};
use crate::target;
use latency::Recorder;
use report::{BackendReport, BenchReport};
use workload::Shared;

/// Runs `bench`.
pub async fn run(args: &BenchArgs) -> Result<(), Failure> {
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
    let length = Duration::from_secs_f64(args.seconds);
    let mut backends = Vec::new();
    for (url, parsed) in &targets {
        backends.push(run_one(url, parsed, length, args.sessions).await?);
    }
    drop(scratch);
    let report = BenchReport::new(args.seconds, args.sessions, backends);
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
