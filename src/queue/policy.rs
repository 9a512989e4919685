//! How a queue's jobs back off between attempts, and when they give up.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;

/// How long a job waits before each attempt, and how many attempts it gets before it goes to
/// the dead-letter set. Shared by the [`Defer`](crate::strategy::Defer) strategy (the first
/// deferral waits `backoff.delay(0)`) and the [`Scheduler`](crate::Scheduler) (attempt `n`
/// fails, the next waits `backoff.delay(n + 1)`), so the two cannot disagree.
///
/// ```
/// use redefer::queue::RetryPolicy;
///
/// let policy: RetryPolicy = serde_json::from_str(
///     r#"{ "backoff": { "initial": "500ms", "cap": "5m" }, "max_attempts": 8 }"#,
/// )?;
/// assert_eq!(policy.max_attempts, 8);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// The wait before each attempt.
    pub backoff: Backoff,
    /// Attempts in all, the first included; a job whose last attempt fails is buried.
    pub max_attempts: u32,
    /// Lease expiries after which a job is buried (0: never). A lease runs out when the
    /// handler's process dies or hangs; a job that does that every time would otherwise come
    /// back forever without ever failing an attempt.
    pub max_lease_expiries: u32,
}

impl Default for RetryPolicy {
    /// 250 ms doubling up to 1 min with a quarter jitter; 10 attempts (about 3 minutes in all);
    /// buried after 5 lease expiries.
    fn default() -> Self {
        RetryPolicy {
            backoff: Backoff {
                initial: Duration::from_millis(250),
                factor: 2.0,
                cap: Duration::from_secs(60),
                jitter: 0.25,
            },
            max_attempts: 10,
            max_lease_expiries: 5,
        }
    }
}

impl RetryPolicy {
    /// Whether a job whose attempt `attempt` (counting from 0) failed gets another.
    pub fn allows_another(&self, attempt: u32) -> bool {
        attempt.saturating_add(1) < self.max_attempts
    }
}
