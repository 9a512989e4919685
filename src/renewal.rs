//! Keeps a lease alive (a lock, a claimed job) while its holder works for longer than a
//! fraction of its TTL.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::time::{Instant, sleep_until, timeout_at};

/// Why a lease stopped being ours while its holder worked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The store says another holder has it, or nobody does (expired, deleted).
    Gone,
    /// The store could not confirm an extension before the TTL ran out.
    Unconfirmed,
}

/// Until when a lease is surely still ours, by this process's clock: from the send time of
/// the last request the store confirmed, plus the TTL. Shared by the renewal, which moves it,
/// and [`while_valid`], which reads it.
#[derive(Debug, Clone)]
pub(crate) struct ValidUntil {
    base: Instant,
    /// Nanoseconds after `base`.
    after_base: Arc<AtomicU64>,
}

impl ValidUntil {
    fn new(at: Instant) -> Self {
        ValidUntil {
            base: at,
            after_base: Arc::new(AtomicU64::new(0)),
        }
    }

    fn set(&self, at: Instant) {
        let nanos = u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.after_base.store(nanos, Ordering::Release);
    }

    fn get(&self) -> Instant {
        self.base + Duration::from_nanos(self.after_base.load(Ordering::Acquire))
    }
}

/// Runs `work` while the lease of `valid` lasts: before each poll, the clock is read, and once
/// the lease may have run out the work is not polled again. A timer alone is not enough: a
/// process resumed after a pause (SIGSTOP, a stalled VM) may poll the work before its timers
/// fire, and must not take another step on a lease that is gone.
pub(crate) async fn while_valid<F: Future>(valid: ValidUntil, work: F) -> Result<F::Output, LossReason> {
    let mut work = pin!(work);
    std::future::poll_fn(|cx| {
        if Instant::now() >= valid.get() {
            return Poll::Ready(Err(LossReason::Unconfirmed));
        }
        work.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// The renewal of one lease: [`renew_until_lost`] keeps it, [`while_valid`] stops the work
/// once it may be gone.
pub(crate) fn lease_granted(granted_at: Instant, ttl: Duration) -> ValidUntil {
    let valid = ValidUntil::new(granted_at);
    valid.set(granted_at + ttl);
    valid
}

/// Calls `extend` every third of `ttl`, and returns only when the lease can no longer be counted
/// on. The caller races it against the work (run under [`while_valid`]) and stops the work when
/// it returns.
///
/// `valid` starts at the send time of the request that took the lease plus the TTL (see
/// [`lease_granted`]). A failed extension is retried until the TTL would have run out, then the
/// lease counts as lost: the work must not go on past a lease that may have expired.
pub(crate) async fn renew_until_lost<F, Fut, E>(
    what: &str,
    ttl: Duration,
    valid: ValidUntil,
    mut extend: F,
) -> LossReason
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    let period = ttl / 3;
    let retry_gap = (ttl / 10).max(Duration::from_millis(1));
    let mut valid_until = valid.get();
    let mut next = valid_until - ttl + period;
    loop {
        sleep_until(next).await;
        let sent = Instant::now();
        match timeout_at(valid_until, extend()).await {
            Ok(Ok(true)) => {
                tracing::trace!(what, "renewed");
                valid_until = sent + ttl;
                valid.set(valid_until);
                next = sent + period;
            }
            Ok(Ok(false)) => {
                tracing::warn!(what, "lost: another holder has it or it was deleted");
                return LossReason::Gone;
            }
            Ok(Err(error)) => {
                tracing::warn!(what, %error, "renewal failed; retrying until the TTL runs out");
                next = (Instant::now() + retry_gap).min(valid_until);
            }
            Err(_deadline) => {
                tracing::warn!(what, "lost: no renewal confirmed before the TTL ran out");
                return LossReason::Unconfirmed;
            }
        }
    }
}
