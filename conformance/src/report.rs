//! Running cases outside a test harness: [`run`], [`run_case`] and the [`Report`].

use std::any::Any;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use a2_store_api::{CounterIds, ManualClock};
use futures::FutureExt;
use serde::Serialize;

use crate::cases::{CaseDef, CASES};
use crate::factory::StoreFactory;
use crate::support::{Cx, Failure, GENERATED, T0};

/// How long one case may run before it is reported as failed (a backend
/// that never answers, or a subscription that never delivers).
pub const CASE_TIMEOUT: Duration = Duration::from_secs(60);

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The backend behaved as the contract says.
    Passed,
    /// The backend broke the contract (or panicked, or timed out); `reason`
    /// names the expectation, with file and line of the case.
    Failed {
        /// What went wrong.
        reason: String,
    },
    /// The case needs a capability the backend does not declare. Never
    /// counted as passed.
    Skipped {
        /// Which capability is missing.
        reason: String,
    },
}

/// One row of a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseReport {
    /// The case's name (as in `cargo test` output: `<backend>::<name>`).
    pub name: String,
    /// The area of the contract it belongs to (`append`, `claims`, ...).
    pub area: String,
    /// What happened.
    pub outcome: Outcome,
    /// Wall time the case took, store creation included.
    pub duration: Duration,
}

/// The result of running cases against one backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The backend's [`StoreFactory::name`].
    pub backend: String,
    /// One row per case run, in suite order.
    pub cases: Vec<CaseReport>,
}

impl Report {
    fn count(&self, matches: impl Fn(&Outcome) -> bool) -> usize {
        self.cases
            .iter()
            .filter(|case| matches(&case.outcome))
            .count()
    }

    /// How many cases passed.
    pub fn passed(&self) -> usize {
        self.count(|outcome| matches!(outcome, Outcome::Passed))
    }

    /// How many cases failed.
    pub fn failed(&self) -> usize {
        self.count(|outcome| matches!(outcome, Outcome::Failed { .. }))
    }

    /// How many cases were skipped for a missing capability.
    pub fn skipped(&self) -> usize {
        self.count(|outcome| matches!(outcome, Outcome::Skipped { .. }))
    }

    /// True when no case failed (skipped cases do not fail a report).
    pub fn is_success(&self) -> bool {
        self.failed() == 0
    }

    /// The failed cases.
    pub fn failures(&self) -> impl Iterator<Item = &CaseReport> {
        self.cases
            .iter()
            .filter(|case| matches!(case.outcome, Outcome::Failed { .. }))
    }

    /// The row of the case called `name`, if it ran.
    pub fn case(&self, name: &str) -> Option<&CaseReport> {
        self.cases.iter().find(|case| case.name == name)
    }
}

impl fmt::Display for Report {
    /// One line per case (`ok`, `FAILED`, `skipped`) then the counts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for case in &self.cases {
            let millis = case.duration.as_secs_f64() * 1000.0;
            match &case.outcome {
                Outcome::Passed => {
                    writeln!(f, "{}::{} ... ok ({millis:.1} ms)", self.backend, case.name)?
                }
                Outcome::Failed { reason } => writeln!(
                    f,
                    "{}::{} ... FAILED ({millis:.1} ms)\n    {}",
                    self.backend,
                    case.name,
                    reason.replace('\n', "\n    ")
                )?,
                Outcome::Skipped { reason } => {
                    writeln!(f, "{}::{} ... skipped: {reason}", self.backend, case.name)?
                }
            }
        }
        write!(
            f,
            "{}: {} passed, {} failed, {} skipped of {} cases",
            self.backend,
            self.passed(),
            self.failed(),
            self.skipped(),
            self.cases.len()
        )
    }
}

/// The names of every case, in suite order.
pub fn case_names() -> impl Iterator<Item = &'static str> {
    CASES.iter().map(|case| case.name)
}

/// Runs every case against `factory`, one after the other, each on a fresh
/// store in its own tokio task: a case that panics or hangs (see
/// [`CASE_TIMEOUT`]), or a factory that fails or panics creating its store,
/// is reported as failed, never crashes the caller.
///
/// Must be called inside a tokio runtime with the time driver enabled
/// (`#[tokio::main]` does); concurrency cases need a multi-thread runtime
/// to exercise real parallelism but pass on any.
pub async fn run(factory: &dyn StoreFactory) -> Report {
    run_matching(factory, |_| true).await
}

/// Runs the cases whose name satisfies `filter`, like [`run`].
pub async fn run_matching(factory: &dyn StoreFactory, filter: impl Fn(&str) -> bool) -> Report {
    let mut cases = Vec::new();
    for case in CASES.iter().filter(|case| filter(case.name)) {
        cases.push(execute(factory, case).await);
    }
    Report {
        backend: factory.name().to_owned(),
        cases,
    }
}

/// Runs the one case called `name`; `None` when the suite has no such case.
pub async fn run_case(factory: &dyn StoreFactory, name: &str) -> Option<CaseReport> {
    let case = CASES.iter().find(|case| case.name == name)?;
    Some(execute(factory, case).await)
}

async fn context(factory: &dyn StoreFactory, case: &CaseDef) -> Result<Cx, String> {
    let clock = ManualClock::new(T0);
    let ids = CounterIds::new(GENERATED);
    let caps = factory.capabilities();
    let store = factory
        .create(
            std::sync::Arc::new(clock.clone()),
            std::sync::Arc::new(ids.clone()),
        )
        .await
        .map_err(|error| format!("the factory could not create a store: {error}"))?;
    let pair = if case.needs_pair && caps.shared_database {
        factory
            .create_pair(std::sync::Arc::new(clock.clone()), std::sync::Arc::new(ids))
            .await
            .map_err(|error| format!("the factory could not create a store pair: {error}"))?
    } else {
        None
    };
    let unique = uuid::Uuid::new_v4().simple().to_string();
    Ok(Cx {
        store,
        clock,
        caps,
        pair,
        prefix: format!("{}-{}", case.name, &unique[..16]),
    })
}

async fn execute(factory: &dyn StoreFactory, case: &CaseDef) -> CaseReport {
    let started = Instant::now();
    let created = AssertUnwindSafe(context(factory, case))
        .catch_unwind()
        .await;
    let outcome = match created.unwrap_or_else(|panic| {
        Err(format!(
            "the factory panicked creating a store: {}",
            panic_text(panic.as_ref())
        ))
    }) {
        Err(reason) => Outcome::Failed { reason },
        Ok(cx) => {
            let mut task = tokio::spawn((case.run)(cx));
            match tokio::time::timeout(CASE_TIMEOUT, &mut task).await {
                Err(_) => {
                    task.abort();
                    Outcome::Failed {
                        reason: format!("did not finish within {} s", CASE_TIMEOUT.as_secs()),
                    }
                }
                Ok(Err(join)) => Outcome::Failed {
                    reason: panic_reason(join),
                },
                Ok(Ok(Ok(()))) => Outcome::Passed,
                Ok(Ok(Err(Failure::Fail(reason)))) => Outcome::Failed { reason },
                Ok(Ok(Err(Failure::Skip(reason)))) => Outcome::Skipped { reason },
            }
        }
    };
    CaseReport {
        name: case.name.to_owned(),
        area: case.area.to_owned(),
        outcome,
        duration: started.elapsed(),
    }
}

fn panic_reason(join: tokio::task::JoinError) -> String {
    if join.is_cancelled() {
        return "the case's task was cancelled".to_owned();
    }
    format!("panicked: {}", panic_text(join.into_panic().as_ref()))
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

/// Runs one case for a test generated by [`suite!`](crate::suite): passes,
/// prints `skipped: <reason>` and passes, or panics naming backend and case.
#[doc(hidden)]
pub fn run_test(factory: &dyn StoreFactory, backend: &str, name: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => panic!("{backend}::{name}: could not start a tokio runtime: {error}"),
    };
    match runtime.block_on(run_case(factory, name)) {
        None => panic!("{backend}::{name}: the suite has no case of that name"),
        Some(report) => match report.outcome {
            Outcome::Passed => {}
            Outcome::Skipped { reason } => println!("skipped: {reason}"),
            Outcome::Failed { reason } => panic!("{backend}::{name} failed: {reason}"),
        },
    }
}

/// The conformance suite as [`libtest_mimic`] trials named
/// `<backend>::<case>`, for a test target with `harness = false` (the
/// alternative to [`suite!`](crate::suite) for backends that need a server):
/// each trial builds its factory with `make` (so what a factory holds, such
/// as scratch schemas, ends with its case), runs its case in a runtime of
/// its own and fails with the case's reason. With no `make` (the server is
/// not configured) every trial is *ignored*, so `cargo test` counts say the
/// cases did not run instead of reporting them passed.
///
/// ```text
/// // tests/conformance.rs, with `[[test]] name = "conformance" harness = false`
/// fn main() {
///     let args = libtest_mimic::Arguments::from_args();
///     let make = MyFactory::configured().then_some(MyFactory::new);
///     libtest_mimic::run(&args, a2_conformance::trials("mybackend", make)).exit();
/// }
/// ```
pub fn trials<F, M>(backend: &str, make: Option<M>) -> Vec<libtest_mimic::Trial>
where
    F: StoreFactory + 'static,
    M: Fn() -> F + Send + Sync + 'static,
{
    let make = make.map(std::sync::Arc::new);
    CASES
        .iter()
        .map(|case| {
            let name = format!("{backend}::{}", case.name);
            let label = name.clone();
            let case_name = case.name;
            let make = make.clone();
            let ignored = make.is_none();
            libtest_mimic::Trial::test(name, move || {
                let Some(make) = make else {
                    return Ok(());
                };
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|error| {
                        format!("{label}: could not start a tokio runtime: {error}")
                    })?;
                let factory = make();
                match runtime.block_on(run_case(&factory, case_name)) {
                    None => Err(format!("{label}: the suite has no case of that name").into()),
                    Some(report) => match report.outcome {
                        Outcome::Passed => Ok(()),
                        Outcome::Skipped { reason } => {
                            println!("{label}: skipped: {reason}");
                            Ok(())
                        }
                        Outcome::Failed { reason } => {
                            Err(format!("{label} failed: {reason}").into())
                        }
                    },
                }
            })
            .with_ignored_flag(ignored)
        })
        .collect()
}
