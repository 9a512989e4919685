//! Sleep and try again, within bounds, then fall through.

use std::future::{Future, ready};
use std::time::Duration;

use futures_util::future::Either;
use serde::{Deserialize, Serialize};

use super::{Conflict, ConflictStrategy, Decision, FailFast};
use crate::backoff::Backoff;
use crate::error::BoxError;

/// Waits with exponential backoff and jitter and tries to acquire again, at most
/// `max_attempts` times and for at most `max_wait` in all; then hands the conflict to the
/// fallback strategy ([`FailFast`] unless set with [`then`](Retry::then)).
///
/// Over a [throttle](crate::throttle)'s rate, the wait is exactly until the key's next slot,
/// which the throttle books for the caller: it runs then, without a second check (when that
/// wait is within `max_wait`).
///
/// Waiting is a timer: it holds no thread and no connection.
///
/// ```
/// use std::time::Duration;
/// use redefer::{Backoff, strategy::Retry};
///
/// let retry = Retry::new(Backoff::exponential(Duration::from_millis(20), Duration::from_millis(200)))
///     .max_attempts(5)
///     .max_wait(Duration::from_secs(1));
/// ```
#[derive(Debug, Clone)]
pub struct Retry<F = FailFast> {
    limits: RetryLimits,
    fallback: F,
}

/// The bounds of a [`Retry`], as configuration.
///
/// ```
/// use redefer::strategy::RetryLimits;
///
/// let limits: RetryLimits = serde_json::from_str(
///     r#"{ "backoff": { "initial": "20ms", "cap": "1s" }, "max_attempts": 8, "max_wait": "2s" }"#,
/// )?;
/// assert_eq!(limits.max_attempts, 8);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryLimits {
    /// How long each wait is.
    pub backoff: Backoff,
    /// How many times to wait and try again before falling through.
    pub max_attempts: u32,
    /// How long to wait in all before falling through; a wait that would pass it falls through.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
}

impl Default for RetryLimits {
    /// The default backoff, at most 5 retries, at most 5 s in all.
    fn default() -> Self {
        RetryLimits {
            backoff: Backoff::default(),
            max_attempts: 5,
            max_wait: Duration::from_secs(5),
        }
    }
}

impl Retry<FailFast> {
    /// Retries with `backoff`, up to the default 5 attempts and 5 s, then fails fast.
    pub fn new(backoff: Backoff) -> Self {
        Retry::from_limits(RetryLimits {
            backoff,
            ..RetryLimits::default()
        })
    }

    /// Retries within `limits`, then fails fast.
    pub fn from_limits(limits: RetryLimits) -> Self {
        Retry {
            limits,
            fallback: FailFast,
        }
    }
}

impl<F> Retry<F> {
    /// At most this many retries before falling through.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.limits.max_attempts = max_attempts;
        self
    }

    /// At most this much waiting in all before falling through.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.limits.max_wait = max_wait;
        self
    }

    /// What happens once the retries are spent: for example a deferral instead of an error.
    pub fn then<G>(self, fallback: G) -> Retry<G> {
        Retry {
            limits: self.limits,
            fallback,
        }
    }

    /// The wait before the next attempt, or `None` when the bounds are spent: exactly until a
    /// throttle's next slot (which the throttle books for the caller), else the backoff's.
    fn next_wait(&self, conflict: &Conflict) -> Option<Duration> {
        if conflict.attempt >= self.limits.max_attempts {
            return None;
        }
        let delay = match conflict.next_slot() {
            Some(slot) => slot.opens_in(),
            None => self.limits.backoff.delay(conflict.attempt, &mut rand::rng()),
        };
        (conflict.waited + delay <= self.limits.max_wait).then_some(delay)
    }
}

impl<Req, F> ConflictStrategy<Req> for Retry<F>
where
    F: ConflictStrategy<Req>,
{
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        match self.next_wait(&conflict) {
            Some(delay) => Either::Left(ready(Ok(Decision::RetryAfter(delay)))),
            None => Either::Right(self.fallback.on_conflict(conflict, request)),
        }
    }

    fn supersedes(&self) -> bool {
        self.fallback.supersedes()
    }
}
