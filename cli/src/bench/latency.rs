//! Latency samples per operation and their percentiles.

use std::time::Duration;

use super::operation::Operation;

/// Every latency sample of one run, per operation, in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Recorder {
    samples: [Vec<u64>; Operation::ALL.len()],
}

/// Count and percentiles of one operation's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// How many calls were timed.
    pub count: u64,
    /// Median latency, ns.
    pub p50_ns: u64,
    /// 99th percentile latency, ns.
    pub p99_ns: u64,
    /// Slowest call, ns.
    pub max_ns: u64,
}

impl Recorder {
    /// Records one call of `operation` that took `elapsed`.
    pub fn record(&mut self, operation: Operation, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.samples[operation.position()].push(ns);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: Recorder) {
        for (mine, theirs) in self.samples.iter_mut().zip(other.samples) {
            mine.extend(theirs);
        }
    }

    /// How many calls were recorded, all operations together.
    pub fn total(&self) -> u64 {
        self.samples.iter().map(|s| s.len() as u64).sum()
    }

    /// The summary of `operation` (sorts its samples).
    pub fn summary(&mut self, operation: Operation) -> Summary {
        let samples = &mut self.samples[operation.position()];
        samples.sort_unstable();
        Summary {
            count: samples.len() as u64,
            p50_ns: percentile(samples, 50),
            p99_ns: percentile(samples, 99),
            max_ns: samples.last().copied().unwrap_or(0),
        }
    }
}

/// Nearest-rank percentile of sorted samples; 0 when there are none.
pub(super) fn percentile(sorted: &[u64], percent: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let n = sorted.len() as u64;
    let rank = (percent * n).div_ceil(100).max(1);
    let at = usize::try_from(rank - 1).unwrap_or(usize::MAX);
    sorted.get(at).or(sorted.last()).copied().unwrap_or(0)
}

/// A latency for people: `850ns`, `3.1µs`, `180µs`, `1.2ms`, `1.50s`.
pub fn human(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 10_000 {
        format!("{:.1}µs", ns_f / 1e3)
    } else if ns < 1_000_000 {
        format!("{:.0}µs", ns_f / 1e3)
    } else if ns < 10_000_000 {
        format!("{:.1}ms", ns_f / 1e6)
    } else if ns < 1_000_000_000 {
        format!("{:.0}ms", ns_f / 1e6)
    } else {
        format!("{:.2}s", ns_f / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&samples, 50), 50);
        assert_eq!(percentile(&samples, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
        assert_eq!(percentile(&[1, 2, 3], 50), 2);
    }

    #[test]
    fn summaries_merge_sessions() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        for us in 1..=3 {
            a.record(Operation::Append, Duration::from_micros(us));
        }
        b.record(Operation::Append, Duration::from_micros(100));
        b.record(Operation::Claim, Duration::from_micros(5));
        a.merge(b);
        assert_eq!(a.total(), 5);
        let append = a.summary(Operation::Append);
        assert_eq!(append.count, 4);
        assert_eq!(append.p50_ns, 2_000);
        assert_eq!(append.p99_ns, 100_000);
        assert_eq!(append.max_ns, 100_000);
        assert_eq!(a.summary(Operation::Clear), Summary::default());
    }

    #[test]
    fn latencies_read_well() {
        assert_eq!(human(850), "850ns");
        assert_eq!(human(3_140), "3.1µs");
        assert_eq!(human(180_400), "180µs");
        assert_eq!(human(1_240_000), "1.2ms");
        assert_eq!(human(25_000_000), "25ms");
        assert_eq!(human(1_500_000_000), "1.50s");
    }
}
