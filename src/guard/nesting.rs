//! What a guard's service wraps: a handler, whose response and error it wraps in
//! [`Outcome`] and [`Error`], or another guard, whose [`Outcome`] and [`Error`] pass through
//! as they are, so that a stack of guards has one outcome and one error (which a
//! [`Scheduler`](crate::Scheduler) reads).

use std::future::Future;

use tower::Service;

use super::{Error, Outcome};

/// A handler a lock-family guard can run on another task while it renews the key: its future
/// and what it answers cross tasks. Written once for the guards' bounds (a blanket impl:
/// every such service is one).
pub(crate) trait SendHandler<Req>:
    Service<Req, Future: Send, Response: Send + 'static, Error: Send + 'static> + Send + 'static
{
}

impl<S, Req> SendHandler<Req> for S where
    S: Service<Req, Future: Send, Response: Send + 'static, Error: Send + 'static> + Send + 'static
{
}

/// The guard wraps a handler (the default): its response is [`Outcome::Done`], its error
/// [`Error::Inner`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OverHandler;

/// The guard wraps another guard's service (a [`LockService`](crate::LockService), say): its
/// [`Outcome`] and [`Error`] are the stack's.
#[derive(Debug, Clone, Copy, Default)]
pub struct OverGuard;

/// How a guard calls what it wraps; implemented by [`OverHandler`] and [`OverGuard`] only.
pub trait Nesting<S: Service<Req>, Req>: Send + Sync + 'static {
    /// The handler's response.
    type Response;
    /// The handler's error.
    type Error;

    /// The inner service's readiness error, as the stack's error.
    fn ready_error(error: S::Error) -> Error<Self::Error>;

    /// Calls the inner service, its result as the stack's.
    fn call(
        inner: S,
        request: Req,
    ) -> impl Future<Output = Result<Outcome<Self::Response>, Error<Self::Error>>> + Send;
}

impl<S, Req> Nesting<S, Req> for OverHandler
where
    S: Service<Req> + Send,
    S::Future: Send,
    Req: Send,
{
    type Response = S::Response;
    type Error = S::Error;

    fn ready_error(error: S::Error) -> Error<S::Error> {
        Error::Inner(error)
    }

    async fn call(mut inner: S, request: Req) -> Result<Outcome<S::Response>, Error<S::Error>> {
        inner.call(request).await.map(Outcome::Done).map_err(Error::Inner)
    }
}

impl<S, Req, R, E> Nesting<S, Req> for OverGuard
where
    S: Service<Req, Response = Outcome<R>, Error = Error<E>> + Send,
    S::Future: Send,
    Req: Send,
{
    type Response = R;
    type Error = E;

    fn ready_error(error: Error<E>) -> Error<E> {
        error
    }

    async fn call(mut inner: S, request: Req) -> Result<Outcome<R>, Error<E>> {
        inner.call(request).await
    }
}
