//! Jittered exponential backoff: the one retry pacing used for no-primary and not-ready.

use std::time::Duration;

/// How many times and how fast a call waits for a primary before giving up with
/// `ClusterNotReady`. A daemon, the CLI and the apiserver want different budgets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Backoff attempts before `ClusterNotReady`.
    pub max_attempts: u32,
    pub initial: Duration,
    pub multiplier: f64,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// DESIGN §5.2: 20 attempts, 100 ms initial, doubling, capped at 5 s, full jitter.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 20,
            initial: Duration::from_millis(100),
            multiplier: 2.0,
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// The upper bound of the wait before backoff attempt `n` (0-based): grows by
    /// `multiplier` from `initial` and stays at `max_delay`.
    pub fn ceiling(&self, n: u32) -> Duration {
        let factor = self.multiplier.powi(n.min(64) as i32);
        let ceiling = self.initial.as_secs_f64() * factor;
        Duration::from_secs_f64(ceiling.min(self.max_delay.as_secs_f64()))
    }

    /// A full-jitter delay for attempt `n`: uniform in `[0, ceiling(n)]`, so that clients
    /// that lost the same primary do not come back in step.
    pub fn delay(&self, n: u32) -> Duration {
        let ceiling = self.ceiling(n);
        ceiling.mul_f64(crate::random::unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_then_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.ceiling(0), Duration::from_millis(100));
        assert_eq!(p.ceiling(1), Duration::from_millis(200));
        assert_eq!(p.ceiling(5), Duration::from_millis(3200));
        assert_eq!(p.ceiling(6), Duration::from_secs(5));
        assert_eq!(p.ceiling(1000), Duration::from_secs(5));
        for n in 0..30 {
            assert!(p.delay(n) <= p.ceiling(n));
        }
    }
}
