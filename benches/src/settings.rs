//! Criterion and runtime settings every target shares, sized so the whole
//! `cargo bench -p a2-benches` run stays short on two shared cores.

use std::time::Duration;

use a2_conformance::bench::{BenchSettings, WorkSettings};
use criterion::Criterion;
use tokio::runtime::Runtime;

/// Samples per benchmark (criterion's minimum).
pub const SAMPLE_SIZE: usize = 10;

/// Warm-up time per benchmark.
pub const WARM_UP: Duration = Duration::from_millis(300);

/// Measurement time per benchmark.
pub const MEASUREMENT: Duration = Duration::from_millis(1_500);

/// Bootstrap resamples of criterion's analysis (its default, 100,000, takes
/// longer than many of the measurements).
pub const RESAMPLES: usize = 10_000;

/// The largest session the scaling series builds when the target runs in
/// criterion's `--test` mode (every body once), unless
/// `A2_BENCH_MAX_EVENTS` is set lower.
pub const TEST_MODE_MAX_EVENTS: u64 = 1_000;

/// The most sessions the `work` target's scaling fixture holds in `--test`
/// mode, unless `A2_BENCH_MAX_SESSIONS` is set lower (so only its smallest
/// size, 100 sessions, runs).
pub const TEST_MODE_MAX_SESSIONS: u64 = 1_000;

/// The fairness backlog of the `work` target in `--test` mode, unless
/// `A2_BENCH_BACKLOG` is set lower.
pub const TEST_MODE_BACKLOG: u64 = 1_000;

/// The default largest session of the PostgreSQL scaling series: pre-filling
/// a million-event session over the network takes minutes per fixture.
pub const POSTGRES_DEFAULT_MAX_EVENTS: u64 = 100_000;

/// A criterion instance with this crate's defaults, then the command line
/// (`cargo bench -p a2-benches -- <filter> --test ...`) applied on top;
/// groups inherit these settings.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASUREMENT)
        .nresamples(RESAMPLES)
        .configure_from_args()
}

/// Whether criterion was asked to run every body once (`--test`).
pub fn test_mode() -> bool {
    std::env::args().any(|arg| arg == "--test")
}

/// The scaling and fixture settings: `A2_BENCH_MAX_EVENTS` (default
/// 1,000,000), capped at [`TEST_MODE_MAX_EVENTS`] in `--test` mode.
pub fn bench_settings() -> BenchSettings {
    let mut settings = BenchSettings::from_env();
    if test_mode() {
        settings.max_events = settings.max_events.min(TEST_MODE_MAX_EVENTS);
    }
    settings
}

/// The `work` target's settings: `A2_BENCH_MAX_SESSIONS` (default 100,000)
/// and `A2_BENCH_BACKLOG` (default 10,000), capped at
/// [`TEST_MODE_MAX_SESSIONS`] and [`TEST_MODE_BACKLOG`] in `--test` mode.
pub fn work_settings() -> WorkSettings {
    let mut settings = WorkSettings::from_env();
    if test_mode() {
        settings.max_sessions = settings.max_sessions.min(TEST_MODE_MAX_SESSIONS);
        settings.backlog = settings.backlog.min(TEST_MODE_BACKLOG);
    }
    settings
}

/// The most scheduled heads of the `scheduled` target:
/// `A2_BENCH_MAX_SCHEDULED` (default 100,000), at most 1,000 in `--test` mode.
pub fn max_scheduled() -> u64 {
    let own = std::env::var("A2_BENCH_MAX_SCHEDULED")
        .ok()
        .and_then(|text| text.trim().replace('_', "").parse::<u64>().ok())
        .unwrap_or(100_000);
    if test_mode() {
        own.min(1_000)
    } else {
        own
    }
}

/// The largest session of the PostgreSQL scaling series:
/// `A2_BENCH_POSTGRES_MAX_EVENTS` (default [`POSTGRES_DEFAULT_MAX_EVENTS`];
/// an unparsable value keeps it), never more than `max_events` of
/// [`bench_settings`].
pub fn postgres_max_events() -> u64 {
    let own = std::env::var("A2_BENCH_POSTGRES_MAX_EVENTS")
        .ok()
        .and_then(|text| text.trim().replace('_', "").parse::<u64>().ok())
        .unwrap_or(POSTGRES_DEFAULT_MAX_EVENTS);
    own.min(bench_settings().max_events)
}

/// The runtime the bodies block on: multi-threaded with two workers (the
/// machine's core count), so concurrent tasks really run in parallel.
///
/// # Panics
/// When the operating system refuses the runtime's threads; benchmarks
/// cannot run without them.
pub fn runtime() -> Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("cannot start the benchmark runtime: {error}"),
    }
}
