//! The layer that builds [`LockService`]s.

use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::LockService;
use super::expiry_watch::ExpiryWatches;
use super::holds::LayerHolds;
use crate::guard::{DEFAULT_TTL, GuardService};
use crate::lock::Fencing;
use crate::strategy::FailFast;

/// Runs each request under the lock of its key, in `store`, with `strategy` deciding what a
/// request does when its lock is held.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{Backoff, LockLayer, MemoryStore, strategy::Retry};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// struct Debit { account: u64, cents: i64 }
///
/// let service = ServiceBuilder::new()
///     .layer(
///         LockLayer::new(MemoryStore::new(), |d: &Debit| Some(format!("account:{}", d.account)))
///             .ttl(Duration::from_secs(5))
///             .on_conflict(Retry::new(Backoff::default())),
///     )
///     .service(service_fn(|d: Debit| async move { Ok::<_, Infallible>(d.cents) }));
///
/// let outcome = service.oneshot(Debit { account: 1, cents: 250 }).await.unwrap();
/// assert_eq!(outcome.done(), Some(250));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockLayer<St, X, Strat = FailFast> {
    pub(crate) store: St,
    pub(crate) extractor: X,
    pub(crate) strategy: Strat,
    pub(crate) ttl: Duration,
    pub(crate) fencing: Fencing,
    /// The holds this layer's services measured, on every key: for a key whose own were never
    /// sampled.
    pub(crate) holds: Arc<LayerHolds>,
    /// The keys this layer's calls wait for in place, each watched for its holder running out.
    pub(crate) expiries: Arc<ExpiryWatches>,
}

impl<St, X> LockLayer<St, X, FailFast> {
    /// Locks each request on the key `extractor` gives it, failing fast on conflicts, with the
    /// default TTL of 10 s.
    pub fn new(store: St, extractor: X) -> Self {
        LockLayer {
            store,
            extractor,
            strategy: FailFast,
            ttl: DEFAULT_TTL,
            fencing: Fencing::On,
            holds: Arc::default(),
            expiries: Arc::default(),
        }
    }
}

impl<St, X, Strat> LockLayer<St, X, Strat> {
    /// How long a lock lives unless renewed. A handler that runs longer keeps its lock: it is
    /// extended every third of the TTL. The TTL is the safety net for a holder that crashed.
    ///
    /// # Panics
    ///
    /// If `ttl` is shorter than 3 ms, too short to renew.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        assert!(
            ttl >= Duration::from_millis(3),
            "lock TTL {ttl:?} is shorter than 3 ms"
        );
        self.ttl = ttl;
        self
    }

    /// Whether handlers get a [fencing token](crate::FencingToken) (on by default). Off, an
    /// uncontended acquire is a plain `SET NX PX`, the cheapest there is; see [`Fencing`] for
    /// what that costs in safety.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use redefer::{current_lock, Fencing, LockLayer, MemoryStore};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let service = LockLayer::new(MemoryStore::new(), |id: &u64| Some(format!("doc:{id}")))
    ///     .fencing(Fencing::Off)
    ///     .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(current_lock().unwrap().fence) }));
    /// assert_eq!(service.oneshot(7).await.unwrap().done(), Some(None));
    /// # }
    /// ```
    pub fn fencing(mut self, fencing: Fencing) -> Self {
        self.fencing = fencing;
        self
    }

    /// What a request does when its lock is held.
    pub fn on_conflict<Strat2>(self, strategy: Strat2) -> LockLayer<St, X, Strat2> {
        LockLayer {
            store: self.store,
            extractor: self.extractor,
            strategy,
            ttl: self.ttl,
            fencing: self.fencing,
            holds: self.holds,
            expiries: self.expiries,
        }
    }
}

impl<S, St: Clone, X: Clone, Strat: Clone> Layer<S> for LockLayer<St, X, Strat> {
    type Service = LockService<S, St, X, Strat>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService::new(inner, self.clone())
    }
}
