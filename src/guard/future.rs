//! The response future of every guard's service ([`GuardService`](super::GuardService)): a
//! boxed guarded call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{Error, Outcome};

type BoxedCall<R, E> = Pin<Box<dyn Future<Output = Result<Outcome<R>, Error<E>>> + Send>>;

/// The future returned by a guard's service ([`GuardService`](super::GuardService):
/// [`LockService`](crate::lock::LockService),
/// [`ThrottleService`](crate::throttle::ThrottleService), ...).
///
/// Dropping it mid-call releases the lock in the background.
pub struct ResponseFuture<R, E> {
    call: BoxedCall<R, E>,
}

impl<R, E> ResponseFuture<R, E> {
    pub(crate) fn new(call: impl Future<Output = Result<Outcome<R>, Error<E>>> + Send + 'static) -> Self {
        ResponseFuture { call: Box::pin(call) }
    }
}

impl<R, E> Future for ResponseFuture<R, E> {
    type Output = Result<Outcome<R>, Error<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.call.as_mut().poll(cx)
    }
}

impl<R, E> fmt::Debug for ResponseFuture<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
