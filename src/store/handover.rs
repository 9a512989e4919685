//! What both stores do after handing a key to a waiter: make a job waiter's job due at once,
//! and when that job is gone (cancelled, buried, done), pass the key on to the next in line.

use std::time::Duration;

use crate::error::StoreError;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::metric_names;
use crate::queue::model::Promotion;
use crate::queue::{JobId, QueueName};

/// How many waiters one handoff looks at (skipping those whose job is gone) before it leaves
/// the rest to the reservations' expiry: bounds the work of one release.
const MAX_SKIPPED: usize = 16;

/// The store operations a handoff needs beyond the lock's own.
pub(crate) trait HandOver {
    /// Makes the waiting job `id` of `queue` due `after` from now, if that is sooner.
    fn promote(
        &self,
        queue: &QueueName,
        id: &JobId,
        after: Duration,
    ) -> impl Future<Output = Result<Promotion, StoreError>> + Send;

    /// Takes `waiter` out of `key`'s line; the waiters the key was handed to instead (one at
    /// most for a lock; a semaphore may have several permits free).
    fn pass_on(
        &self,
        key: &LockKey,
        waiter: &Waiter,
    ) -> impl Future<Output = Result<Vec<Waiter>, StoreError>> + Send;
}

/// After `key` was reserved for each of `reserved`: wakes them (a caller heard the
/// announcement; a job is made due), skipping waiters whose job is gone. A failure here costs
/// latency only: the job's fallback due time, or the reservation's expiry, moves the line on.
pub(crate) async fn hand_over<S: HandOver>(
    store: &S,
    key: &LockKey,
    reserved: impl IntoIterator<Item = Waiter>,
) {
    for waiter in reserved {
        wake(store, key, waiter).await;
    }
}

/// [`hand_over`], then makes the job of `runner_up` (the next in line) due when the
/// reservation runs out, `reservation` from now: should the first never come (its scheduler
/// died), the runner-up takes the key then, not at its fallback time.
pub(crate) async fn hand_over_with_runner_up<S: HandOver>(
    store: &S,
    key: &LockKey,
    reserved: Option<Waiter>,
    runner_up: Option<Waiter>,
    reservation: Duration,
) {
    let Some(reserved) = reserved else { return };
    let woken = wake(store, key, reserved).await;
    if woken
        && let Some((id, queue)) = runner_up.as_ref().and_then(Waiter::as_job)
        && let Err(error) = store.promote(&queue, &id, reservation + RUNNER_UP_MARGIN).await
    {
        tracing::debug!(%key, %error, "cannot schedule the runner-up; it runs at its fallback time");
    }
}

/// After a reservation runs out, how long the runner-up gives its holder still: room for the
/// clocks of the store and of the runner-up's scheduler to disagree.
const RUNNER_UP_MARGIN: Duration = Duration::from_millis(20);

/// Wakes `reserved`, the waiter the key (or a permit of it) is reserved for; when its job is
/// gone, the waiters the key is passed on to instead. Whether a waiter was woken.
async fn wake<S: HandOver>(store: &S, key: &LockKey, reserved: Waiter) -> bool {
    let mut reserved = vec![reserved];
    let mut woken = false;
    for _ in 0..MAX_SKIPPED {
        let Some(waiter) = reserved.pop() else {
            return woken;
        };
        tracing::debug!(%key, %waiter, "lock handed over");
        metric_names::handoff();
        let Some((id, queue)) = waiter.as_job() else {
            woken = true;
            continue;
        };
        match store.promote(&queue, &id, Duration::ZERO).await {
            Ok(Promotion::Promoted | Promotion::Running) => woken = true,
            Ok(Promotion::Gone) => {
                tracing::debug!(%key, %waiter, "the waiting job is gone; the key goes to the next in line");
                match store.pass_on(key, &waiter).await {
                    Ok(next) => reserved.extend(next),
                    Err(error) => {
                        tracing::warn!(%key, %error, "cannot pass the key on; its reservation expires");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%key, %waiter, %error, "cannot wake the waiting job; it runs at its fallback time");
            }
        }
    }
    woken
}

/// Logs a waiter dropped from a line because its reservation ran out unused.
pub(crate) fn reservation_expired(key: &LockKey, dropped: Option<&Waiter>) {
    if let Some(waiter) = dropped {
        tracing::warn!(%key, %waiter, "a reservation ran out unused; its waiter left the line");
        metric_names::reservation_expired();
    }
}
