//! CPU time this process has used, from `/proc/self/stat` (Linux only).

use std::time::Duration;

/// Clock ticks per second of the `utime`/`stime` fields of `/proc/*/stat`
/// (`USER_HZ`, fixed at 100 by the Linux ABI on every architecture this
/// tool builds for).
const USER_HZ: u64 = 100;

/// CPU time (user plus system, all threads) this process has used so far;
/// `None` where `/proc/self/stat` cannot be read or parsed (not Linux).
/// Its resolution is 1/`USER_HZ` s (10 ms).
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&stat)
}

/// `utime + stime` of one `/proc/PID/stat` line.
fn parse_stat(stat: &str) -> Option<Duration> {
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself: fields are counted after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    // After the name: state (3), ppid, pgrp, session, tty_nr, tpgid, flags,
    // minflt, cminflt, majflt, cmajflt (13), utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime.checked_add(stime)?;
    Some(Duration::from_millis(ticks.checked_mul(1_000 / USER_HZ)?))
}

/// `used` over `wall` as a percentage of one core; `None` without a wall time.
pub fn percent_of_core(used: Duration, wall: Duration) -> Option<f64> {
    (wall > Duration::ZERO).then(|| used.as_secs_f64() / wall.as_secs_f64() * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_past_odd_names() {
        let line = "4242 (a2 (store)) S 1 4242 4242 0 -1 4194560 912 0 0 0 37 5 0 0 20 0 3 0 1 1 1";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(420)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_has_a_cpu_time_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu().is_some());
        }
    }

    #[test]
    fn percentages_are_of_one_core() {
        let half = percent_of_core(Duration::from_millis(500), Duration::from_secs(1));
        assert_eq!(half, Some(50.0));
        assert_eq!(percent_of_core(Duration::ZERO, Duration::ZERO), None);
    }
}
