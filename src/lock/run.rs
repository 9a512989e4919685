//! Running a request under keys it holds, for the lock and the set of keys: the handler sees
//! its holdings ([`current_lock`](super::current_lock)) and runs only while their lease is
//! surely valid; the renewal keeps it so.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tower::Service;

use super::{HeldLock, run_holdings};
use crate::guard::{CallResult, Nesting, OverHandler};
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
