//! Results of the worker workloads: JSON and tables.

use serde::Serialize;

use super::cpu;
use super::fleet::FleetReport;
use super::latency::{human, percentile};
use super::worker::WARM_UP;
use crate::table::Table;

/// Count and percentiles of latency samples, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// How many samples.
    pub count: u64,
    /// Median, ms (`None` without samples).
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// Largest, ms.
    pub max_ms: Option<f64>,
}

impl Latency {
    /// The summary of `samples` in µs (sorts them).
    pub fn of(samples: &mut [u64]) -> Self {
        samples.sort_unstable();
        let some = !samples.is_empty();
        let ms = |us: u64| some.then(|| us as f64 / 1e3);
        Self {
            count: samples.len() as u64,
            p50_ms: ms(percentile(samples, 50)),
            p99_ms: ms(percentile(samples, 99)),
            max_ms: ms(samples.last().copied().unwrap_or(0)),
        }
    }
}

/// One worker's rates over its window.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerLine {
    /// The worker's number.
    pub worker: u32,
    /// Its window, s.
    pub window_s: f64,
    /// CPU of its process as % of one core (`None`: an in-process task or no `/proc`).
    pub cpu_percent: Option<f64>,
    /// `claim_work` calls per second.
    pub claim_calls_per_s: f64,
    /// Store calls (claims and completions) per second.
    pub store_calls_per_s: f64,
    /// Messages it claimed.
    pub claimed: u64,
}

/// The worker lines of a stopped fleet.
pub fn worker_lines(fleet: &FleetReport) -> Vec<WorkerLine> {
    fleet
        .workers
        .iter()
        .map(|w| WorkerLine {
            worker: w.worker,
            window_s: w.window_s,
            cpu_percent: w.cpu_s.and_then(|cpu| {
                cpu::percent_of_core(
                    std::time::Duration::from_secs_f64(cpu),
                    std::time::Duration::from_secs_f64(w.window_s),
                )
            }),
            claim_calls_per_s: w.claims_per_s(),
            store_calls_per_s: w.calls_per_s(),
            claimed: w
                .samples
                .iter()
                .filter(|(class, _)| class.as_str() != WARM_UP)
                .map(|(_, s)| s.len() as u64)
                .sum(),
        })
        .collect()
}

/// A worker workload's whole report.
#[derive(Debug, Clone, Serialize)]
pub struct WorkReport<S, B> {
    /// `runtime`, `worker`, `idle` or `fairness`.
    pub workload: &'static str,
    /// The settings it ran with.
    pub settings: S,
    /// One entry per store, in the order given.
    pub backends: Vec<B>,
}

/// Settings of `runtime`.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeSettings {
    /// Sessions that exist before producing.
    pub sessions: u32,
    /// Workers.
    pub workers: u32,
    /// Target rate, messages/s.
    pub rate: f64,
    /// Producing time, s.
    pub seconds: f64,
    /// Producing time before that, s, whose messages are not counted.
    pub warm_up_s: f64,
    /// Every Nth message to a new session (0: never).
    pub new_every: u32,
    /// Lanes per session.
    pub lanes: u32,
    /// `claim_work` wait, ms.
    pub wait_ms: i64,
    /// Heads per `claim_work` call (the claim loops of `runtime`).
    pub claim_limit: u32,
    /// Heads each worker processes at once (`worker`: its workers run `a2-worker`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
}

/// `runtime` (or `worker`) against one store. For `worker`, "claimed" means
/// handled: a handler started, and latencies run from append to that start.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeBackend {
    /// The store.
    pub url: String,
    /// Whether workers were processes (`false`: tasks of the bench).
    pub worker_processes: bool,
    /// Messages appended.
    pub sent: u64,
    /// Of those, first messages of new sessions.
    pub sent_new: u64,
    /// Messages claimed by the workers.
    pub claimed: u64,
    /// Whether every message was claimed within the drain time.
    pub drained: bool,
    /// Messages per second the producer achieved.
    pub achieved_rate: f64,
    /// Messages claimed (handled) per second, from the producer's start
    /// until every message was (or the drain time ended).
    pub handled_per_s: f64,
    /// The producer's append calls.
    pub append: Latency,
    /// Append→claim of every message.
    pub append_to_claim: Latency,
    /// Append→claim of new sessions' first messages.
    pub new_session_first: Latency,
    /// Each worker's rates.
    pub workers: Vec<WorkerLine>,
}

/// Settings of `idle`.
#[derive(Debug, Clone, Serialize)]
pub struct IdleSettings {
    /// Sessions, all with their work done.
    pub sessions: u32,
    /// Waiting workers.
    pub workers: u32,
    /// Waiting time, s.
    pub seconds: f64,
    /// `claim_work` wait, ms.
    pub wait_ms: i64,
}

/// `idle` against one store.
#[derive(Debug, Clone, Serialize)]
pub struct IdleBackend {
    /// The store.
    pub url: String,
    /// Whether workers were processes (`false`: tasks of the bench).
    pub worker_processes: bool,
    /// CPU of the whole bench process while its worker tasks waited, % of
    /// one core (in-process workers only).
    pub in_process_cpu_percent: Option<f64>,
    /// Each worker.
    pub workers: Vec<WorkerLine>,
}

/// Settings of `fairness`.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessSettings {
    /// Small sessions, one message each.
    pub sessions: u32,
    /// Events of the big session's backlog.
    pub backlog: u32,
    /// Workers.
    pub workers: u32,
    /// Rate of the small sessions' messages, /s.
    pub rate: f64,
    /// Producing time before them, s, whose messages are not counted.
    pub warm_up_s: f64,
    /// `claim_work` wait, ms.
    pub wait_ms: i64,
    /// Heads per `claim_work` call.
    pub claim_limit: u32,
}

/// `fairness` against one store.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessBackend {
    /// The store.
    pub url: String,
    /// Whether workers were processes (`false`: tasks of the bench).
    pub worker_processes: bool,
    /// The small sessions' append→claim without the backlog.
    pub without_backlog: Latency,
    /// The small sessions' append→claim beside the backlog.
    pub with_backlog: Latency,
    /// `with_backlog.p99_ms / without_backlog.p99_ms`.
    pub p99_ratio: Option<f64>,
    /// The producer's append calls without the backlog.
    pub append_without_backlog: Latency,
    /// The producer's append calls beside the backlog (the workers' writes
    /// compete with them for the store).
    pub append_with_backlog: Latency,
    /// Backlog events claimed while the small sessions were served.
    pub backlog_claimed: u64,
    /// Whether every small message was claimed within the drain time, both runs.
    pub drained: bool,
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |ms| human((ms * 1e6).round() as u64))
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |p| format!("{p:.2}%"))
}

fn rate(value: f64) -> String {
    format!("{value:.1}")
}

/// Per-worker rates in one cell: `1.0 / 1.0 / 0.9`.
fn per_worker(workers: &[WorkerLine], value: impl Fn(&WorkerLine) -> String) -> String {
    workers.iter().map(value).collect::<Vec<_>>().join(" / ")
}

fn footer(labels: impl Iterator<Item = String>) -> String {
    labels
        .enumerate()
        .map(|(n, label)| format!("[{}] {label}\n", n + 1))
        .collect()
}

impl WorkReport<RuntimeSettings, RuntimeBackend> {
    /// The table of `runtime` or `worker`: one row per store.
    pub fn table(&self) -> String {
        let s = &self.settings;
        let handler = self.workload == "worker";
        let (done, stage) = if handler {
            ("handled", "a→s")
        } else {
            ("claimed", "a→c")
        };
        let mut table = Table::new([
            "store".to_owned(),
            "sent".to_owned(),
            "new".to_owned(),
            done.to_owned(),
            format!("{stage} p50"),
            format!("{stage} p99"),
            format!("{stage} max"),
            "new p50".to_owned(),
            "new p99".to_owned(),
            "append p99".to_owned(),
            "msg/s".to_owned(),
            format!("{done}/s"),
            "claims/s per worker".to_owned(),
        ])
        .right_align(1..13);
        for (n, b) in self.backends.iter().enumerate() {
            table.row([
                format!(
                    "[{}]{}",
                    n + 1,
                    if b.worker_processes {
                        ""
                    } else {
                        " in-process"
                    }
                ),
                b.sent.to_string(),
                b.sent_new.to_string(),
                format!("{}{}", b.claimed, if b.drained { "" } else { " (not all)" }),
                ms(b.append_to_claim.p50_ms),
                ms(b.append_to_claim.p99_ms),
                ms(b.append_to_claim.max_ms),
                ms(b.new_session_first.p50_ms),
                ms(b.new_session_first.p99_ms),
                ms(b.append.p99_ms),
                rate(b.achieved_rate),
                rate(b.handled_per_s),
                per_worker(&b.workers, |w| rate(w.claim_calls_per_s)),
            ]);
        }
        let per_worker = match s.max_in_flight {
            Some(in_flight) if handler => format!("a2-worker with {in_flight} in flight"),
            _ => format!("claim limit {}", s.claim_limit),
        };
        let mut out = format!(
            "a2-store bench --workload {}: {} sessions, {} workers, {} msg/s for {} s{}, every {} to a new session, {} lanes, wait {} ms, {per_worker}\n\n",
            self.workload,
            s.sessions,
            s.workers,
            s.rate,
            s.seconds,
            if s.warm_up_s > 0.0 { format!(" after a {} s warm-up", s.warm_up_s) } else { String::new() },
            if s.new_every == 0 { "none".to_owned() } else { format!("{}th", s.new_every) },
            s.lanes,
            s.wait_ms,
        );
        out.push_str(&table.render());
        out.push('\n');
        out.push_str(&footer(self.backends.iter().map(|b| b.url.clone())));
        out.push_str(if handler {
            "a→s: append→handler start of every message; new: of new sessions' first messages; msg/s: the producer's achieved rate; handled/s: messages handled per second until all were\n"
        } else {
            "a→c: append→claim of every message; new: of new sessions' first messages; msg/s: the producer's achieved rate; claimed/s: messages claimed per second until all were\n"
        });
        out
    }
}

impl WorkReport<IdleSettings, IdleBackend> {
    /// The table: one row per store and worker.
    pub fn table(&self) -> String {
        let s = &self.settings;
        let mut table = Table::new([
            "store",
            "worker",
            "CPU (% of a core)",
            "claim_work calls/s",
            "store calls/s",
            "claimed",
        ])
        .right_align(1..6);
        for (n, b) in self.backends.iter().enumerate() {
            for w in &b.workers {
                table.row([
                    format!("[{}]", n + 1),
                    w.worker.to_string(),
                    percent(w.cpu_percent),
                    format!("{:.2}", w.claim_calls_per_s),
                    format!("{:.2}", w.store_calls_per_s),
                    w.claimed.to_string(),
                ]);
            }
            if let Some(cpu) = b.in_process_cpu_percent {
                table.row([
                    format!("[{}]", n + 1),
                    "all (in-process)".to_owned(),
                    percent(Some(cpu)),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
            }
        }
        let mut out = format!(
            "a2-store bench --workload idle: {} sessions with nothing to do, {} workers waiting {} s, wait {} ms\n\n",
            s.sessions, s.workers, s.seconds, s.wait_ms
        );
        out.push_str(&table.render());
        out.push('\n');
        out.push_str(&footer(self.backends.iter().map(|b| {
            if b.worker_processes {
                b.url.clone()
            } else {
                format!(
                    "{} (workers are tasks of one process: CPU is the whole process's)",
                    b.url
                )
            }
        })));
        out
    }
}

impl WorkReport<FairnessSettings, FairnessBackend> {
    /// The table: one row per store.
    pub fn table(&self) -> String {
        let s = &self.settings;
        let mut table = Table::new([
            "store",
            "p50 alone",
            "p99 alone",
            "p50 w/ backlog",
            "p99 w/ backlog",
            "p99 ratio",
            "append p99 alone",
            "append p99 w/ backlog",
            "backlog claimed",
        ])
        .right_align(1..9);
        for (n, b) in self.backends.iter().enumerate() {
            table.row([
                format!(
                    "[{}]{}",
                    n + 1,
                    if b.drained { "" } else { " (not all claimed)" }
                ),
                ms(b.without_backlog.p50_ms),
                ms(b.without_backlog.p99_ms),
                ms(b.with_backlog.p50_ms),
                ms(b.with_backlog.p99_ms),
                b.p99_ratio
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")),
                ms(b.append_without_backlog.p99_ms),
                ms(b.append_with_backlog.p99_ms),
                b.backlog_claimed.to_string(),
            ]);
        }
        let mut out = format!(
            "a2-store bench --workload fairness: {} small sessions, one message each at {} msg/s{}, beside a {}-event backlog or alone; {} workers, wait {} ms, claim limit {}\n\n",
            s.sessions,
            s.rate,
            if s.warm_up_s > 0.0 { format!(" after a {} s warm-up", s.warm_up_s) } else { String::new() },
            s.backlog,
            s.workers,
            s.wait_ms,
            s.claim_limit
        );
        out.push_str(&table.render());
        out.push('\n');
        out.push_str(&footer(self.backends.iter().map(|b| b.url.clone())));
        out.push_str("append→claim of the small sessions' messages; p99 ratio: with the backlog over without\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_summarise_in_ms() {
        let mut samples: Vec<u64> = (1..=100).rev().map(|n| n * 1_000).collect();
        let latency = Latency::of(&mut samples);
        assert_eq!(latency.count, 100);
        assert_eq!(latency.p50_ms, Some(50.0));
        assert_eq!(latency.p99_ms, Some(99.0));
        assert_eq!(latency.max_ms, Some(100.0));
        assert_eq!(Latency::of(&mut []), Latency::default());
        assert_eq!(ms(Some(1.25)), "1.2ms");
        assert_eq!(ms(None), "-");
        assert_eq!(percent(None), "n/a");
    }
}
