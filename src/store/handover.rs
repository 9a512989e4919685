//! What both stores do after handing a key to a waiter: make a job waiter's job due at once,
//! and when that job is gone (cancelled, buried, done), pass the key on to the next in line.

use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::Waiter;
use crate::metric_names;
use crate::queue::{JobId, QueueName};

/// How many gone waiters one handoff skips before it leaves the rest to the reservation's
/// expiry: bounds the work of one release.
const MAX_SKIPPED: usize = 16;

/// Where a promoted job was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Promotion {
    /// Waiting: it is due now.
    Promoted,
    /// In flight: its run is under way and will take the reservation.
    Running,
    /// Not waiting nor running: nobody will take the reservation.
    Gone,
}

/// The store operations a handoff needs beyond the lock's own.
pub(crate) trait HandOver {
    /// Makes the waiting job `id` of `queue` due now.
    fn promote(
        &self,
        queue: &QueueName,
        id: &JobId,
    ) -> impl Future<Output = Result<Promotion, StoreError>> + Send;

    /// Takes `waiter` out of `key`'s line; the waiter the key was handed to instead, if any.
    fn pass_on(
        &self,
        key: &LockKey,
        waiter: &Waiter,
    ) -> impl Future<Output = Result<Option<Waiter>, StoreError>> + Send;
}

/// After `key` was reserved for `reserved`: wakes it (a caller heard the announcement; a job
/// is made due), skipping waiters whose job is gone. A failure here costs latency only: the
/// job's fallback due time, or the reservation's expiry, moves the line on.
pub(crate) async fn hand_over<S: HandOver>(store: &S, key: &LockKey, mut reserved: Option<Waiter>) {
    for _ in 0..MAX_SKIPPED {
        let Some(waiter) = reserved.take() else { return };
        tracing::debug!(%key, %waiter, "lock handed over");
        metric_names::handoff();
        let Some((id, queue)) = waiter.as_job() else {
            return;
        };
        match store.promote(&queue, &id).await {
            Ok(Promotion::Promoted | Promotion::Running) => return,
            Ok(Promotion::Gone) => {
                tracing::debug!(%key, %waiter, "the waiting job is gone; the key goes to the next in line");
                match store.pass_on(key, &waiter).await {
                    Ok(next) => reserved = next,
                    Err(error) => {
                        tracing::warn!(%key, %error, "cannot pass the key on; its reservation expires");
                        return;
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%key, %waiter, %error, "cannot wake the waiting job; it runs at its fallback time");
                return;
            }
        }
    }
}

/// Logs a waiter dropped from a line because its reservation ran out unused.
pub(crate) fn reservation_expired(key: &LockKey, dropped: Option<&Waiter>) {
    if let Some(waiter) = dropped {
        tracing::warn!(%key, %waiter, "a reservation ran out unused; its waiter left the line");
        metric_names::reservation_expired();
    }
}
