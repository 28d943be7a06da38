//! Random values straight from the operating system (`getrandom`): request tokens, users'
//! tokens and backoff jitter. A one-shot CLI process needs one or two of them, and seeding a
//! userspace generator (rand's `ThreadRng`) cost more than they are worth: its CPU-feature
//! probe alone took about 80 µs of every `xce submit` on a VM where each `cpuid` traps to the
//! hypervisor (15 µs each, measured).

/// Fills `buf` from the operating system's generator.
///
/// # Panics
/// Only when the operating system has no random source at all, as `rand::random` did: no
/// token the client makes could be trusted without one.
pub fn fill(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("the operating system's random source failed: {e}");
    }
}

/// 128 random bits.
pub fn u128() -> u128 {
    let mut bytes = [0u8; 16];
    fill(&mut bytes);
    u128::from_le_bytes(bytes)
}

/// Uniform in `[0, 1)`: the top 53 bits of a random `u64`, every value a float can hold there.
pub fn unit() -> f64 {
    let mut bytes = [0u8; 8];
    fill(&mut bytes);
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_values_stay_in_range_and_spread_over_it() {
        let values: Vec<f64> = (0..1000).map(|_| unit()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        // A thousand draws leave no tenth of the range empty unless the source is broken
        // (the chance is about 10 * 0.9^1000).
        for tenth in 0..10 {
            let (lo, hi) = (tenth as f64 / 10.0, (tenth + 1) as f64 / 10.0);
            assert!(
                values.iter().any(|v| (lo..hi).contains(v)),
                "none in [{lo}, {hi})"
            );
        }
    }

    #[test]
    fn draws_differ() {
        assert_ne!(u128(), u128());
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        fill(&mut a);
        fill(&mut b);
        assert_ne!(a, b);
    }
}
