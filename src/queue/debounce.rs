//! A debounce's two times: the quiet period that ends a burst, and the longest a burst waits.
//! The queue keeps them with a key's pending job (a replaced payload makes it due a period
//! later); the [`DebounceLayer`](crate::debounce::DebounceLayer) sets them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a key's burst of requests is debounced: its job runs `period` after the burst's last
/// request, and never later than `max_wait` after its first (so a burst that never pauses
/// still runs, once every `max_wait`).
///
/// ```
/// use std::time::Duration;
/// use redefer::debounce::Debounce;
///
/// let debounce = Debounce::new(Duration::from_millis(200), Duration::from_secs(1))?;
/// let from_config: Debounce = serde_json::from_str(r#"{ "period": "200ms", "max_wait": "1s" }"#)?;
/// assert_eq!(debounce, from_config);
/// assert!(Debounce::new(Duration::from_secs(2), Duration::from_secs(1)).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "DebounceFields", into = "DebounceFields")]
pub struct Debounce {
    /// How long without a new request ends a burst.
    pub period: Duration,
    /// The longest a burst waits, from its first request.
    pub max_wait: Duration,
}

/// A debounce that cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DebounceError {
    /// A period of zero ends every burst at once: nothing would be debounced.
    #[error("a debounce period must be above zero")]
    ZeroPeriod,
    /// The longest wait is shorter than the period: every burst would run at `max_wait`.
    #[error("a debounce's max_wait ({max_wait:?}) is shorter than its period ({period:?})")]
    MaxWaitBelowPeriod {
        /// The period asked for.
        period: Duration,
        /// The longest wait asked for.
        max_wait: Duration,
    },
}

impl Debounce {
    /// Runs a burst `period` after its last request, at most `max_wait` after its first.
    pub fn new(period: Duration, max_wait: Duration) -> Result<Self, DebounceError> {
        if period.is_zero() {
            return Err(DebounceError::ZeroPeriod);
        }
        if max_wait < period {
            return Err(DebounceError::MaxWaitBelowPeriod { period, max_wait });
        }
        Ok(Debounce { period, max_wait })
    }
}

/// The configuration form, checked by [`Debounce::new`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DebounceFields {
    #[serde(with = "humantime_serde")]
    period: Duration,
    #[serde(with = "humantime_serde")]
    max_wait: Duration,
}

impl TryFrom<DebounceFields> for Debounce {
    type Error = DebounceError;

    fn try_from(fields: DebounceFields) -> Result<Self, DebounceError> {
        Debounce::new(fields.period, fields.max_wait)
    }
}

impl From<Debounce> for DebounceFields {
    fn from(debounce: Debounce) -> Self {
        DebounceFields {
            period: debounce.period,
            max_wait: debounce.max_wait,
        }
    }
}
