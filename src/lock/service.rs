//! The service that runs requests under their locks: what the lock's guard does with a request.

use std::sync::Arc;

use tower::Service;

use super::LockLayer;
use crate::error::KeyError;
use crate::guard::{
    Contended, Guard, GuardService, GuardedResult, KeyExtractor, Nesting, OverHandler, call_contended,
    guarded_key,
};
use crate::key::LockKey;
use crate::sealed::SealedGuard;

/// Runs each request under the lock of its key; built by [`LockLayer`].
///
/// An uncontended request costs two store round trips: acquire, then release. Requests whose
/// extractor returns `None` pass through unlocked.
///
/// The inner service made ready by `poll_ready` is the one that handles the request (a clone
/// takes its place), as tower requires of services that move their inner service into the
/// response future.
pub type LockService<S, St, X, Strat> = GuardService<S, LockLayer<St, X, Strat>>;

impl<St, X, Strat> SealedGuard for LockLayer<St, X, Strat> {}

/// The lock is its service's guard by the call path every guard shares (its part: `call.rs`).
impl<S, St, X, Strat, Req> Guard<S, Req> for LockLayer<St, X, Strat>
where
    Self: Contended<S, Req, Over = OverHandler, Key = LockKey>,
    OverHandler: Nesting<S, Req>,
    S: Service<Req> + Send + 'static,
    Req: Send + 'static,
    X: KeyExtractor<Req>,
{
    type Over = OverHandler;
    type Key = LockKey;

    fn key(&self, request: &Req) -> Result<Option<LockKey>, KeyError> {
        guarded_key(&self.extractor, request)
    }

    fn call(
        self: Arc<Self>,
        key: LockKey,
        inner: S,
        request: Req,
    ) -> impl Future<Output = GuardedResult<S, Req, Self>> + Send + 'static {
        call_contended(self, key, inner, request)
    }
}
