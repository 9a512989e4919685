//! The service that admits requests at their key's rate.

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::ThrottleStore;
use super::call::{Shared, call_throttled};
use crate::guard::{Error, KeyExtractor, Nesting, Outcome, ResponseFuture, guarded_key, take_ready};
use crate::strategy::ConflictStrategy;

/// Admits each request at its key's rate; built by [`ThrottleLayer`](super::ThrottleLayer).
///
/// A request within the rate costs one store round trip. Requests whose extractor returns
/// `None` pass through unthrottled.
pub struct ThrottleService<S, St, X, Strat, N> {
    inner: S,
    shared: Arc<Shared<St, X, Strat>>,
    nesting: PhantomData<fn() -> N>,
}

impl<S, St, X, Strat, N> ThrottleService<S, St, X, Strat, N> {
    pub(super) fn new(inner: S, shared: Arc<Shared<St, X, Strat>>) -> Self {
        ThrottleService {
            inner,
            shared,
            nesting: PhantomData,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, St, X, Strat, N> Clone for ThrottleService<S, St, X, Strat, N> {
    fn clone(&self) -> Self {
        ThrottleService::new(self.inner.clone(), Arc::clone(&self.shared))
    }
}

impl<S: std::fmt::Debug, St, X, Strat, N> std::fmt::Debug for ThrottleService<S, St, X, Strat, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleService")
            .field("inner", &self.inner)
            .field("rate", &self.shared.rate)
            .finish_non_exhaustive()
    }
}

impl<S, St, X, Strat, N, Req> Service<Req> for ThrottleService<S, St, X, Strat, N>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    Req: Send + 'static,
    St: ThrottleStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Strat: ConflictStrategy<Req>,
    N: Nesting<S, Req>,
    N::Response: Send + 'static,
    N::Error: Send + 'static,
{
    type Response = Outcome<N::Response>;
    type Error = Error<N::Error>;
    type Future = ResponseFuture<N::Response, N::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(N::ready_error)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let ready = take_ready(&mut self.inner);
        match guarded_key(&self.shared.extractor, &request) {
            Ok(Some(key)) => ResponseFuture::new(call_throttled::<S, St, X, Strat, N, Req>(
                Arc::clone(&self.shared),
                key,
                ready,
                request,
            )),
            Ok(None) => ResponseFuture::new(N::call(ready, request)),
            Err(invalid) => ResponseFuture::new(std::future::ready(Err(Error::InvalidKey(invalid)))),
        }
    }
}
