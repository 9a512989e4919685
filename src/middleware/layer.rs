//! The layer that builds [`LockService`]s.

use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::LockService;
use super::call::Shared;
use crate::lock::Fencing;
use crate::semaphore::{PermitLimit, Permits, SemaphoreStore};
use crate::strategy::FailFast;

/// The default lock TTL: long enough for most handlers without renewal, short enough that a
/// crashed holder blocks its key only briefly.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

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
    store: St,
    extractor: X,
    strategy: Strat,
    ttl: Duration,
    fencing: Fencing,
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
        }
    }

    /// Lets up to `permits` requests hold each key at once: a [semaphore](crate::semaphore)
    /// per key instead of a mutex. Each holder has a permit of its own, with a fencing token,
    /// renewed while its handler runs; a request that finds every permit taken meets the
    /// strategy as it would a held lock, and waits in the key's line.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use redefer::{Backoff, LockLayer, MemoryStore, strategy::Retry};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// // At most 4 exports at a time per tenant; the fifth waits in line for a permit.
    /// let exports = LockLayer::new(MemoryStore::new(), |tenant: &u32| Some(format!("exports:{tenant}")))
    ///     .permits(4)
    ///     .on_conflict(Retry::new(Backoff::default()))
    ///     .layer(service_fn(|tenant: u32| async move { Ok::<_, Infallible>(tenant) }));
    /// assert_eq!(exports.oneshot(9).await.unwrap().done(), Some(9));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When `permits` is 0, as `[lock] permits = 0` is a configuration error: a semaphore of
    /// no permits admits nobody, ever. To close keys for a while, give
    /// [`permits_by`](Self::permits_by) a closure that says 0 for them (a request on such a key
    /// is refused with [`Error::Closed`](crate::Error::Closed)).
    pub fn permits(self, permits: u32) -> LockLayer<Permits<St, u32>, X, Strat>
    where
        St: SemaphoreStore,
    {
        assert!(
            permits > 0,
            "LockLayer::permits(0): a semaphore needs at least one permit (permits_by closes keys)"
        );
        self.permits_by(permits)
    }

    /// Like [`permits`](Self::permits), with the limit of each key from `limit`: a closure of
    /// the key (for example by customer tier), asked at every acquire and release, so a
    /// limit may change while the key is held. A limit of 0 closes the key: its requests are
    /// refused with [`Error::Closed`](crate::Error::Closed) (nothing is stored, whatever the
    /// strategy), and a job that meets it waits for it to open.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use redefer::{LockKey, LockLayer, MemoryStore};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let by_tier = |key: &LockKey| if key.as_str().starts_with("gold:") { 16 } else { 2 };
    /// let calls = LockLayer::new(MemoryStore::new(), |customer: &String| Some(customer.clone()))
    ///     .permits_by(by_tier)
    ///     .layer(service_fn(|customer: String| async move { Ok::<_, Infallible>(customer) }));
    /// assert!(calls.oneshot("gold:acme".to_string()).await.unwrap().done().is_some());
    /// # }
    /// ```
    pub fn permits_by<L>(self, limit: L) -> LockLayer<Permits<St, L>, X, Strat>
    where
        St: SemaphoreStore,
        L: PermitLimit + Clone,
    {
        LockLayer {
            store: Permits::new(self.store, limit),
            extractor: self.extractor,
            strategy: self.strategy,
            ttl: self.ttl,
            fencing: self.fencing,
        }
    }
}

impl<S, St, X, Strat> Layer<S> for LockLayer<St, X, Strat>
where
    St: Clone,
    X: Clone,
    Strat: Clone,
{
    type Service = LockService<S, St, X, Strat>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(
            inner,
            Arc::new(Shared {
                store: self.store.clone(),
                extractor: self.extractor.clone(),
                strategy: self.strategy.clone(),
                ttl: self.ttl,
                fencing: self.fencing,
                holds: super::holds::LayerHolds::default(),
            }),
        )
    }
}
