//! Running a request under keys it holds, for the lock and the set of keys: the handler sees
//! its holdings ([`current_lock`](super::current_lock)) and runs only while their lease is
//! surely valid; the renewal keeps it so.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tower::Service;

use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

use super::holds::LayerHolds;
use super::{HeldLock, run_holdings};
use crate::guard::{CallResult, Nesting, OverHandler};
use crate::metric_names;
use crate::renewal::{Lease, LossReason, Renewal, while_valid};

/// How a request that ran under held keys ended: its result, or its handler's panic, to be
/// resumed once the keys are given back.
pub(crate) type Finished<S, Req> = Result<CallResult<S, Req, OverHandler>, Box<dyn Any + Send>>;

/// Runs `request` by `inner` under `holdings` (built with the renewal's lease) while
/// `renewal` keeps them: `Err` with why, when the lease may have run out before the handler
/// returned (its future is then dropped: it stops there).
pub(crate) async fn run_renewed<S, Req>(
    renewal: Renewal,
    holdings: impl FnOnce(&Arc<Lease>) -> Vec<HeldLock>,
    inner: S,
    request: Req,
) -> Result<Finished<S, Req>, LossReason>
where
    S: Service<Req> + Send + 'static,
    S::Future: Send,
    Req: Send + 'static,
    OverHandler: Nesting<S, Req>,
{
    let lease = renewal.lease();
    let handler = while_valid(
        &lease,
        run_holdings(
            holdings(&lease),
            AssertUnwindSafe(<OverHandler as Nesting<S, Req>>::call(inner, request)).catch_unwind(),
        ),
    );
    let ended = tokio::select! {
        // The renewal first, and the handler polled only while the keys are surely ours: a
        // process resumed after a pause longer than the TTL stops its handler before it takes
        // another step.
        biased;
        lost = renewal => Err(lost),
        finished = handler => finished,
    };
    // A handler that blocked its thread returns in the poll that blocked: if the renewal gave
    // up meanwhile, its work overlapped keys that were no longer ours.
    match ended {
        Ok(Ok(result)) => lease.lost().map_or(Ok(Ok(result)), Err),
        other => other,
    }
}

/// One release in this many tells the store how long its key was held.
const HOLD_SAMPLING: u32 = 8;

/// The handler of keys acquired at `acquired_at` returned: its hold is measured (metrics,
/// the layer's `holds`), and one release in `HOLD_SAMPLING` reports it to the store (the
/// key's last hold, for the `retry_after` of callers that meet it, at a fraction of the cost
/// of a write per release): the hold to report, if this one does.
pub(crate) fn hold_ended(holds: &LayerHolds, acquired_at: Instant) -> Option<Duration> {
    crate::guard::handler_returned();
    let held = acquired_at.elapsed();
    ::metrics::histogram!(metric_names::LOCK_HOLD).record(held.as_secs_f64());
    holds.record(held);
    rand::rng().random_ratio(1, HOLD_SAMPLING).then_some(held)
}
