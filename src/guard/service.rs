//! The service every guard's layer builds: it keeps tower's contract (the inner service that
//! `poll_ready` made ready handles the request), passes requests without a key, refuses an
//! invalid key before any store call, and hands the rest to its [`Guard`].

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::{Error, Nesting, Outcome, ResponseFuture};
use crate::error::KeyError;
use crate::sealed::SealedGuard;

/// A service under a guard: built by a guard's layer, which is its [`Guard`].
///
/// Named after its guard: [`LockService`](crate::LockService),
/// [`ThrottleService`](crate::throttle::ThrottleService),
/// [`DebounceService`](crate::debounce::DebounceService),
/// [`IdempotencyService`](crate::idempotency::IdempotencyService).
///
/// ```
/// use std::convert::Infallible;
/// use redefer::{LockLayer, LockService, MemoryStore};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let layer = LockLayer::new(MemoryStore::new(), |id: &u64| Some(format!("doc:{id}")));
/// let service = layer.layer(service_fn(|id: u64| async move { Ok::<_, Infallible>(id) }));
/// assert_eq!(service.oneshot(7).await.unwrap().done(), Some(7));
/// # }
/// ```
pub struct GuardService<S, G> {
    inner: S,
    guard: Arc<G>,
}

impl<S, G> GuardService<S, G> {
    pub(crate) fn new(inner: S, guard: G) -> Self {
        GuardService {
            inner,
            guard: Arc::new(guard),
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, G> Clone for GuardService<S, G> {
    fn clone(&self) -> Self {
        GuardService {
            inner: self.inner.clone(),
            guard: Arc::clone(&self.guard),
        }
    }
}

impl<S: std::fmt::Debug, G: std::fmt::Debug> std::fmt::Debug for GuardService<S, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardService")
            .field("inner", &self.inner)
            .field("guard", &self.guard)
            .finish()
    }
}

/// The stack's response under guard `G` over service `S`: the handler's, through any guards
/// inside.
pub type GuardedResponse<S, Req, G> = <<G as Guard<S, Req>>::Over as Nesting<S, Req>>::Response;
/// The stack's error under guard `G` over service `S`: the handler's, through any guards inside.
pub type GuardedError<S, Req, G> = <<G as Guard<S, Req>>::Over as Nesting<S, Req>>::Error;
/// What a guarded call of guard `G` over service `S` ends with.
pub type GuardedResult<S, Req, G> =
    Result<Outcome<GuardedResponse<S, Req, G>>, Error<GuardedError<S, Req, G>>>;

/// What a guard does with the requests of its [`GuardService`]: the layers of the crate's
/// guards implement it (sealed). The guards whose key a request can meet taken
/// ([`LockLayer`](crate::LockLayer), [`LockSetLayer`](crate::lock_set::LockSetLayer),
/// [`ReadWriteLayer`](crate::read_write::ReadWriteLayer),
/// [`ThrottleLayer`](crate::throttle::ThrottleLayer)) implement it by one call path, hence
/// the one impl for all of them below; [`DebounceLayer`](crate::debounce::DebounceLayer) and
/// [`IdempotencyLayer`](crate::idempotency::IdempotencyLayer) by their own.
pub trait Guard<S: Service<Req>, Req>: SealedGuard + Send + Sync + 'static {
    /// What the guard wraps: a handler ([`OverHandler`](super::OverHandler)) or another
    /// guard's service ([`OverGuard`](super::OverGuard)).
    type Over: Nesting<S, Req>;
    /// What the guard knows a request by: its key, or an idempotency id.
    type Key: Send + 'static;

    /// The key of `request`: `None` passes it unguarded, an error refuses it before any store
    /// call.
    fn key(&self, request: &Req) -> Result<Option<Self::Key>, KeyError>;

    /// The guarded call of `request` under `key`, by `inner` (made ready).
    fn call(
        self: Arc<Self>,
        key: Self::Key,
        inner: S,
        request: Req,
    ) -> impl Future<Output = GuardedResult<S, Req, Self>> + Send + 'static;
}

impl<S, G, Req> Service<Req> for GuardService<S, G>
where
    S: Service<Req> + Clone + Send + 'static,
    Req: Send + 'static,
    G: Guard<S, Req>,
    GuardedResponse<S, Req, G>: Send + 'static,
    GuardedError<S, Req, G>: Send + 'static,
{
    type Response = Outcome<GuardedResponse<S, Req, G>>;
    type Error = Error<GuardedError<S, Req, G>>;
    type Future = ResponseFuture<GuardedResponse<S, Req, G>, GuardedError<S, Req, G>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(G::Over::ready_error)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let ready = take_ready(&mut self.inner);
        match self.guard.key(&request) {
            Ok(Some(key)) => ResponseFuture::new(Arc::clone(&self.guard).call(key, ready, request)),
            Ok(None) => ResponseFuture::new(G::Over::call(ready, request)),
            Err(invalid) => ResponseFuture::new(std::future::ready(Err(Error::InvalidKey(invalid)))),
        }
    }
}

/// The inner service that `poll_ready` made ready, leaving a clone in its place: the ready one
/// must handle the request (tower's contract), and the future owns it.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}
