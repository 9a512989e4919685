//! The service that admits requests at their key's rate: what the throttle's guard does with a
//! request.

use super::ThrottleLayer;
use crate::guard::{GuardService, TakesContendedPath};
use crate::sealed::SealedGuard;

/// Admits each request at its key's rate; built by [`ThrottleLayer`].
///
/// A request within the rate costs one store round trip. Requests whose extractor returns
/// `None` pass through unthrottled.
pub type ThrottleService<S, St, X, Strat, N> = GuardService<S, ThrottleLayer<St, X, Strat, N>>;

impl<St, X, Strat, N> SealedGuard for ThrottleLayer<St, X, Strat, N> {}
impl<St, X, Strat, N> TakesContendedPath for ThrottleLayer<St, X, Strat, N> {}
