//! The throttled call: decide the request against its key's rate (asking the strategy when
//! over it), wait for a booked slot, run the inner service.

use std::sync::Arc;

use tokio::time::{Instant, sleep};
use tower::Service;
use tracing::Instrument;

use super::{Admission, ThrottleLayer, ThrottleStore};
use crate::guard::current_job;
use crate::guard::{Error, Nesting, Outcome};
use crate::key::LockKey;
use crate::lock::{LockToken, Waiter};
use crate::metric_names;
use crate::strategy::{Conflict, ConflictKind, ConflictStrategy, Decision, ThrottledConflict};

/// The whole throttled call. The request is owned here and only lent to the strategy for the
/// synchronous part of its decision, so requests need not be `Sync`.
pub(super) async fn call_throttled<S, St, X, Strat, N, Req>(
    shared: Arc<ThrottleLayer<St, X, Strat, N>>,
    key: LockKey,
    inner: S,
    request: Req,
) -> Result<Outcome<N::Response>, Error<N::Error>>
where
    S: Service<Req>,
    St: ThrottleStore,
    Strat: ConflictStrategy<Req>,
    N: Nesting<S, Req>,
{
    let span = tracing::debug_span!("redefer.throttle", %key);
    async move {
        // A re-injected job may hold a booked slot: the throttle admits it there.
        let mut booked_as = current_job().map(|job| Waiter::job(&job.shard, &job.id));
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let opens_in = match shared.store.admit(&key, shared.rate, booked_as.as_ref()).await {
                Ok(Admission::Admitted) => break,
                Ok(Admission::Redeemed { wait }) => {
                    // Its slot not yet come (due in whole milliseconds), or runs before it late.
                    if !wait.is_zero() {
                        sleep(wait).await;
                    }
                    break;
                }
                Ok(Admission::Throttled { opens_in }) => opens_in,
                Err(error) => return Err(Error::Store(error)),
            };
            let next_slot = super::book::next_slot(opens_in, shared.store.clone(), key.clone(), shared.rate);
            let conflict = Conflict::new(
                key.clone(),
                attempt,
                started.elapsed(),
                Some(opens_in),
                ConflictKind::Throttled(ThrottledConflict {
                    next_slot: next_slot.clone(),
                }),
            );
            let decision = shared
                .strategy
                .on_conflict(conflict, &request)
                .await
                .map_err(Error::Strategy)?;
            attempt += 1;
            match decision {
                // Waiting as long as the slot takes: book it, so that nobody takes it meanwhile,
                // and come back as its holder when it opens.
                Decision::RetryAfter(delay) if delay >= opens_in => {
                    metric_names::throttle_conflict("retry");
                    let me = Waiter::caller(LockToken::random());
                    let booking = next_slot.book_for(me.clone()).await.map_err(Error::Store)?;
                    tracing::debug!(wait = ?booking.wait, "over the rate: waiting for the booked slot");
                    booked_as = Some(me);
                    sleep(booking.wait).await;
                }
                Decision::RetryAfter(delay) => {
                    metric_names::throttle_conflict("retry");
                    sleep(delay).await;
                }
                Decision::Reject { retry_after } => {
                    metric_names::throttle_conflict("reject");
                    return Err(Error::Throttled {
                        key,
                        retry_after: retry_after.unwrap_or(opens_in),
                    });
                }
                Decision::Superseded { by } => {
                    metric_names::throttle_conflict("superseded");
                    return Err(Error::Superseded { key, by });
                }
                Decision::LineFull { waiting, retry_after } => {
                    metric_names::throttle_conflict("line_full");
                    return Err(Error::LineFull {
                        key,
                        waiting,
                        retry_after: retry_after.or(Some(opens_in)),
                    });
                }
                Decision::Deferred(deferred) => {
                    metric_names::throttle_conflict("defer");
                    tracing::debug!(job_id = %deferred.job_id, "over the rate: deferred to a booked slot");
                    return Ok(Outcome::Deferred(deferred));
                }
            }
        }
        N::call(inner, request).await
    }
    .instrument(span)
    .await
}
