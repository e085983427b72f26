//! The differential runner: generates op sequences, runs each on the memory
//! reference and on a candidate backend, compares every result and the full
//! state after every step, checks the invariants on both, and shrinks a
//! failing sequence to a minimal one printed as Rust.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_store_api::{
    ClaimResult, ClaimWorkResult, Clock, CompleteResult, CounterIds, DeleteSessionResult,
    FailOutcome, ManualClock, RescheduleResult, Store,
};
use a2_store_memory::{MemoryOptions, MemoryStore};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config as ProptestConfig, RngAlgorithm, TestRng, TestRunner};

use crate::call::{execute, Call, Outcome, Projection};
use crate::incarnation::Incarnations;
use crate::model::Model;
use crate::op::{ops, Op};
use crate::snapshot::{backlog, capture};
use crate::vocab::{Avoid, ID_PREFIX, SESSIONS, START_MS};
use crate::{invariants, render};

/// How many cases of how many ops to run, from which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Random sequences to run.
    pub cases: u32,
    /// Longest sequence, in ops.
    pub max_ops: usize,
    /// Seed of the generator: the same seed generates the same cases.
    pub seed: u64,
    /// Most re-runs spent shrinking a failing sequence.
    pub max_shrink_iters: u32,
    /// Input patterns left out while known bugs are open.
    pub avoid: Avoid,
}

impl Default for Config {
    /// 256 cases of up to 40 ops from a fixed seed, avoiding nothing.
    fn default() -> Self {
        Self {
            cases: 256,
            max_ops: 40,
            seed: 0x0a25_70fe,
            max_shrink_iters: 2000,
            avoid: Avoid::default(),
        }
    }
}

impl Config {
    /// `cases` cases of up to `max_ops` ops, overridden by the environment:
    /// `A2_DIFF_CASES` (case count), `A2_DIFF_OPS` (longest sequence) and
    /// `A2_DIFF_SEED` (a number, or `random` for a fresh seed that failures
    /// and the summary report; unset keeps the fixed default seed).
    pub fn from_env(cases: u32, max_ops: usize) -> Self {
        // `Avoid` is set by the caller, never by the environment.
        let read = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.trim().parse::<u64>().ok())
        };
        let defaults = Self::default();
        Self {
            cases: read("A2_DIFF_CASES")
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(cases),
            max_ops: read("A2_DIFF_OPS")
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(max_ops),
            seed: read("A2_DIFF_SEED")
                .or_else(random_seed)
                .unwrap_or(defaults.seed),
            max_shrink_iters: defaults.max_shrink_iters,
            avoid: Avoid::default(),
        }
    }
}

/// A fresh seed when `A2_DIFF_SEED=random`, from the wall clock.
fn random_seed() -> Option<u64> {
    if std::env::var("A2_DIFF_SEED").ok()?.trim() != "random" {
        return None;
    }
    let elapsed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(elapsed.as_nanos() as u64 ^ u64::from(std::process::id()))
}

/// What differed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DivergenceKind {
    /// The candidate store could not be created.
    Setup(String),
    /// The call's results (or error codes) differ.
    Result {
        /// The reference's result.
        reference: String,
        /// The candidate's result.
        candidate: String,
    },
    /// The state read after the call differs.
    State {
        /// Which read differs.
        read: String,
        /// The reference's value.
        reference: String,
        /// The candidate's value.
        candidate: String,
    },
    /// A store broke an invariant.
    Invariant {
        /// Which store (the reference can break one too).
        backend: String,
        /// What is broken.
        message: String,
    },
    /// The generator failed (never expected).
    Generator(String),
}

impl fmt::Display for DivergenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Setup(error) => write!(f, "creating the candidate store failed: {error}"),
            Self::Result {
                reference,
                candidate,
            } => write!(
                f,
                "results differ\nreference (memory): {reference}\ncandidate: {candidate}"
            ),
            Self::State {
                read,
                reference,
                candidate,
            } => write!(
                f,
                "state differs after the last call: {read}\nreference (memory): {reference}\ncandidate: {candidate}"
            ),
            Self::Invariant { backend, message } => {
                write!(f, "invariant broken by {backend}: {message}")
            }
            Self::Generator(error) => write!(f, "generating a case failed: {error}"),
        }
    }
}

/// A failing case, shrunk: the calls that reproduce it and what differed.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// The candidate backend's name.
    pub backend: String,
    /// Which case (0-based) of the run failed first.
    pub case: u32,
    /// The run's seed.
    pub seed: u64,
    /// What differed at the last call.
    pub kind: DivergenceKind,
    /// The concrete calls of the shrunk case, up to the failing one.
    pub calls: Vec<Call>,
    /// The shrunk symbolic ops.
    pub ops: Vec<Op>,
}

impl Divergence {
    /// The reproduction as ready-to-paste Rust.
    pub fn program(&self) -> String {
        render::program(&self.calls, START_MS, ID_PREFIX, &self.kind.to_string())
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} diverges from the memory reference (case {}, seed {}, shrunk to {} calls): {}",
            self.backend,
            self.case,
            self.seed,
            self.calls.len(),
            self.kind.to_string().lines().next().unwrap_or("")
        )?;
        writeln!(f, "---- reproduction ----")?;
        write!(f, "{}", self.program())
    }
}

impl std::error::Error for Divergence {}

/// What a passing run covered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// The seed the cases were generated from.
    pub seed: u64,
    /// Cases run.
    pub cases: u32,
    /// Calls run on each store.
    pub calls: u64,
    /// How often each kind of reference result was seen (e.g. `complete:Completed`,
    /// `append:PARTIAL_DUPLICATE_BATCH`), to show what the run exercised.
    pub outcomes: BTreeMap<String, u64>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} cases (seed {}), {} calls per store",
            self.cases, self.seed, self.calls
        )?;
        for (outcome, count) in &self.outcomes {
            writeln!(f, "  {outcome}: {count}")?;
        }
        Ok(())
    }
}

/// Runs `config.cases` random sequences on the memory reference and on
/// stores from `candidate`; the first divergence is shrunk and returned.
///
/// Every store of a case gets its own [`ManualClock`] (advanced identically)
/// and its own [`CounterIds`] with the same prefix. Each case uses session
/// ids of its own, but `prune` works store-wide: `candidate` must hand out
/// a store of its own (a fresh database, file or schema) per case.
pub async fn run_differential(
    candidate: &dyn StoreFactory,
    config: Config,
) -> Result<Summary, Box<Divergence>> {
    let mut seed = [0u8; 32];
    for chunk in seed.chunks_mut(8) {
        chunk.copy_from_slice(&config.seed.to_le_bytes());
    }
    let mut runner = TestRunner::new_with_rng(
        ProptestConfig {
            max_shrink_iters: config.max_shrink_iters,
            ..ProptestConfig::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
    );
    let strategy = ops(config.max_ops);
    let mut summary = Summary {
        seed: config.seed,
        ..Summary::default()
    };
    for case in 0..config.cases {
        let mut tree = strategy.new_tree(&mut runner).map_err(|reason| {
            Box::new(Divergence {
                backend: candidate.name().to_owned(),
                case,
                seed: config.seed,
                kind: DivergenceKind::Generator(reason.to_string()),
                calls: Vec::new(),
                ops: Vec::new(),
            })
        })?;
        let first = tree.current();
        let Err(failure) = run_case(candidate, &first, config.avoid, Some(&mut summary)).await
        else {
            summary.cases += 1;
            continue;
        };
        let mut best = (first, failure);
        let mut iterations = 0;
        if tree.simplify() {
            while iterations < config.max_shrink_iters {
                iterations += 1;
                let current = tree.current();
                match run_case(candidate, &current, config.avoid, None).await {
                    Err(failure) => {
                        best = (current, failure);
                        if !tree.simplify() {
                            break;
                        }
                    }
                    Ok(()) => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
        }
        let (ops, (kind, calls)) = best;
        return Err(Box::new(Divergence {
            backend: candidate.name().to_owned(),
            case,
            seed: config.seed,
            kind,
            calls,
            ops,
        }));
    }
    Ok(summary)
}

/// Tags this run's sessions so runs sharing one database never meet.
fn fresh_prefix() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    format!(
        "d{}x{}-",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::SeqCst)
    )
}

/// Names an outcome for the summary.
fn outcome_name(call: &Call, outcome: &Projection) -> String {
    let call_name = match call {
        Call::Append { .. } => "append",
        Call::Claim(_) => "claim",
        Call::Renew(_) => "renew",
        Call::Complete(_) => "complete",
        Call::Fail(_) => "fail",
        Call::Redrive(_) => "redrive",
        Call::Clear(_) => "clear",
        Call::Reclaim(_) => "reclaim",
        Call::Read(..) => "read",
        Call::WakeLog(..) => "wake_log",
        Call::WriteState(..) => "write_state",
        Call::ReadState(..) => "read_state",
        Call::SetPresence(..) => "set_presence",
        Call::ClaimWork(_) => "claim_work",
        Call::ListWork(_) => "list_work",
        Call::Reschedule(_) => "reschedule",
        Call::Pause(_) => "pause",
        Call::Resume(_) => "resume",
        Call::RedriveAll(_) => "redrive_all",
        Call::Fork(_) => "fork",
        Call::DeleteSession(_) => "delete_session",
        Call::Prune(_) => "prune",
        Call::Advance(_) => "advance",
    };
    let result = match outcome {
        Err(code) => code.as_str().to_owned(),
        Ok(Outcome::Claim(ClaimResult::Claimed { dead_lettered, .. }))
            if !dead_lettered.is_empty() =>
        {
            "Claimed+dead_lettered".to_owned()
        }
        Ok(Outcome::Claim(ClaimResult::Claimed { .. })) => "Claimed".to_owned(),
        Ok(Outcome::Claim(ClaimResult::Busy { .. })) => "Busy".to_owned(),
        Ok(Outcome::Claim(ClaimResult::Settled)) => "Settled".to_owned(),
        Ok(Outcome::ClaimWork(ClaimWorkResult::Claimed { sessions })) => {
            let heads: usize = sessions.iter().map(|s| s.heads.len()).sum();
            let dead = sessions.iter().any(|s| !s.dead_lettered.is_empty());
            format!(
                "Claimed(sessions={},heads>1={}{})",
                sessions.len(),
                heads > 1,
                if dead { ",dead_lettered" } else { "" }
            )
        }
        Ok(Outcome::ClaimWork(ClaimWorkResult::Busy { .. })) => "Busy".to_owned(),
        Ok(Outcome::ClaimWork(ClaimWorkResult::Settled)) => "Settled".to_owned(),
        Ok(Outcome::ListWork(page)) => format!("listed={}", page.len()),
        Ok(Outcome::Complete(CompleteResult::Completed { events })) if !events.is_empty() => {
            "Completed+events".to_owned()
        }
        Ok(Outcome::Complete(CompleteResult::Completed { .. })) => "Completed".to_owned(),
        Ok(Outcome::Complete(CompleteResult::Superseded)) => "Superseded".to_owned(),
        Ok(Outcome::Fail(result)) => match result.outcome {
            FailOutcome::Failed => "Failed".to_owned(),
            FailOutcome::DeadLettered => "DeadLettered".to_owned(),
            FailOutcome::Superseded => "Superseded".to_owned(),
            other => format!("{other:?}"),
        },
        Ok(Outcome::Redrive(result)) => format!("redriven={}", result.redriven),
        Ok(Outcome::Renew(result)) => format!(
            "renewed={},superseded={}",
            !result.renewed.is_empty(),
            !result.superseded.is_empty()
        ),
        Ok(Outcome::Clear(a2_store_api::ClearResult::Cleared { .. })) => "Cleared".to_owned(),
        Ok(Outcome::Clear(a2_store_api::ClearResult::NotCleared { .. })) => "NotCleared".to_owned(),
        Ok(Outcome::Clear(other)) => format!("{other:?}"),
        Ok(Outcome::Reclaim(result)) => format!("reclaimed>0={}", result.reclaimed > 0),
        Ok(Outcome::Reschedule(result)) => match result {
            RescheduleResult::Rescheduled { not_before } => {
                format!("Rescheduled(later={})", not_before.is_some())
            }
            RescheduleResult::Cancelled => "Cancelled".to_owned(),
            RescheduleResult::Started => "Started".to_owned(),
            RescheduleResult::Gone => "Gone".to_owned(),
            other => format!("{other:?}"),
        },
        Ok(Outcome::Pause(pause)) => format!(
            "{}{}",
            if pause.session_id.is_some() {
                "session"
            } else {
                "everywhere"
            },
            if pause.until_ms.is_some() {
                "+until"
            } else {
                ""
            }
        ),
        Ok(Outcome::Resume(result)) => format!("resumed={}", result.resumed),
        Ok(Outcome::RedriveAll(result)) => format!(
            "redriven>0={},more={}",
            !result.redriven.is_empty(),
            result.more
        ),
        Ok(Outcome::Fork(result)) => format!("forked(cleared={})", result.session.clear_index > 0),
        Ok(Outcome::DeleteSession(result)) => match result {
            DeleteSessionResult::Deleted { removed } => {
                format!("Deleted(ended>0={})", removed.ended > 0)
            }
            DeleteSessionResult::NotDeleted { .. } => "NotDeleted".to_owned(),
            DeleteSessionResult::NotFound => "NotFound".to_owned(),
            other => format!("{other:?}"),
        },
        Ok(Outcome::Prune(result)) => format!(
            "pruned>0={},more={}",
            !result.sessions.is_empty(),
            result.more()
        ),
        Ok(_) => "Ok".to_owned(),
    };
    format!("{call_name}:{result}")
}

/// Removes this run's session prefix from a rendered value.
fn strip(prefix: &str, text: String) -> String {
    text.replace(prefix, "")
}

/// Runs one sequence on a fresh reference and a fresh candidate. On
/// failure returns what differed and the concrete calls run so far.
async fn run_case(
    candidate: &dyn StoreFactory,
    ops: &[Op],
    avoid: Avoid,
    mut summary: Option<&mut Summary>,
) -> Result<(), (DivergenceKind, Vec<Call>)> {
    let prefix = fresh_prefix();
    let reference_clock = ManualClock::new(START_MS);
    let candidate_clock = ManualClock::new(START_MS);
    let reference = MemoryStore::with_options(MemoryOptions {
        clock: Arc::new(reference_clock.clone()),
        ids: Arc::new(CounterIds::new(ID_PREFIX)),
    });
    let store: Arc<dyn Store> = candidate
        .create(
            Arc::new(candidate_clock.clone()),
            Arc::new(CounterIds::new(ID_PREFIX)),
        )
        .await
        .map_err(|error| (DivergenceKind::Setup(error.to_string()), Vec::new()))?;
    let mut model = Model::new(avoid);
    // Each store numbers incarnations its own way: results, states and the
    // model use the order of appearance (see `incarnation`).
    let mut reference_incarnations = Incarnations::default();
    let mut candidate_incarnations = Incarnations::default();
    let mut reference_state = capture(&reference, &prefix, reference_clock.now_ms()).await;
    let mut candidate_state = capture(store.as_ref(), &prefix, candidate_clock.now_ms()).await;
    let mut calls = Vec::with_capacity(ops.len());
    for op in ops {
        let reference_now = reference_clock.now_ms();
        let candidate_now = candidate_clock.now_ms();
        let call = model.resolve(op, &reference_state, reference_now);
        calls.push(call.clone());
        model.note_declarations(&call);
        let sent = reference_incarnations.request(&call);
        let mut expected = execute(&reference, &reference_clock, &prefix, &sent).await;
        let sent = candidate_incarnations.request(&call);
        let mut actual = execute(store.as_ref(), &candidate_clock, &prefix, &sent).await;
        if let Ok(outcome) = expected.as_mut() {
            reference_incarnations.outcome(outcome);
        }
        if let Ok(outcome) = actual.as_mut() {
            candidate_incarnations.outcome(outcome);
        }
        if let Some(summary) = summary.as_deref_mut() {
            summary.calls += 1;
            *summary
                .outcomes
                .entry(outcome_name(&call, &expected))
                .or_default() += 1;
        }
        if expected != actual {
            let kind = DivergenceKind::Result {
                reference: strip(&prefix, format!("{expected:?}")),
                candidate: strip(&prefix, format!("{actual:?}")),
            };
            return Err((kind, calls));
        }
        let mut reference_after = capture(&reference, &prefix, reference_clock.now_ms()).await;
        reference_incarnations.state(&mut reference_after);
        let mut candidate_after = capture(store.as_ref(), &prefix, candidate_clock.now_ms()).await;
        candidate_incarnations.state(&mut candidate_after);
        if let Some((read, a, b)) = reference_after.difference(&candidate_after) {
            let kind = DivergenceKind::State {
                read,
                reference: strip(&prefix, a),
                candidate: strip(&prefix, b),
            };
            return Err((kind, calls));
        }
        model.observe(&call, &expected, &reference_state, &reference_after);
        let checks = [
            (
                "memory (the reference)",
                &expected,
                &reference_state,
                &reference_after,
                reference_now,
            ),
            (
                candidate.name(),
                &actual,
                &candidate_state,
                &candidate_after,
                candidate_now,
            ),
        ];
        for (backend, outcome, before, after, now) in checks {
            if let Err(message) = invariants::check(&model, &call, outcome, before, after, now) {
                let kind = DivergenceKind::Invariant {
                    backend: backend.to_owned(),
                    message: strip(&prefix, message),
                };
                return Err((kind, calls));
            }
        }
        reference_state = reference_after;
        candidate_state = candidate_after;
    }
    // Subscriptions deliver the same backlog as `read`, from the start and
    // from the middle of what remains.
    for (index, session) in SESSIONS.iter().enumerate() {
        let Some(state) = reference_state.session(index) else {
            continue;
        };
        let rows = state.rows();
        let middle = rows.get(rows.len() / 2).map_or(0, |row| row.index);
        for after in [0, middle] {
            let expected: Vec<_> = rows.iter().filter(|r| r.index > after).cloned().collect();
            let stores: [(&str, &dyn Store); 2] = [
                ("memory (the reference)", &reference),
                (candidate.name(), store.as_ref()),
            ];
            for (backend, subscribed) in stores {
                let got = backlog(subscribed, &prefix, session, after, expected.len()).await;
                if got.as_ref() != Ok(&expected) {
                    let kind = DivergenceKind::Invariant {
                        backend: backend.to_owned(),
                        message: strip(
                            &prefix,
                            format!(
                                "subscribe(\"{session}\", {after}) delivered {got:#?}\nbut read returns {expected:#?}"
                            ),
                        ),
                    };
                    return Err((kind, calls));
                }
            }
        }
    }
    Ok(())
}
