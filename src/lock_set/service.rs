//! The service that runs requests while they hold their sets of keys: what the set's guard
//! does with a request.

use super::LockSetLayer;
use crate::guard::{GuardService, TakesContendedPath};
use crate::sealed::SealedGuard;

/// Runs each request while it holds every key of its set; built by [`LockSetLayer`].
///
/// An uncontended request costs one store round trip to take its set (per hash slot on Redis
/// Cluster) and one release per key, sent together. Requests whose extractor returns `None`
/// pass through unlocked; `Some` of no keys is refused ([`KeyError::EmptySet`](crate::KeyError::EmptySet)).
pub type LockSetService<S, St, X, Strat> = GuardService<S, LockSetLayer<St, X, Strat>>;

impl<St, X, Strat> SealedGuard for LockSetLayer<St, X, Strat> {}
impl<St, X, Strat> TakesContendedPath for LockSetLayer<St, X, Strat> {}
