//! The service that runs requests under their keys, read or written: what the read-write
//! lock's guard does with a request.

use super::ReadWriteLayer;
use crate::guard::{GuardService, TakesContendedPath};
use crate::sealed::SealedGuard;

/// Runs each request under its key, read beside other readers or written alone; built by
/// [`ReadWriteLayer`].
///
/// An uncontended request costs two store round trips, as a semaphore's: acquire, then
/// release. Requests whose extractor returns `None` pass through unguarded.
pub type ReadWriteService<S, St, X, A, Strat> = GuardService<S, ReadWriteLayer<St, X, A, Strat>>;

impl<St, X, A, Strat> SealedGuard for ReadWriteLayer<St, X, A, Strat> {}
impl<St, X, A, Strat> TakesContendedPath for ReadWriteLayer<St, X, A, Strat> {}
