//! What a handler can learn about the lock it runs under.

use std::future::Future;
use std::sync::Arc;

use super::FencingToken;
use super::stop::StopSignal;
use crate::key::LockKey;
use crate::renewal::Lease;

tokio::task_local! {
    static CURRENT: HeldLock;
}

/// The lock a handler runs under: its key and the fencing token of this holding.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HeldLock {
    /// The key the request was locked on.
    pub key: LockKey,
    /// Strictly greater than the token of every earlier holder of the key. Pass it to the
    /// systems the handler writes to, so they can reject writes from a holder that lost the lock.
    /// `None` when the layer runs with [`Fencing::Off`](crate::Fencing::Off).
    pub fence: Option<FencingToken>,
    stop: StopSignal,
    /// Where the key is held: which store, as a mutex or as a permit.
    space: LockSpace,
    /// The holding's lease: live while the lock is surely the holder's.
    lease: Arc<Lease>,
    /// The holding this one runs inside (a lock layer inside another), if any.
    outer: Option<Arc<HeldLock>>,
}

/// Where a key is held: one store (and its clones), as a mutex or as a permit of a semaphore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockSpace {
    pub(crate) store: u64,
    pub(crate) permits: bool,
}

impl PartialEq for HeldLock {
    /// The same holding: key and fence (the stop signal is its state, not its identity).
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.fence == other.fence
    }
}

impl Eq for HeldLock {}

impl HeldLock {
    pub(crate) fn new(
        key: LockKey,
        fence: Option<FencingToken>,
        stop: StopSignal,
        space: LockSpace,
        lease: Arc<Lease>,
    ) -> Self {
        HeldLock {
            key,
            fence,
            stop,
            space,
            lease,
            outer: None,
        }
    }

    /// Runs `work` with this holding as its [`current_lock`]: for a task the handler spawns,
    /// which does not inherit it. A call that `work` makes for the key through the same store
    /// is then known for the holder's own, and refused at once
    /// ([`Error::HeldByCaller`](crate::Error::HeldByCaller)) rather than left to wait for its
    /// own caller.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use redefer::{current_lock, LockLayer, MemoryStore};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let handler = service_fn(|order: u64| async move {
    ///     let lock = current_lock().expect("runs under the lock");
    ///     let fence = tokio::spawn(lock.scope(async { current_lock().unwrap().fence }));
    ///     Ok::<_, Infallible>(fence.await.unwrap())
    /// });
    /// let service = LockLayer::new(MemoryStore::new(), |order: &u64| Some(format!("order:{order}")))
    ///     .layer(handler);
    /// assert!(service.oneshot(42).await.unwrap().done().unwrap().is_some());
    /// # }
    /// ```
    pub fn scope<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        run_holding(self, work)
    }

    /// Whether this holding is still its holder's: its handler has not returned and its
    /// renewal did not give up.
    fn is_live(&self) -> bool {
        self.lease.is_live()
    }

    /// Whether a newer request for the key asked this holder to stop (the
    /// [`Supersede`](crate::strategy::Supersede) strategy): it wants the key, and whatever
    /// this handler would still write is older than what it brings.
    pub fn is_superseded(&self) -> bool {
        self.stop.is_set()
    }

    /// Resolves when a newer request for the key asks this holder to stop; never, under a
    /// layer whose strategy does not [`Supersede`](crate::strategy::Supersede). A handler
    /// selects on it to stop early; the newer request gets the key once the handler returns
    /// (or the lock expires), and its writes carry the higher fencing token.
    ///
    /// ```
    /// use redefer::current_lock;
    ///
    /// async fn sync_account() -> Result<(), std::io::Error> {
    ///     let lock = current_lock().expect("runs under the lock");
    ///     tokio::select! {
    ///         () = lock.superseded() => Ok(()), // a newer sync wants the key: leave it to it
    ///         done = do_the_sync() => done,
    ///     }
    /// }
    /// # async fn do_the_sync() -> Result<(), std::io::Error> { Ok(()) }
    /// ```
    pub async fn superseded(&self) {
        self.stop.set().await;
    }
}

/// The lock the current handler runs under, when called from inside a
/// [`LockService`](crate::LockService) call (its service's `call` and the future it returns).
///
/// Tasks the handler spawns do not inherit it: pass it along with [`HeldLock::scope`].
///
/// ```
/// use std::convert::Infallible;
/// use redefer::{current_lock, LockLayer, MemoryStore, Outcome};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let handler = service_fn(|order: u64| async move {
///     let lock = current_lock().expect("runs under the lock");
///     Ok::<_, Infallible>(lock.fence.expect("fencing is on by default"))
/// });
/// let service = LockLayer::new(MemoryStore::new(), |order: &u64| Some(format!("order:{order}")))
///     .layer(handler);
/// let first = service.clone().oneshot(42).await.unwrap().done().unwrap();
/// let second = service.oneshot(42).await.unwrap().done().unwrap();
/// assert!(second > first); // each holder of order 42 writes with a higher token
/// assert!(current_lock().is_none());
/// # }
/// ```
pub fn current_lock() -> Option<HeldLock> {
    CURRENT.try_with(HeldLock::clone).ok()
}

/// Runs `work` with `held` as the [`current_lock`], inside the holding it runs in, if any.
pub(crate) fn run_holding<F: Future>(held: HeldLock, work: F) -> impl Future<Output = F::Output> {
    run_holdings(vec![held], work)
}

/// Runs `work` under every holding of `held` (the keys of one set, or one key), each inside
/// the one before, the first inside the holding it runs in, if any: the last is its
/// [`current_lock`], and [`current_locks`] lists them all.
pub(crate) async fn run_holdings<F: Future>(held: Vec<HeldLock>, work: F) -> F::Output {
    let mut outer = CURRENT.try_with(|outer| Arc::new(outer.clone())).ok();
    let mut innermost = None;
    for mut holding in held {
        if let Some(previous) = innermost.take() {
            outer = Some(Arc::new(previous));
        }
        holding.outer = outer.take();
        innermost = Some(holding);
    }
    match innermost {
        Some(innermost) => CURRENT.scope(innermost, work).await,
        None => work.await,
    }
}

/// Every lock the current handler runs under, innermost first: each key of a
/// [`LockSetLayer`](crate::lock_set::LockSetLayer)'s set (in the set's order, last key first),
/// then the keys of the lock layers it runs inside. Empty outside any.
///
/// ```
/// use std::convert::Infallible;
/// use redefer::lock::current_locks;
/// use redefer::lock_set::LockSetLayer;
/// use redefer::MemoryStore;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let transfer = service_fn(|_: (u64, u64)| async move {
///     let keys: Vec<String> = current_locks().iter().map(|held| held.key.to_string()).collect();
///     Ok::<_, Infallible>(keys)
/// });
/// let service = LockSetLayer::new(MemoryStore::new(), |&(from, to): &(u64, u64)| {
///     Some(vec![format!("account:{from}"), format!("account:{to}")])
/// })
/// .layer(transfer);
/// let keys = service.oneshot((7, 3)).await.unwrap().done().unwrap();
/// assert_eq!(keys, ["account:7", "account:3"]);
/// # }
/// ```
pub fn current_locks() -> Vec<HeldLock> {
    CURRENT
        .try_with(|innermost| {
            let mut all = Vec::new();
            let mut holding = Some(innermost);
            while let Some(held) = holding {
                all.push(held.clone());
                holding = held.outer.as_deref();
            }
            all
        })
        .unwrap_or_default()
}

/// Whether the current task runs under a live holding of `key` in `space` (its own, or one
/// it runs inside): a call for it would wait for its own caller.
pub(crate) fn held_by_caller(space: LockSpace, key: &LockKey) -> bool {
    CURRENT
        .try_with(|innermost| {
            let mut holding = Some(innermost);
            while let Some(held) = holding {
                if held.space == space && held.key == *key && held.is_live() {
                    return true;
                }
                holding = held.outer.as_deref();
            }
            false
        })
        .unwrap_or(false)
}
