//! The service that runs requests under their locks.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::call::{Shared, call_locked};
use crate::guard::{Error, KeyExtractor, Outcome, ResponseFuture, guarded_key, take_ready};
use crate::lock::LockStore;
use crate::strategy::ConflictStrategy;

/// Runs each request under the lock of its key; built by [`LockLayer`](super::LockLayer).
///
/// An uncontended request costs two store round trips: acquire, then release. Requests whose
/// extractor returns `None` pass through unlocked.
///
/// The inner service made ready by `poll_ready` is the one that handles the request (a clone
/// takes its place), as tower requires of services that move their inner service into the
/// response future.
#[derive(Debug)]
pub struct LockService<S, St, X, Strat> {
    inner: S,
    shared: Arc<Shared<St, X, Strat>>,
}

impl<S, St, X, Strat> LockService<S, St, X, Strat> {
    pub(super) fn new(inner: S, shared: Arc<Shared<St, X, Strat>>) -> Self {
        LockService { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, St, X, Strat> Clone for LockService<S, St, X, Strat> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, St, X, Strat, Req> Service<Req> for LockService<S, St, X, Strat>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    St: LockStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Strat: ConflictStrategy<Req>,
{
    type Response = Outcome<S::Response>;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Error::Inner)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let mut ready = take_ready(&mut self.inner);
        match guarded_key(&self.shared.extractor, &request) {
            Ok(Some(key)) => ResponseFuture::new(call_locked(Arc::clone(&self.shared), key, ready, request)),
            Ok(None) => {
                let response = ready.call(request);
                ResponseFuture::new(async move { response.await.map(Outcome::Done).map_err(Error::Inner) })
            }
            Err(invalid) => ResponseFuture::new(std::future::ready(Err(Error::InvalidKey(invalid)))),
        }
    }
}
