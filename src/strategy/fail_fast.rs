//! Refuse at once.

use std::future::{Future, ready};

use super::{Conflict, ConflictStrategy, Decision};
use crate::error::BoxError;

/// Refuses a request whose lock is held, with the holder's remaining TTL as the hint of when to
/// try again: [`Error::Locked`](crate::Error::Locked) `{ key, retry_after }`. An HTTP service
/// turns it into `409 Conflict` or `429 Too Many Requests` with `Retry-After`.
///
/// The default strategy of [`LockLayer`](crate::LockLayer).
#[derive(Debug, Clone, Copy, Default)]
pub struct FailFast;

impl<Req> ConflictStrategy<Req> for FailFast {
    fn on_conflict(
        &self,
        conflict: Conflict,
        _request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        ready(Ok(Decision::Reject {
            retry_after: conflict.remaining,
        }))
    }
}
