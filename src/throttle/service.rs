//! The service that admits requests at their key's rate: what the throttle's guard does with a
//! request.

use std::sync::Arc;

use tower::Service;

use super::{ThrottleLayer, ThrottleStore};
use crate::error::KeyError;
use crate::guard::{Error, Guard, GuardService, KeyExtractor, Nesting, Outcome, call_contended, guarded_key};
use crate::key::LockKey;
use crate::sealed::SealedGuard;
use crate::strategy::ConflictStrategy;

/// Admits each request at its key's rate; built by [`ThrottleLayer`].
///
/// A request within the rate costs one store round trip. Requests whose extractor returns
/// `None` pass through unthrottled.
pub type ThrottleService<S, St, X, Strat, N> = GuardService<S, ThrottleLayer<St, X, Strat, N>>;

impl<St, X, Strat, N> SealedGuard for ThrottleLayer<St, X, Strat, N> {}

impl<S, St, X, Strat, N, Req> Guard<S, Req> for ThrottleLayer<St, X, Strat, N>
where
    S: Service<Req> + Send + 'static,
    Req: Send + 'static,
    St: ThrottleStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Strat: ConflictStrategy<Req>,
    N: Nesting<S, Req>,
    N::Response: Send + 'static,
    N::Error: Send + 'static,
{
    type Over = N;
    type Key = LockKey;

    fn key(&self, request: &Req) -> Result<Option<LockKey>, KeyError> {
        guarded_key(&self.extractor, request)
    }

    fn call(
        self: Arc<Self>,
        key: LockKey,
        inner: S,
        request: Req,
    ) -> impl Future<Output = Result<Outcome<N::Response>, Error<N::Error>>> + Send + 'static {
        call_contended(self, key, inner, request)
    }
}
