//! The service that runs requests under their locks: what the lock's guard does with a request.

use super::LockLayer;
use crate::guard::{GuardService, TakesContendedPath};
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
impl<St, X, Strat> TakesContendedPath for LockLayer<St, X, Strat> {}
