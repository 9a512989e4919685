//! How fast a key may be used: the [`Rate`] of a throttle, as GCRA sees it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// `count` requests per `per`, with bursts of up to `burst` at once: the generic cell rate
/// algorithm (GCRA). Requests are admitted one emission interval (`per / count`) apart; a key
/// that was idle may take `burst` at once, and over any span `t` at most
/// `burst + count * t / per` are admitted.
///
/// ```
/// use std::time::Duration;
/// use redefer::throttle::Rate;
///
/// let rate = Rate::per_second(10)?.burst(5)?;
/// assert_eq!(rate.interval(), Duration::from_millis(100));
/// assert_eq!(rate.tolerance(), Duration::from_millis(400));
///
/// let from_config: Rate = serde_json::from_str(r#"{ "count": 600, "per": "1m", "burst": 20 }"#)?;
/// assert_eq!(from_config.interval(), Duration::from_millis(100));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RateFields", into = "RateFields")]
pub struct Rate {
    count: u32,
    per: Duration,
    burst: u32,
}

/// A rate that cannot be kept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RateError {
    /// A rate of 0 requests, or over a period of 0 (or one too short to split into `count`
    /// whole microseconds).
    #[error(
        "a rate needs at least one request over at least one microsecond per request, not {count} per {per:?}"
    )]
    Empty {
        /// The requests asked for.
        count: u32,
        /// Over this period.
        per: Duration,
    },
    /// A burst of 0: no request could ever pass.
    #[error("a burst is at least 1")]
    NoBurst,
}

impl Rate {
    /// `count` requests per `per`, one at a time (a burst of 1).
    pub fn new(count: u32, per: Duration) -> Result<Self, RateError> {
        let rate = Rate { count, per, burst: 1 };
        if count == 0 || rate.interval().is_zero() {
            return Err(RateError::Empty { count, per });
        }
        Ok(rate)
    }

    /// `count` requests per second, one at a time.
    pub fn per_second(count: u32) -> Result<Self, RateError> {
        Rate::new(count, Duration::from_secs(1))
    }

    /// Up to `burst` requests at once after an idle spell (1 by default).
    pub fn burst(self, burst: u32) -> Result<Self, RateError> {
        if burst == 0 {
            return Err(RateError::NoBurst);
        }
        Ok(Rate { burst, ..self })
    }

    /// The time between two admissions once the burst is spent: `per / count`, in whole
    /// microseconds (the resolution of the server's clock).
    pub fn interval(&self) -> Duration {
        Duration::from_micros(
            u64::try_from(self.per.as_micros() / u128::from(self.count.max(1))).unwrap_or(u64::MAX),
        )
    }

    /// How far ahead of its schedule a key may run: `(burst - 1)` intervals.
    pub fn tolerance(&self) -> Duration {
        self.interval().saturating_mul(self.burst.saturating_sub(1))
    }

    /// The requests per period.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The most admitted at once.
    pub fn burst_size(&self) -> u32 {
        self.burst
    }
}

/// A rate as configuration: `{ "count": 10, "per": "1s", "burst": 5 }`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateFields {
    count: u32,
    #[serde(with = "humantime_serde")]
    per: Duration,
    #[serde(default = "one")]
    burst: u32,
}

fn one() -> u32 {
    1
}

impl TryFrom<RateFields> for Rate {
    type Error = RateError;

    fn try_from(fields: RateFields) -> Result<Self, RateError> {
        Rate::new(fields.count, fields.per)?.burst(fields.burst)
    }
}

impl From<Rate> for RateFields {
    fn from(rate: Rate) -> Self {
        RateFields {
            count: rate.count,
            per: rate.per,
            burst: rate.burst,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_that_cannot_be_kept_are_refused() {
        assert!(matches!(Rate::per_second(0), Err(RateError::Empty { .. })));
        assert!(matches!(
            Rate::new(10, Duration::from_micros(5)),
            Err(RateError::Empty { .. })
        ));
        assert_eq!(
            Rate::per_second(3).and_then(|rate| rate.burst(0)),
            Err(RateError::NoBurst)
        );
        assert!(serde_json::from_str::<Rate>(r#"{ "count": 0, "per": "1s" }"#).is_err());
    }

    #[test]
    fn the_interval_is_the_period_split_into_whole_microseconds() {
        let rate = Rate::per_second(3).unwrap();
        assert_eq!(rate.interval(), Duration::from_micros(333_333));
        assert_eq!(rate.tolerance(), Duration::ZERO);
        assert_eq!(rate.burst(4).unwrap().tolerance(), Duration::from_micros(999_999));
    }
}
