//! Retry policy: how long a failed head waits before it is claimed again,
//! and after how many failures it is dead-lettered.

use std::time::Duration;

/// How the delay before a retry grows with the head's failures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Backoff {
    /// The same delay after every failure.
    Fixed(Duration),
    /// `initial × multiplier^(failures − 1)`, never more than `max`, then
    /// shortened by up to `jitter` of itself at random (`jitter` 0.5: a
    /// delay anywhere between half and all of it), so heads that failed
    /// together are not retried together.
    Exponential {
        /// The delay after the first failure (before jitter).
        initial: Duration,
        /// The growth per further failure (at least 1).
        multiplier: f64,
        /// The cap on the delay (before jitter).
        max: Duration,
        /// The fraction of the delay taken off at random, 0 to 1.
        jitter: f64,
    },
}

impl Backoff {
    /// Exponential backoff from `initial`, doubling up to `max`, with jitter 0.5.
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Self::Exponential {
            initial,
            multiplier: 2.0,
            max,
            jitter: 0.5,
        }
    }

    /// The same policy with `jitter` (clamped to 0..=1); a fixed delay is unchanged.
    pub fn with_jitter(self, jitter: f64) -> Self {
        match self {
            Self::Fixed(delay) => Self::Fixed(delay),
            Self::Exponential {
                initial,
                multiplier,
                max,
                ..
            } => Self::Exponential {
                initial,
                multiplier,
                max,
                jitter: clamp_unit(jitter),
            },
        }
    }

    /// The delay after the head's `failures`-th failure (1-based; 0 is
    /// taken as 1) before jitter: the longest delay [`delay`](Self::delay)
    /// can answer.
    pub fn base_delay(&self, failures: u32) -> Duration {
        match *self {
            Self::Fixed(delay) => delay,
            Self::Exponential {
                initial,
                multiplier,
                max,
                ..
            } => {
                let exponent = failures.max(1).saturating_sub(1);
                let multiplier = if multiplier.is_finite() {
                    multiplier.max(1.0)
                } else {
                    1.0
                };
                let factor = multiplier.powi(i32::try_from(exponent).unwrap_or(i32::MAX));
                let secs = initial.as_secs_f64() * factor;
                if !secs.is_finite() || secs >= max.as_secs_f64() {
                    max
                } else {
                    Duration::from_secs_f64(secs).min(max)
                }
            }
        }
    }

    /// The delay after the `failures`-th failure with the random draw
    /// `unit` (0 to 1; 0 takes nothing off): `base × (1 − jitter × unit)`.
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let base = self.base_delay(failures);
        match *self {
            Self::Fixed(_) => base,
            Self::Exponential { jitter, .. } => {
                let keep = 1.0 - clamp_unit(jitter) * clamp_unit(unit);
                base.mul_f64(keep.clamp(0.0, 1.0))
            }
        }
    }
}

fn clamp_unit(value: f64) -> f64 {
    if value.is_nan() {
        0.0
    } else {
        value.clamp(0.0, 1.0)
    }
}

/// When a failed head is retried and when it is given up on.
///
/// The defaults (see [`Default`]) ride out an outage of about nine minutes
/// before a head is dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The delay before the head is claimable again after a retryable failure.
    pub backoff: Backoff,
    /// The failure that reaches this count dead-letters the head (at least
    /// 1). Failures are the store's count for the head: failed attempts and
    /// leases that expired (a worker that died).
    pub max_failures: u32,
}

impl RetryPolicy {
    /// The default policy: exponential from 1 s, doubling, capped at 5 min,
    /// jitter 0.5, dead letter at the 10th failure.
    pub const DEFAULT: Self = Self {
        backoff: Backoff::Exponential {
            initial: Duration::from_secs(1),
            multiplier: 2.0,
            max: Duration::from_secs(300),
            jitter: 0.5,
        },
        max_failures: 10,
    };

    /// A policy retrying after `delay` every time, dead-lettering at `max_failures`.
    pub fn fixed(delay: Duration, max_failures: u32) -> Self {
        Self {
            backoff: Backoff::Fixed(delay),
            max_failures: max_failures.max(1),
        }
    }

    /// A policy with exponential `backoff`, dead-lettering at `max_failures`.
    pub fn exponential(initial: Duration, max: Duration, max_failures: u32) -> Self {
        Self {
            backoff: Backoff::exponential(initial, max),
            max_failures: max_failures.max(1),
        }
    }

    /// The same policy with `jitter` on an exponential backoff.
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.backoff = self.backoff.with_jitter(jitter);
        self
    }

    /// The delay after the head's `failures`-th failure, drawing the jitter at random.
    pub fn delay(&self, failures: u32) -> Duration {
        self.backoff.delay(failures, fastrand::f64())
    }

    /// `max_failures`, at least 1.
    pub fn dead_letter_at(&self) -> u32 {
        self.max_failures.max(1)
    }
}

impl Default for RetryPolicy {
    /// [`RetryPolicy::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn fixed_backoff_is_the_same_every_time() {
        let backoff = Backoff::Fixed(S(3));
        for failures in [0, 1, 2, 50, u32::MAX] {
            assert_eq!(backoff.delay(failures, 0.9), S(3));
        }
    }

    #[test]
    fn exponential_backoff_doubles_up_to_its_cap() {
        let backoff = Backoff::exponential(S(1), S(60)).with_jitter(0.0);
        let delays: Vec<u64> = (1..=8).map(|n| backoff.delay(n, 0.7).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff.delay(0, 0.0), S(1));
        assert_eq!(backoff.delay(u32::MAX, 0.0), S(60));
    }

    #[test]
    fn jitter_takes_off_at_most_its_fraction() {
        let backoff = Backoff::exponential(S(8), S(60));
        assert_eq!(backoff.delay(1, 0.0), S(8));
        assert_eq!(backoff.delay(1, 1.0), S(4));
        assert_eq!(backoff.delay(1, 0.5), S(6));
        let policy = RetryPolicy::exponential(S(8), S(60), 3);
        for _ in 0..100 {
            let delay = policy.delay(2);
            assert!(delay >= S(8) && delay <= S(16), "{delay:?}");
        }
    }

    #[test]
    fn odd_parameters_never_panic_or_exceed_the_cap() {
        let backoff = Backoff::Exponential {
            initial: S(1),
            multiplier: f64::NAN,
            max: S(10),
            jitter: f64::INFINITY,
        };
        assert_eq!(backoff.delay(5, 0.5), S(1).mul_f64(0.5));
        let shrinking = Backoff::Exponential {
            initial: S(4),
            multiplier: 0.1,
            max: S(10),
            jitter: 0.0,
        };
        assert_eq!(shrinking.delay(3, 0.0), S(4));
        let huge = Backoff::Exponential {
            initial: Duration::MAX,
            multiplier: 1e300,
            max: S(10),
            jitter: -2.0,
        };
        assert_eq!(huge.delay(1000, f64::NAN), S(10));
    }

    #[test]
    fn defaults_and_floors() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.max_failures, 10);
        assert_eq!(policy.backoff.base_delay(1), S(1));
        assert_eq!(policy.backoff.base_delay(10), S(300));
        assert_eq!(RetryPolicy::fixed(S(1), 0).dead_letter_at(), 1);
    }
}
