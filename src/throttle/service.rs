//! The service that admits requests at their key's rate: what the throttle's guard does with a
//! request.

use std::sync::Arc;

use tower::Service;

use super::ThrottleLayer;
use crate::error::KeyError;
use crate::guard::{
    Contended, Guard, GuardService, GuardedResult, KeyExtractor, Nesting, call_contended, guarded_key,
};
use crate::key::LockKey;
use crate::sealed::SealedGuard;

/// Admits each request at its key's rate; built by [`ThrottleLayer`].
///
/// A request within the rate costs one store round trip. Requests whose extractor returns
/// `None` pass through unthrottled.
pub type ThrottleService<S, St, X, Strat, N> = GuardService<S, ThrottleLayer<St, X, Strat, N>>;

impl<St, X, Strat, N> SealedGuard for ThrottleLayer<St, X, Strat, N> {}

/// The throttle is its service's guard by the call path every guard shares (its part:
/// `call.rs`).
impl<S, St, X, Strat, N, Req> Guard<S, Req> for ThrottleLayer<St, X, Strat, N>
where
    Self: Contended<S, Req, Over = N, Key = LockKey>,
    N: Nesting<S, Req>,
    S: Service<Req> + Send + 'static,
    Req: Send + 'static,
    X: KeyExtractor<Req>,
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
    ) -> impl Future<Output = GuardedResult<S, Req, Self>> + Send + 'static {
        call_contended(self, key, inner, request)
    }
}
