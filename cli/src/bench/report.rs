//! Bench results: the side-by-side table, JSON and CSV.

use serde::Serialize;

use super::latency::{human, Recorder, Summary};
use super::operation::Operation;
use crate::table::Table;

/// Version of the workload mix; bumped whenever the mix changes, so results
/// of different versions are never compared.
pub const WORKLOAD_VERSION: u32 = 1;

/// The results of a whole `bench` run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Workload mix version (see `a2-store bench --help`).
    pub workload_version: u32,
    /// Requested run length per store, s.
    pub seconds: f64,
    /// Sessions run concurrently.
    pub sessions: u32,
    /// One entry per store, in the order given.
    pub backends: Vec<BackendReport>,
}

/// The results against one store.
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// The store URL as given (or the default it stands for).
    pub url: String,
    /// Measured wall time, s.
    pub elapsed_s: f64,
    /// Workload rounds finished, all sessions together.
    pub rounds: u64,
    /// Every operation together.
    pub total: OperationReport,
    /// Each operation, in workload order.
    pub operations: Vec<OperationReport>,
}

/// Throughput and latency of one operation (or all) against one store.
#[derive(Debug, Clone, Serialize)]
pub struct OperationReport {
    /// `append`, `claim`, `complete`, `fail`, `clear`, `reclaim`, or `all`.
    pub operation: String,
    /// Calls made.
    pub count: u64,
    /// Calls per second of wall time.
    pub ops_per_sec: f64,
    /// Median latency, µs (absent for `all`).
    pub p50_us: Option<f64>,
    /// 99th percentile latency, µs (absent for `all`).
    pub p99_us: Option<f64>,
    /// Slowest call, µs (absent for `all`).
    pub max_us: Option<f64>,
    /// `ops_per_sec` divided by the fastest store's for this operation (1.0 = fastest).
    pub ratio_to_fastest: f64,
}

impl BackendReport {
    /// The report of a run against `url` that took `elapsed_s` seconds.
    pub fn new(url: String, elapsed_s: f64, rounds: u64, mut recorder: Recorder) -> Self {
        let rate = |count: u64| {
            if elapsed_s > 0.0 {
                count as f64 / elapsed_s
            } else {
                0.0
            }
        };
        let total_count = recorder.total();
        let operations = Operation::ALL
            .iter()
            .map(|op| {
                let Summary {
                    count,
                    p50_ns,
                    p99_ns,
                    max_ns,
                } = recorder.summary(*op);
                let us = |ns: u64| (count > 0).then(|| ns as f64 / 1e3);
                OperationReport {
                    operation: op.name().to_owned(),
                    count,
                    ops_per_sec: rate(count),
                    p50_us: us(p50_ns),
                    p99_us: us(p99_ns),
                    max_us: us(max_ns),
                    ratio_to_fastest: 0.0,
                }
            })
            .collect();
        Self {
            url,
            elapsed_s,
            rounds,
            total: OperationReport {
                operation: "all".to_owned(),
                count: total_count,
                ops_per_sec: rate(total_count),
                p50_us: None,
                p99_us: None,
                max_us: None,
                ratio_to_fastest: 0.0,
            },
            operations,
        }
    }
}

impl BenchReport {
    /// A report over `backends`, with every ratio to the fastest filled in.
    pub fn new(seconds: f64, sessions: u32, mut backends: Vec<BackendReport>) -> Self {
        let best_total = backends
            .iter()
            .map(|b| b.total.ops_per_sec)
            .fold(0.0, f64::max);
        for backend in &mut backends {
            backend.total.ratio_to_fastest = ratio(backend.total.ops_per_sec, best_total);
        }
        for position in 0..Operation::ALL.len() {
            let best = backends
                .iter()
                .filter_map(|b| b.operations.get(position))
                .map(|op| op.ops_per_sec)
                .fold(0.0, f64::max);
            for backend in &mut backends {
                if let Some(op) = backend.operations.get_mut(position) {
                    op.ratio_to_fastest = ratio(op.ops_per_sec, best);
                }
            }
        }
        Self {
            workload_version: WORKLOAD_VERSION,
            seconds,
            sessions,
            backends,
        }
    }

    /// The side-by-side table: one row per operation, for each store its
    /// ops/s, p50, p99 and ratio to the fastest. Stores are headed `[n]` and
    /// a short form of their URL; the full URLs follow the table.
    pub fn table(&self) -> String {
        let mut headers = vec!["operation".to_owned()];
        let mut groups = vec![(String::new(), 1)];
        for (n, backend) in self.backends.iter().enumerate() {
            headers.extend(["ops/s", "p50", "p99", "vs best"].map(str::to_owned));
            groups.push((
                format!("[{}] {}", n + 1, shorten(&backend.url, LABEL_MAX)),
                4,
            ));
        }
        let numeric = 1..headers.len();
        let mut table = Table::new(headers).groups(groups).right_align(numeric);
        for position in 0..Operation::ALL.len() {
            let mut row = vec![Operation::ALL[position].name().to_owned()];
            for backend in &self.backends {
                match backend.operations.get(position) {
                    Some(op) if op.count > 0 => row.extend([
                        thousands(op.ops_per_sec),
                        op.p50_us.map_or_else(String::new, us_human),
                        op.p99_us.map_or_else(String::new, us_human),
                        times(op.ratio_to_fastest),
                    ]),
                    _ => row.extend(["-", "", "", ""].map(str::to_owned)),
                }
            }
            table.row(row);
        }
        let mut total = vec!["all".to_owned()];
        for backend in &self.backends {
            total.extend([
                thousands(backend.total.ops_per_sec),
                String::new(),
                String::new(),
                times(backend.total.ratio_to_fastest),
            ]);
        }
        table.row(total);
        let mut out = format!(
            "a2-store bench: workload v{}, {} s per store, {} concurrent sessions\n\n",
            self.workload_version,
            trim_float(self.seconds),
            self.sessions
        );
        out.push_str(&table.render());
        out.push('\n');
        for (n, backend) in self.backends.iter().enumerate() {
            out.push_str(&format!(
                "[{}] {} — {} calls in {:.2} s ({} rounds)\n",
                n + 1,
                backend.url,
                thousands(backend.total.count as f64),
                backend.elapsed_s,
                thousands(backend.rounds as f64)
            ));
        }
        out.push_str(
            "ops/s: calls per second of wall time; p50/p99: latency of one call; vs best: ops/s over the fastest store's (1.00x = fastest)\n",
        );
        out
    }

    /// One CSV row per store and operation (plus `all`), with a header line.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "backend,operation,count,ops_per_sec,p50_us,p99_us,max_us,ratio_to_fastest\n",
        );
        for backend in &self.backends {
            for op in backend.operations.iter().chain([&backend.total]) {
                let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.3}"));
                out.push_str(&format!(
                    "{},{},{},{:.3},{},{},{},{:.4}\n",
                    csv_field(&backend.url),
                    op.operation,
                    op.count,
                    op.ops_per_sec,
                    opt(op.p50_us),
                    opt(op.p99_us),
                    opt(op.max_us),
                    op.ratio_to_fastest
                ));
            }
        }
        out
    }
}

/// Longest store label in the table header; longer URLs are cut in the middle.
const LABEL_MAX: usize = 30;

/// `text` cut to `max` characters with `…` in the middle.
fn shorten(text: &str, max: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= max {
        return text.to_owned();
    }
    let head = (max - 1) / 2;
    let tail = max - 1 - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

fn ratio(value: f64, best: f64) -> f64 {
    if best > 0.0 {
        value / best
    } else {
        0.0
    }
}

/// A ratio as `1.00x`, with more decimals below 0.1 so small ones stay distinct.
fn times(ratio: f64) -> String {
    if ratio >= 0.1 {
        format!("{ratio:.2}x")
    } else if ratio >= 0.01 {
        format!("{ratio:.3}x")
    } else {
        format!("{ratio:.4}x")
    }
}

fn us_human(us: f64) -> String {
    human((us * 1e3).round() as u64)
}

/// A rate as a whole number with `,` between thousands.
fn thousands(value: f64) -> String {
    let whole = value.round().max(0.0) as u64;
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn trim_float(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn backend(url: &str, calls: u64, micros: u64) -> BackendReport {
        let mut recorder = Recorder::default();
        for _ in 0..calls {
            recorder.record(Operation::Append, Duration::from_micros(micros));
            recorder.record(Operation::Claim, Duration::from_micros(micros));
        }
        BackendReport::new(url.to_owned(), 2.0, calls, recorder)
    }

    #[test]
    fn ratios_are_to_the_fastest() {
        let report = BenchReport::new(
            2.0,
            4,
            vec![
                backend("memory:", 1000, 2),
                backend("sqlite:a,b.db", 100, 50),
            ],
        );
        assert_eq!(report.backends[0].total.ratio_to_fastest, 1.0);
        assert_eq!(report.backends[1].total.ratio_to_fastest, 0.1);
        assert_eq!(report.backends[0].operations[0].ops_per_sec, 500.0);
        assert_eq!(report.backends[1].operations[0].p50_us, Some(50.0));
        assert_eq!(report.backends[1].operations[4].p50_us, None);
        assert_eq!(report.backends[1].operations[4].ratio_to_fastest, 0.0);
    }

    #[test]
    fn table_and_csv_show_every_store() {
        let report = BenchReport::new(
            2.0,
            4,
            vec![
                backend("memory:", 1000, 2),
                backend("sqlite:a,b.db", 100, 50),
            ],
        );
        let table = report.table();
        assert!(table.contains("memory:"), "{table}");
        assert!(table.contains("0.10x"), "{table}");
        assert!(table.contains("2.0µs"), "{table}");
        let csv = report.csv();
        assert_eq!(csv.lines().count(), 1 + 2 * 7, "{csv}");
        assert!(
            csv.contains("\"sqlite:a,b.db\",append,100,50.000,50.000,50.000,50.000,0.1000"),
            "{csv}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["backends"][0]["operations"][0]["operation"], "append");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(0.2), "0");
        assert_eq!(trim_float(3.0), "3");
        assert_eq!(shorten("memory:", 30), "memory:");
        assert_eq!(
            shorten("sqlite:/tmp/a2-bench-abc/bench.db", 11),
            "sqlit…ch.db"
        );
        assert_eq!(
            shorten("sqlite:/tmp/a2-bench-abc/bench.db", 11)
                .chars()
                .count(),
            11
        );
        assert_eq!(times(1.0), "1.00x");
        assert_eq!(times(0.25), "0.25x");
        assert_eq!(times(0.0312), "0.031x");
        assert_eq!(times(0.0094), "0.0094x");
        assert_eq!(trim_float(0.25), "0.25");
        assert_eq!(csv_field("a\"b"), "\"a\"\"b\"");
        assert_eq!(csv_field("a,\"b"), "\"a,\"\"b\"");
    }
}
