//! The semaphore as a layer: a [`LockLayer`] whose keys have N permits each.

use super::{PermitLimit, Permits};
use crate::lock::LockLayer;
use crate::lock::LockStore;

impl<St, X, Strat> LockLayer<St, X, Strat> {
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
        St: LockStore,
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
        St: LockStore,
        L: PermitLimit + Clone,
    {
        LockLayer {
            store: Permits::new(self.store, limit),
            extractor: self.extractor,
            strategy: self.strategy,
            ttl: self.ttl,
            fencing: self.fencing,
            holds: self.holds,
            expiries: self.expiries,
        }
    }
}
