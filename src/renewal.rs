//! Keeps a lease alive (a lock, a claimed job) while its holder works for longer than a
//! fraction of its TTL.

use std::future::Future;
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

/// Calls `extend` every third of `ttl`, and returns only when the lease can no longer be counted
/// on. The caller races it against the work and stops the work when it returns.
///
/// `granted_at` is when the request that took the lease was sent: the TTL runs from no earlier
/// than that. A failed extension is retried until the TTL would have run out, then the lease
/// counts as lost: the work must not go on past a lease that may have expired.
pub(crate) async fn renew_until_lost<F, Fut, E>(
    what: &str,
    ttl: Duration,
    granted_at: Instant,
    mut extend: F,
) -> LossReason
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    let period = ttl / 3;
    let retry_gap = (ttl / 10).max(Duration::from_millis(1));
    let mut valid_until = granted_at + ttl;
    let mut next = granted_at + period;
    loop {
        sleep_until(next).await;
        let sent = Instant::now();
        match timeout_at(valid_until, extend()).await {
            Ok(Ok(true)) => {
                tracing::trace!(what, "renewed");
                valid_until = sent + ttl;
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
