//! The layer that builds [`ThrottleService`]s.

use std::marker::PhantomData;

use tower::Layer;

use super::{Rate, ThrottleService};
use crate::guard::{GuardService, OverGuard, OverHandler};
use crate::strategy::FailFast;

/// Admits each request at most at `rate` per key, in `store`, with `strategy` deciding what a
/// request over the rate does. The same strategies as for a lock: [`FailFast`] answers with
/// the exact time the key's next slot opens, [`Retry`](crate::strategy::Retry) books that slot
/// and waits for it, [`Defer`](crate::strategy::Defer) books it for the job it stores, which runs
/// at it.
///
/// ```
/// use std::convert::Infallible;
/// use redefer::{Error, MemoryStore};
/// use redefer::throttle::{Rate, ThrottleLayer};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// struct Call { customer: u64 }
///
/// let calls = ThrottleLayer::new(MemoryStore::new(), |c: &Call| Some(format!("customer:{}", c.customer)), Rate::per_second(10)?)
///     .layer(service_fn(|_: Call| async { Ok::<_, Infallible>("sent") }));
///
/// assert_eq!(calls.clone().oneshot(Call { customer: 1 }).await?.done(), Some("sent"));
/// match calls.oneshot(Call { customer: 1 }).await {
///     Err(Error::Throttled { retry_after, .. }) => assert!(retry_after.as_millis() <= 100),
///     other => panic!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
///
/// Throttle and lock compose in one stack: the throttle outside, [`over_guard`](Self::over_guard)
/// so that the lock's outcome and error are the stack's:
///
/// ```
/// use std::convert::Infallible;
/// use redefer::{LockLayer, MemoryStore};
/// use redefer::throttle::{Rate, ThrottleLayer};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// struct Refund { customer: u64, order: u64 }
///
/// let store = MemoryStore::new();
/// let refunds = ServiceBuilder::new()
///     // at most 10 calls/s per customer ...
///     .layer(ThrottleLayer::new(store.clone(), |r: &Refund| Some(format!("customer:{}", r.customer)), Rate::per_second(10)?).over_guard())
///     // ... and one at a time per order
///     .layer(LockLayer::new(store, |r: &Refund| Some(format!("order:{}", r.order))))
///     .service(service_fn(|r: Refund| async move { Ok::<_, Infallible>(r.order) }));
///
/// assert_eq!(refunds.oneshot(Refund { customer: 1, order: 7 }).await?.done(), Some(7));
/// # Ok(()) }
/// ```
pub struct ThrottleLayer<St, X, Strat = FailFast, N = OverHandler> {
    pub(super) store: St,
    pub(super) extractor: X,
    pub(super) strategy: Strat,
    pub(super) rate: Rate,
    nesting: PhantomData<fn() -> N>,
}

impl<St, X> ThrottleLayer<St, X, FailFast, OverHandler> {
    /// Throttles each request on the key `extractor` gives it to `rate` (each key its own
    /// schedule), failing fast when over it.
    pub fn new(store: St, extractor: X, rate: Rate) -> Self {
        ThrottleLayer {
            store,
            extractor,
            strategy: FailFast,
            rate,
            nesting: PhantomData,
        }
    }
}

impl<St, X, Strat, N> ThrottleLayer<St, X, Strat, N> {
    /// What a request over the rate does.
    pub fn on_conflict<S2>(self, strategy: S2) -> ThrottleLayer<St, X, S2, N> {
        ThrottleLayer {
            store: self.store,
            extractor: self.extractor,
            strategy,
            rate: self.rate,
            nesting: PhantomData,
        }
    }

    /// Wraps another guard's service (a [`LockLayer`](crate::LockLayer)'s): its
    /// [`Outcome`](crate::Outcome) and [`Error`](crate::Error) pass through as the stack's.
    pub fn over_guard(self) -> ThrottleLayer<St, X, Strat, OverGuard> {
        ThrottleLayer {
            store: self.store,
            extractor: self.extractor,
            strategy: self.strategy,
            rate: self.rate,
            nesting: PhantomData,
        }
    }
}

impl<S, St: Clone, X: Clone, Strat: Clone, N> Layer<S> for ThrottleLayer<St, X, Strat, N> {
    type Service = ThrottleService<S, St, X, Strat, N>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService::new(inner, self.clone())
    }
}

impl<St: Clone, X: Clone, Strat: Clone, N> Clone for ThrottleLayer<St, X, Strat, N> {
    fn clone(&self) -> Self {
        ThrottleLayer {
            store: self.store.clone(),
            extractor: self.extractor.clone(),
            strategy: self.strategy.clone(),
            rate: self.rate,
            nesting: PhantomData,
        }
    }
}

impl<St: std::fmt::Debug, X, Strat: std::fmt::Debug, N> std::fmt::Debug for ThrottleLayer<St, X, Strat, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleLayer")
            .field("store", &self.store)
            .field("strategy", &self.strategy)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}
