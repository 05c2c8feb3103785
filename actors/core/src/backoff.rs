//! Exponential backoff: the one rule for how long anything in fleetd waits after a failure
//! before it tries again (a peer link's redial, a mail transmission, a supervised restart, a
//! listener's accept, the MCP shim's reconnect).
//!
//! Owns the arithmetic only: the ceiling after `n` failures doubles from `min_ms` and stops at
//! `max_ms`; [`Backoff::full_jitter`] draws the wait uniformly from `[1, ceiling]` (AWS's "full
//! jitter", so hosts that failed together do not retry together), from a seeded generator
//! ([`Jitter`]) so the cores that use it stay deterministic. Pure: it must never read a clock,
//! sleep or draw entropy.

use crate::types::Millis;

/// Doubling from `min_ms` to `max_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub min_ms: Millis,
    pub max_ms: Millis,
}

impl Backoff {
    pub const fn new(min_ms: Millis, max_ms: Millis) -> Backoff {
        Backoff { min_ms, max_ms }
    }

    /// The wait after `failures` failures in a row (the first failure waits `min_ms`), never
    /// above `max_ms` and never 0 (a failure never retries in the same instant). Saturates: any
    /// number of failures is fine.
    pub fn ceiling(&self, failures: u32) -> Millis {
        let shift = failures.saturating_sub(1).min(40);
        self.min_ms
            .saturating_mul(1u64 << shift)
            .min(self.max_ms)
            .max(1)
    }

    /// A wait drawn uniformly from `[1, ceiling(failures)]`.
    pub fn full_jitter(&self, failures: u32, jitter: &mut Jitter) -> Millis {
        1 + jitter.draw() % self.ceiling(failures)
    }

    /// [`Backoff::ceiling`] as a `Duration`, for the shells that sleep on it.
    pub fn delay(&self, failures: u32) -> std::time::Duration {
        std::time::Duration::from_millis(self.ceiling(failures))
    }
}

/// A small deterministic generator (xorshift64*) for jitter: seeded by the caller from what
/// tells two hosts apart (their names and keys), so two hosts draw different waits and a test
/// draws the same ones every run.
#[derive(Clone, Debug)]
pub struct Jitter(u64);

impl Jitter {
    /// Seeded from `bytes` (FNV-1a); never the all-zero state xorshift cannot leave.
    pub fn seeded(bytes: impl IntoIterator<Item = u8>) -> Jitter {
        let mut seed = 0xcbf2_9ce4_8422_2325u64;
        for b in bytes {
            seed = (seed ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        Jitter(seed | 1)
    }

    pub fn draw(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_ceiling_doubles_from_min_and_stops_at_max() {
        let b = Backoff::new(200, 30_000);
        let got: Vec<Millis> = (1..=10).map(|n| b.ceiling(n)).collect();
        assert_eq!(
            got,
            [
                200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000
            ]
        );
        // No failure yet counts as the first; a zero minimum still waits.
        assert_eq!(b.ceiling(0), 200);
        assert_eq!(Backoff::new(0, 0).ceiling(3), 1);
        assert_eq!(b.ceiling(u32::MAX), 30_000);
        assert_eq!(Backoff::new(u64::MAX, u64::MAX).ceiling(u32::MAX), u64::MAX);
    }

    #[test]
    fn full_jitter_spreads_over_the_whole_range() {
        let b = Backoff::new(1_000, 60_000);
        let mut j = Jitter::seeded(*b"host-a");
        let draws: Vec<Millis> = (0..2_000).map(|_| b.full_jitter(1, &mut j)).collect();
        assert!(draws.iter().all(|d| (1..=1_000).contains(d)));
        // Both ends of the range are reached, not only its upper half.
        assert!(draws.iter().any(|&d| d < 100), "never below 100 ms");
        assert!(draws.iter().any(|&d| d > 900), "never above 900 ms");
        // Two hosts seeded apart draw apart.
        let mut k = Jitter::seeded(*b"host-b");
        let theirs: Vec<Millis> = (0..20).map(|_| b.full_jitter(5, &mut k)).collect();
        let mut j = Jitter::seeded(*b"host-a");
        let ours: Vec<Millis> = (0..20).map(|_| b.full_jitter(5, &mut j)).collect();
        assert_ne!(ours, theirs);
    }

    proptest! {
        #[test]
        fn waits_are_bounded_and_never_shrink_as_failures_grow(
            min in 0u64..100_000,
            extra in 0u64..10_000_000,
            n in 0u32..100,
            seed: u64,
        ) {
            let b = Backoff::new(min, min + extra);
            prop_assert!(b.ceiling(n) <= (min + extra).max(1));
            prop_assert!(b.ceiling(n) >= 1);
            prop_assert!(b.ceiling(n + 1) >= b.ceiling(n));
            let mut j = Jitter::seeded(seed.to_le_bytes());
            let w = b.full_jitter(n, &mut j);
            prop_assert!(w >= 1 && w <= b.ceiling(n));
        }
    }
}
