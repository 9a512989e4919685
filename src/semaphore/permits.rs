//! A semaphore seen as the lock the layer takes: [`Permits`] gives the lock layer a permit of
//! the key wherever it asks for the key's lock.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::PermitLimit;
use crate::error::StoreError;
use crate::guard::{LineCap, LineJoin, Waiter};
use crate::key::{LockKey, Prefix};
use crate::lock::{Acquisition, Fencing, Handoffs, Holders, LockStore, LockToken};
use crate::sealed::Sealed;

/// A store whose "lock" of a key is one of the key's permits: what
/// [`LockLayer::permits`](crate::LockLayer::permits) and
/// [`LockLayer::permits_by`](crate::LockLayer::permits_by) guard keys with.
///
/// Every [`LockStore`] operation goes to the store with [`Holders::Permits`] of the key's limit
/// from `limit` (asked at each operation; whatever holders a caller passes), or
/// [`Holders::Writer`] for a read-write lock's writers. With a limit of 1 it behaves as the
/// mutex (on keys of its own).
///
/// ```
/// use std::time::Duration;
/// use redefer::{LockKey, LockToken, MemoryStore};
/// use redefer::lock::{Acquisition, Fencing, LockStore};
/// use redefer::semaphore::Permits;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let permits = Permits::new(MemoryStore::new(), 2);
/// let key = LockKey::new("upstream:7")?;
/// let ttl = Duration::from_secs(5);
/// let holders = permits.holders(&key); // Holders::Permits(2)
/// for _ in 0..2 {
///     let taken = permits.acquire(&key, LockToken::random(), ttl, holders, None, Fencing::On).await?;
///     assert!(matches!(taken, Acquisition::Acquired(Some(_))));
/// }
/// let third = permits.acquire(&key, LockToken::random(), ttl, holders, None, Fencing::On).await?;
/// assert!(matches!(third, Acquisition::Held { .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Permits<St, L = u32> {
    store: St,
    limit: L,
    in_use: InUse,
    /// Whether its holders are a read-write lock's writers ([`Holders::Writer`]): each holds
    /// its key alone.
    writes: bool,
}

/// The permits this process's handlers hold, for the `redefer_permits_in_use` gauge: a permit
/// counts from its acquire to its release, whatever the release finds (a permit lost while its
/// handler ran is released too, by the layer, and stops counting then).
#[derive(Debug, Clone, Default)]
struct InUse(Arc<Mutex<HashSet<LockToken>>>);

impl InUse {
    fn taken(&self, token: LockToken) {
        if lock_unpoisoned(&self.0).insert(token) {
            metrics::gauge!("redefer_permits_in_use").increment(1.0);
        }
    }

    fn given_back(&self, token: LockToken) {
        if lock_unpoisoned(&self.0).remove(&token) {
            metrics::gauge!("redefer_permits_in_use").decrement(1.0);
        }
    }
}

/// The set is updated in one step each time: a panic elsewhere cannot leave it half-changed.
fn lock_unpoisoned<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<St, L> Permits<St, L> {
    /// The permits of `store`'s keys, `limit` of them per key.
    pub fn new(store: St, limit: L) -> Self {
        Permits {
            store,
            limit,
            in_use: InUse::default(),
            writes: false,
        }
    }

    /// The same permits, held by writers: each holds its key alone, readers (holders of these
    /// permits) wait for it, and it waits for them. What a
    /// [`ReadWriteLayer`](crate::read_write::ReadWriteLayer) holds a writing request's key by.
    pub(crate) fn writers(&self) -> Self
    where
        St: Clone,
        L: Clone,
    {
        Permits {
            writes: true,
            ..self.clone()
        }
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
            ..self
        }
    }

    fn instance(&self) -> u64 {
        self.store.instance()
    }
}

impl<St, L> LockStore for Permits<St, L>
where
    St: LockStore,
    L: PermitLimit + Clone,
{
    fn is_closed(&self, key: &LockKey) -> bool {
        self.limit.permits(key) == 0
    }

    fn holders(&self, key: &LockKey) -> Holders {
        let limit = self.limit.permits(key);
        if self.writes {
            Holders::Writer(limit)
        } else {
            Holders::Permits(limit)
        }
    }

    fn acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        _holders: Holders,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        let acquired = self
            .store
            .acquire(key, token, ttl, self.holders(key), waiter, fencing);
        let in_use = self.in_use.clone();
        async move {
            let acquisition = acquired.await?;
            if let Acquisition::Acquired(_) = acquisition {
                in_use.taken(token);
            }
            Ok(acquisition)
        }
    }

    fn extend_holding(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        _holders: Holders,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.store.extend_holding(key, token, ttl, self.holders(key))
    }

    fn release_holding(
        &self,
        key: &LockKey,
        token: LockToken,
        _holders: Holders,
        held_for: Option<Duration>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.in_use.given_back(token);
        self.store
            .release_holding(key, token, self.holders(key), held_for)
    }

    fn join_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        _holders: Holders,
        cap: Option<LineCap>,
    ) -> impl Future<Output = Result<LineJoin, StoreError>> + Send {
        self.store
            .join_line(key, waiter, replacing, self.holders(key), cap)
    }

    fn leave_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        _holders: Holders,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.store.leave_line(key, waiter, self.holders(key))
    }

    fn line_handoffs(&self, key: &LockKey, _holders: Holders) -> Handoffs {
        self.store.line_handoffs(key, self.holders(key))
    }

    fn request_stop(
        &self,
        key: &LockKey,
        from: &Waiter,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        // One channel per key, whichever guard holds it.
        self.store.request_stop(key, from)
    }

    fn stop_requests(&self, key: &LockKey) -> Handoffs {
        self.store.stop_requests(key)
    }

    fn reservation(&self) -> Duration {
        self.store.reservation()
    }
}
