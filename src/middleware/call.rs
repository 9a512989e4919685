//! The locked call, the algorithm of the middleware: acquire (asking the strategy on
//! conflict), run the handler with the lock renewed, release.

use std::panic::{AssertUnwindSafe, resume_unwind};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::{Instant, sleep};
use tower::Service;
use tracing::Instrument;

use super::{Error, Outcome};
use crate::key::LockKey;
use crate::lock::{Acquisition, HeldLock, LockStore, LockToken, ReleaseOnDrop, run_holding};
use crate::metric_names;
use crate::renewal::{lease_granted, renew_until_lost, while_valid};
use crate::strategy::{Conflict, ConflictStrategy, Decision};

/// What every clone of one [`LockService`](super::LockService) shares.
#[derive(Debug)]
pub(super) struct Shared<St, X, Strat> {
    pub(super) store: St,
    pub(super) extractor: X,
    pub(super) strategy: Strat,
    pub(super) ttl: Duration,
}

/// The whole locked call. The lock is released on success, inner error and panic before the
/// caller sees the result; on cancellation by [`ReleaseOnDrop`].
pub(super) async fn call_locked<S, St, X, Strat, Req>(
    shared: Arc<Shared<St, X, Strat>>,
    key: LockKey,
    mut inner: S,
    request: Req,
) -> Result<Outcome<S::Response>, Error<S::Error>>
where
    S: Service<Req>,
    St: LockStore,
    Strat: ConflictStrategy<Req>,
{
    let span = tracing::debug_span!("redefer.lock", %key, fence = tracing::field::Empty);
    async move {
        let token = LockToken::random();
        let mut guard = ReleaseOnDrop::new(shared.store.clone(), key.clone(), token);
        let mut attempt = 0;
        let mut waited = Duration::ZERO;
        let (fence, acquired_at) = loop {
            let sent = Instant::now();
            guard.arm();
            let acquisition = shared.store.try_acquire(&key, token, shared.ttl).await;
            let remaining = match acquisition {
                Ok(Acquisition::Acquired(fence)) => break (fence, sent),
                Ok(Acquisition::Held { remaining }) => remaining,
                Err(error) => {
                    // Not knowing whether the acquire took effect, the guard stays armed and
                    // releases by token on its way out.
                    return Err(Error::Store(error));
                }
            };
            guard.disarm();
            let conflict = Conflict {
                key: key.clone(),
                attempt,
                waited,
                remaining,
            };
            let decision = shared.strategy.on_conflict(conflict, &request).await;
            match decision.map_err(Error::Strategy)? {
                Decision::RetryAfter(delay) => {
                    tracing::debug!(attempt, ?remaining, ?delay, "lock held: retrying");
                    metric_names::conflict("retry");
                    sleep(delay).await;
                    waited += delay;
                    attempt += 1;
                }
                Decision::Reject { retry_after } => {
                    tracing::debug!(attempt, ?retry_after, "lock held: rejected");
                    metric_names::conflict("reject");
                    return Err(Error::Locked { key, retry_after });
                }
                Decision::Deferred(deferred) => {
                    tracing::debug!(attempt, job_id = %deferred.job_id, "lock held: deferred");
                    metric_names::conflict("defer");
                    return Ok(Outcome::Deferred(deferred));
                }
            }
        };
        tracing::Span::current().record("fence", fence.0);
        tracing::debug!(attempt, "lock acquired");
        ::metrics::counter!(metric_names::LOCK_ACQUIRED).increment(1);

        let held = HeldLock {
            key: key.clone(),
            fence,
        };
        let valid = lease_granted(acquired_at, shared.ttl);
        let handler = while_valid(
            valid.clone(),
            run_holding(
                held,
                AssertUnwindSafe(async move { inner.call(request).await }).catch_unwind(),
            ),
        );
        let renewal = renew_until_lost("lock", shared.ttl, valid, || {
            shared.store.extend(&key, token, shared.ttl)
        });
        let ended = tokio::select! {
            // Renewal first, and the handler polled only while the lock is surely ours: a
            // process resumed after a pause longer than the TTL stops its handler before it
            // takes another step.
            biased;
            lost = renewal => Err(lost),
            finished = handler => finished,
        };
        let finished = match ended {
            Ok(finished) => finished,
            Err(lost) => {
                ::metrics::counter!(metric_names::LOCK_LOST).increment(1);
                // The handler's future is dropped: it stops here. The guard, still armed,
                // releases by token in the background, in case the store comes back while the
                // lock still holds our token; the caller does not wait for that.
                return Err(Error::LockLost { key, reason: lost });
            }
        };
        crate::scheduler::handler_returned();
        ::metrics::histogram!(metric_names::LOCK_HOLD).record(acquired_at.elapsed().as_secs_f64());
        match guard.release().await {
            Ok(true) => tracing::debug!("lock released"),
            Ok(false) => tracing::warn!("lock had expired before its release"),
            Err(error) => tracing::warn!(%error, "lock release failed; it expires with its TTL"),
        }
        match finished {
            Ok(Ok(response)) => Ok(Outcome::Done(response)),
            Ok(Err(error)) => Err(Error::Inner(error)),
            Err(panic) => resume_unwind(panic),
        }
    }
    .instrument(span)
    .await
}
