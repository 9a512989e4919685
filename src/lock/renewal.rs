//! Keeps a lock alive while its handler runs longer than a fraction of the TTL.

use std::time::Duration;

use tokio::time::{Instant, sleep_until, timeout_at};

use crate::key::LockKey;
use crate::lock::LockToken;
use crate::store::LockStore;

/// Why a lock stopped being ours while its handler ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockLost {
    /// The store says another holder has the key, or nobody does (expired, deleted).
    Gone,
    /// The store could not confirm an extension before the lock's TTL ran out.
    Unconfirmed,
}

/// Extends the lock every third of its TTL, and returns only when the lock can no longer be
/// counted on. The caller races it against the handler and stops the handler when it returns.
///
/// `acquired_at` is when the acquire request was sent: the TTL runs from no earlier than that.
/// A failed extension is retried until the TTL would have run out, then the lock counts as lost:
/// the handler must not run on past a lock that may have expired.
pub(crate) async fn renew_until_lost<St: LockStore>(
    store: &St,
    key: &LockKey,
    token: LockToken,
    ttl: Duration,
    acquired_at: Instant,
) -> LockLost {
    let period = ttl / 3;
    let retry_gap = (ttl / 10).max(Duration::from_millis(1));
    let mut valid_until = acquired_at + ttl;
    let mut next = acquired_at + period;
    loop {
        sleep_until(next).await;
        let sent = Instant::now();
        match timeout_at(valid_until, store.extend(key, token, ttl)).await {
            Ok(Ok(true)) => {
                tracing::trace!(%key, "lock renewed");
                valid_until = sent + ttl;
                next = sent + period;
            }
            Ok(Ok(false)) => {
                tracing::warn!(%key, "lock lost: another holder has it or it was deleted");
                return LockLost::Gone;
            }
            Ok(Err(error)) => {
                tracing::warn!(%key, %error, "lock renewal failed; retrying until the TTL runs out");
                next = (Instant::now() + retry_gap).min(valid_until);
            }
            Err(_deadline) => {
                tracing::warn!(%key, "lock lost: no renewal confirmed before the TTL ran out");
                return LockLost::Unconfirmed;
            }
        }
    }
}
