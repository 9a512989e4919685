//! The service that runs requests under their keys, read or written: what the read-write
//! lock's guard does with a request.

use std::sync::Arc;

use tower::Service;

use super::call::AccessedKey;
use super::{AccessExtractor, ReadWriteLayer};
use crate::error::KeyError;
use crate::guard::{
    Contended, Guard, GuardService, GuardedResult, KeyExtractor, Nesting, OverHandler, call_contended,
    guarded_key,
};
use crate::sealed::SealedGuard;

/// Runs each request under its key, read beside other readers or written alone; built by
/// [`ReadWriteLayer`].
///
/// An uncontended request costs two store round trips, as a semaphore's: acquire, then
/// release. Requests whose extractor returns `None` pass through unguarded.
pub type ReadWriteService<S, St, X, A, Strat> = GuardService<S, ReadWriteLayer<St, X, A, Strat>>;

impl<St, X, A, Strat> SealedGuard for ReadWriteLayer<St, X, A, Strat> {}

/// The read-write lock is its service's guard by the lock's call path (`call.rs`).
impl<S, St, X, A, Strat, Req> Guard<S, Req> for ReadWriteLayer<St, X, A, Strat>
where
    Self: Contended<S, Req, Over = OverHandler, Key = AccessedKey>,
    OverHandler: Nesting<S, Req>,
    S: Service<Req> + Send + 'static,
    Req: Send + 'static,
    X: KeyExtractor<Req>,
    A: AccessExtractor<Req>,
{
    type Over = OverHandler;
    type Key = AccessedKey;

    fn key(&self, request: &Req) -> Result<Option<AccessedKey>, KeyError> {
        let Some(key) = guarded_key(&self.lock.extractor, request)? else {
            return Ok(None);
        };
        Ok(Some(AccessedKey {
            key,
            access: self.access.access(request),
        }))
    }

    fn call(
        self: Arc<Self>,
        key: AccessedKey,
        inner: S,
        request: Req,
    ) -> impl Future<Output = GuardedResult<S, Req, Self>> + Send + 'static {
        call_contended(self, key, inner, request)
    }
}
