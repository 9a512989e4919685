//! Exponential backoff with jitter, as a pure function of the attempt number.
//!
//! The same [`Backoff`] decides how long a sleep-retry waits between acquisition attempts and
//! how far in the future a deferred job becomes due again, so both grow the same way.

use std::time::Duration;

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

/// Exponential backoff: attempt `n` (counting from 0) waits up to
/// `min(cap, initial * factor^n)`, shortened by a random part of at most `jitter` of it.
///
/// With `jitter = 0` the delay is exact; with `jitter = 1` ("full jitter") it is uniform in
/// `[0, upper bound]`, which spreads out callers that collided at the same moment.
///
/// Deserializes from human-readable durations:
///
/// ```
/// use std::time::Duration;
/// use redefer::Backoff;
///
/// let backoff: Backoff = serde_json::from_str(
///     r#"{ "initial": "50ms", "factor": 2.0, "cap": "2s", "jitter": 0.0 }"#,
/// )?;
/// let mut rng = rand::rng();
/// assert_eq!(backoff.delay(0, &mut rng), Duration::from_millis(50));
/// assert_eq!(backoff.delay(3, &mut rng), Duration::from_millis(400));
/// assert_eq!(backoff.delay(30, &mut rng), Duration::from_secs(2));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Backoff {
    /// The delay before the first retry.
    #[serde(with = "humantime_serde")]
    pub initial: Duration,
    /// How much each further attempt multiplies the delay by; values below 1 count as 1.
    pub factor: f64,
    /// The longest delay, whatever the attempt.
    #[serde(with = "humantime_serde")]
    pub cap: Duration,
    /// The part of each delay, from 0 to 1, that is replaced by a random amount.
    pub jitter: f64,
}

impl Default for Backoff {
    /// 100 ms, doubling, at most 30 s, with half of each delay random.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            factor: 2.0,
            cap: Duration::from_secs(30),
            jitter: 0.5,
        }
    }
}

impl Backoff {
    /// A backoff without jitter that starts at `initial` and doubles up to `cap`.
    pub fn exponential(initial: Duration, cap: Duration) -> Self {
        Backoff {
            initial,
            factor: 2.0,
            cap,
            jitter: 0.0,
        }
    }

    /// The same backoff with a different jitter fraction (clamped to `[0, 1]`).
    pub fn with_jitter(self, jitter: f64) -> Self {
        Backoff { jitter, ..self }
    }

    /// Why this backoff cannot work as written, if it cannot: the field at fault and the
    /// problem. `factor` must be finite and at least 1, `jitter` within `[0, 1]`, `initial` no
    /// more than `cap`. ([`delay`](Self::delay) clamps such values; a configuration should say
    /// what it means.)
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::Backoff;
    ///
    /// let backwards = Backoff::exponential(Duration::from_secs(5), Duration::from_secs(1));
    /// assert_eq!(backwards.problem(), Some(("initial", "must not exceed cap")));
    /// assert_eq!(Backoff::default().problem(), None);
    /// ```
    pub fn problem(&self) -> Option<(&'static str, &'static str)> {
        if !self.factor.is_finite() || self.factor < 1.0 {
            return Some(("factor", "must be a finite number of at least 1"));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Some(("jitter", "must be within 0 and 1"));
        }
        if self.initial > self.cap {
            return Some(("initial", "must not exceed cap"));
        }
        None
    }

    /// The longest delay attempt `attempt` can get: `min(cap, initial * factor^attempt)`.
    /// Never decreases as `attempt` grows.
    pub fn upper_bound(&self, attempt: u32) -> Duration {
        let factor = if self.factor.is_finite() {
            self.factor.max(1.0)
        } else {
            1.0
        };
        let cap = self.cap.as_secs_f64();
        let grown = self.initial.as_secs_f64() * factor.powi(attempt.min(i32::MAX as u32) as i32);
        // `grown` may be infinite for large attempts; `min` keeps it at the cap.
        Duration::from_secs_f64(grown.min(cap).max(0.0))
    }

    /// The delay for `attempt` (counting from 0): the upper bound less a random part of at most
    /// `jitter` of it. Always within `[0, cap]`.
    pub fn delay<R: Rng + ?Sized>(&self, attempt: u32, rng: &mut R) -> Duration {
        let upper = self.upper_bound(attempt);
        let jitter = if self.jitter.is_finite() {
            self.jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        if jitter == 0.0 || upper.is_zero() {
            return upper;
        }
        let cut: f64 = rng.random::<f64>() * jitter;
        upper.mul_f64(1.0 - cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn any_backoff() -> impl Strategy<Value = Backoff> {
        (0u64..10_000, -1.0f64..10.0, 0u64..100_000, -0.5f64..1.5).prop_map(
            |(initial, factor, cap, jitter)| Backoff {
                initial: Duration::from_millis(initial),
                factor,
                cap: Duration::from_millis(cap),
                jitter,
            },
        )
    }

    proptest! {
        #[test]
        fn delay_stays_within_zero_and_cap(b in any_backoff(), attempt in 0u32..200, seed: u64) {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let d = b.delay(attempt, &mut rng);
            prop_assert!(d <= b.cap);
            prop_assert!(d <= b.upper_bound(attempt));
        }

        #[test]
        fn upper_bound_never_decreases(b in any_backoff(), attempt in 0u32..200) {
            prop_assert!(b.upper_bound(attempt) <= b.upper_bound(attempt + 1));
        }

        #[test]
        fn jitter_removes_at_most_its_fraction(b in any_backoff(), attempt in 0u32..64, seed: u64) {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let upper = b.upper_bound(attempt).as_secs_f64();
            let jitter = b.jitter.clamp(0.0, 1.0);
            let d = b.delay(attempt, &mut rng).as_secs_f64();
            prop_assert!(d >= upper * (1.0 - jitter) - 1e-9, "{d} below {}", upper * (1.0 - jitter));
        }

        #[test]
        fn serde_round_trip(b in any_backoff()) {
            let text = serde_json::to_string(&b).unwrap();
            let back: Backoff = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back.initial, b.initial);
            prop_assert_eq!(back.cap, b.cap);
        }
    }

    #[test]
    fn no_jitter_is_exact_doubling() {
        let b = Backoff::exponential(Duration::from_millis(10), Duration::from_secs(1));
        let mut rng = rand::rng();
        let delays: Vec<_> = (0..9).map(|n| b.delay(n, &mut rng).as_millis()).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }
}
