//! How long this layer's locks are typically held, across keys: the fallback of a
//! `retry_after` estimate on a key whose own holds were never measured.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The typical hold assumed before a layer has measured any: a short handler's.
pub const DEFAULT_TYPICAL_HOLD: Duration = Duration::from_millis(100);

/// A moving average of the holds one layer measured (its releases), in microseconds; 0 before
/// the first. Lock-free: one atomic read and one compare-and-swap per release.
#[derive(Debug, Default)]
pub(crate) struct LayerHolds {
    average_us: AtomicU64,
}

impl LayerHolds {
    /// Folds one hold in: each new hold weighs an eighth, so the average follows a change of
    /// the handlers within a few dozen releases.
    pub(crate) fn record(&self, held: Duration) {
        let held = u64::try_from(held.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .average_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
                Some(if average == 0 {
                    held
                } else {
                    average - average / 8 + held / 8
                })
            });
    }

    /// The average so far; `None` before the first release.
    pub(crate) fn typical(&self) -> Option<Duration> {
        match self.average_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_starts_at_the_first_hold_and_follows_the_next() {
        let holds = LayerHolds::default();
        assert_eq!(holds.typical(), None);
        holds.record(Duration::from_millis(80));
        assert_eq!(holds.typical(), Some(Duration::from_millis(80)));
        for _ in 0..64 {
            holds.record(Duration::from_millis(40));
        }
        let typical = holds.typical().unwrap();
        assert!(typical < Duration::from_millis(41), "{typical:?}");
    }
}
