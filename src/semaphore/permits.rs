//! A semaphore seen as the lock the layer takes: [`Permits`] gives the lock layer a permit of
//! the key wherever it asks for the key's lock.

use std::time::Duration;

use super::{PermitLimit, SemaphoreStore};
use crate::error::StoreError;
use crate::key::{LockKey, Prefix};
use crate::lock::{Acquisition, Fencing, Handoffs, LockStore, LockToken, Waiter};
use crate::store::Sealed;

/// A store whose "lock" of a key is one of the key's permits: what
/// [`LockLayer::permits`](crate::LockLayer::permits) and
/// [`LockLayer::permits_by`](crate::LockLayer::permits_by) guard keys with.
///
/// Every [`LockStore`] operation is the [`SemaphoreStore`] operation of the same name, with the
/// key's limit from `limit`. With a limit of 1 it behaves as the mutex (on keys of its own).
///
/// ```
/// use std::time::Duration;
/// use redefer::{LockKey, LockToken, MemoryStore};
/// use redefer::lock::{Acquisition, LockStore};
/// use redefer::semaphore::Permits;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let permits = Permits::new(MemoryStore::new(), 2);
/// let key = LockKey::new("upstream:7")?;
/// let ttl = Duration::from_secs(5);
/// for _ in 0..2 {
///     let taken = permits.try_acquire(&key, LockToken::random(), ttl).await?;
///     assert!(matches!(taken, Acquisition::Acquired(Some(_))));
/// }
/// let third = permits.try_acquire(&key, LockToken::random(), ttl).await?;
/// assert!(matches!(third, Acquisition::Held { .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Permits<St, L = u32> {
    store: St,
    limit: L,
}

impl<St, L> Permits<St, L> {
    /// The permits of `store`'s keys, `limit` of them per key.
    pub fn new(store: St, limit: L) -> Self {
        Permits { store, limit }
    }

    /// The store the permits are kept in.
    pub fn store(&self) -> &St {
        &self.store
    }
}

impl<St: Sealed, L> Sealed for Permits<St, L> {
    fn under_prefix(self, prefix: Prefix) -> Self {
        Permits {
            store: self.store.under_prefix(prefix),
            limit: self.limit,
        }
    }
}

impl<St, L> LockStore for Permits<St, L>
where
    St: SemaphoreStore,
    L: PermitLimit + Clone,
{
    fn try_acquire_in_line(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        let permits = self.limit.permits(key);
        self.store
            .try_acquire_permit(key, token, ttl, permits, waiter, fencing)
    }

    fn extend(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.store.extend_permit(key, token, ttl)
    }

    fn release_after(
        &self,
        key: &LockKey,
        token: LockToken,
        held_for: Option<Duration>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let permits = self.limit.permits(key);
        self.store.release_permit(key, token, permits, held_for)
    }

    fn join(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let permits = self.limit.permits(key);
        self.store.join_permits(key, waiter, replacing, permits)
    }

    fn leave(&self, key: &LockKey, waiter: &Waiter) -> impl Future<Output = Result<(), StoreError>> + Send {
        let permits = self.limit.permits(key);
        self.store.leave_permits(key, waiter, permits)
    }

    fn handoffs(&self, key: &LockKey) -> Handoffs {
        self.store.permit_handoffs(key)
    }
}
