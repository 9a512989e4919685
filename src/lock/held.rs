//! What a handler can learn about the lock it runs under.

use std::future::Future;

use super::FencingToken;
use super::stop::StopSignal;
use crate::key::LockKey;

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
}

impl PartialEq for HeldLock {
    /// The same holding: key and fence (the stop signal is its state, not its identity).
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.fence == other.fence
    }
}

impl Eq for HeldLock {}

impl HeldLock {
    pub(crate) fn new(key: LockKey, fence: Option<FencingToken>, stop: StopSignal) -> Self {
        HeldLock { key, fence, stop }
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
/// Tasks the handler spawns do not inherit it: pass the value along.
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

/// Runs `work` with `held` as the [`current_lock`].
pub(crate) fn run_holding<F: Future>(held: HeldLock, work: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(held, work)
}
