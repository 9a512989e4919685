//! How a queue's jobs back off between attempts, and when they give up.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;

/// How long a job waits before each attempt, how many attempts it gets before it goes to the
/// dead-letter set, and how long it may wait for its lock. Shared by the
/// [`Defer`](crate::strategy::Defer) strategy and the [`Scheduler`](crate::Scheduler) (attempt
/// `n` fails, the next waits `backoff.delay(n + 1)`), so the two cannot disagree.
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
    /// How long a job may wait for its lock, from when it was first stored, before it is
    /// buried with "waited D for lock K". Waiting is not failing: it uses no attempt.
    #[serde(with = "humantime_serde")]
    pub max_lock_wait: Duration,
    /// How many times a job may come back to find its key held (or its slot not open) and go
    /// back to wait, before it is buried with "met lock K held N times" (0: no limit, only
    /// `max_lock_wait`). A bound on re-deferrals that holds however fast a livelock loops; a
    /// job waiting in a long line meets its key about once per fallback (1 s to 10 s).
    pub max_lock_waits: u32,
}

impl Default for RetryPolicy {
    /// 250 ms doubling up to 1 min with a quarter jitter; 10 attempts (about 3 minutes in all);
    /// buried after 5 lease expiries, or after waiting 6 hours for its lock (however many times
    /// it met it).
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
            max_lock_wait: Duration::from_secs(6 * 60 * 60),
            max_lock_waits: 0,
        }
    }
}

/// The shortest and longest fallback of a job waiting in a key's line. The longest bounds the
/// wait of a job that could not join the line (the store failed between storing it and
/// putting it in line): nothing but its fallback wakes it.
const FALLBACK_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(10));

/// How long after a lock's TTL ran out a waiting job looks again.
const FREED_MARGIN: Duration = Duration::from_millis(50);

impl RetryPolicy {
    /// When a job waiting in a key's line runs anyway, should its turn not be announced (a
    /// releaser that crashed before waking it, a holder that died with the lock): twice the
    /// expected wait, within 1 s and 10 s; no later than just after the lock's `remaining`
    /// TTL, however short (given for the first in line: a dead holder's lock frees then, with
    /// nobody to hand it over, and is the first in line's); and no later than the job's
    /// `max_lock_wait` (it has `waited` so far). Its turn normally comes sooner: the release
    /// makes it due at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::queue::RetryPolicy;
    ///
    /// let policy = RetryPolicy::default();
    /// let ms = Duration::from_millis;
    /// // Far back in a line that moves slowly: 10 s at most.
    /// assert_eq!(policy.lock_wait_fallback(Some(ms(60_000)), None, Duration::ZERO), ms(10_000));
    /// // A short expected wait: 1 s at least.
    /// assert_eq!(policy.lock_wait_fallback(Some(ms(20)), None, Duration::ZERO), ms(1_000));
    /// // First in line behind a holding that runs out in 120 ms: just after it.
    /// assert_eq!(policy.lock_wait_fallback(Some(ms(20)), Some(ms(120)), Duration::ZERO), ms(170));
    /// ```
    pub fn lock_wait_fallback(
        &self,
        expected_wait: Option<Duration>,
        remaining: Option<Duration>,
        waited: Duration,
    ) -> Duration {
        let (shortest, longest) = FALLBACK_BOUNDS;
        let twice_expected = expected_wait.map_or(longest, |wait| wait.saturating_mul(2));
        twice_expected
            .clamp(shortest, longest)
            .min(remaining.map_or(longest, |remaining| remaining + FREED_MARGIN))
            .min(self.max_lock_wait.saturating_sub(waited))
    }

    /// How long a job that met its lock held waits for its turn in place, looking again every
    /// `fallback` (see [`lock_wait_fallback`](Self::lock_wait_fallback)), before it goes back
    /// to wait from the queue: the longest fallback (10 s, within `max_lock_wait`); one
    /// `fallback` where `max_lock_waits` counts the job's lock waits, each of which stands for
    /// one fallback, so that the count keeps its meaning.
    pub(crate) fn lock_wait_in_place(&self, fallback: Duration) -> Duration {
        if self.max_lock_waits == 0 {
            FALLBACK_BOUNDS.1.min(self.max_lock_wait)
        } else {
            fallback
        }
    }

    /// Whether a job that went back to wait `lock_waits` times may go once more.
    pub fn allows_another_lock_wait(&self, lock_waits: u32) -> bool {
        self.max_lock_waits == 0 || lock_waits < self.max_lock_waits
    }

    /// Whether a job whose attempt `attempt` (counting from 0) failed gets another.
    pub fn allows_another(&self, attempt: u32) -> bool {
        attempt.saturating_add(1) < self.max_attempts
    }
}
