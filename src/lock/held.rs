//! What a handler can learn about the lock it runs under.

use std::future::Future;

use super::FencingToken;
use crate::key::LockKey;

tokio::task_local! {
    static CURRENT: HeldLock;
}

/// The lock a handler runs under: its key and the fencing token of this holding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// The key the request was locked on.
    pub key: LockKey,
    /// Strictly greater than the token of every earlier holder of the key. Pass it to the
    /// systems the handler writes to, so they can reject writes from a holder that lost the lock.
    /// `None` when the layer runs with [`Fencing::Off`](crate::Fencing::Off).
    pub fence: Option<FencingToken>,
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
///     let fence = lock.fence.expect("fencing is on by default");
///     Ok::<_, Infallible>(format!("order {order} under fence {fence}"))
/// });
/// let service = LockLayer::new(MemoryStore::new(), |order: &u64| Some(format!("order:{order}")))
///     .layer(handler);
/// let outcome = service.oneshot(42).await.unwrap();
/// assert_eq!(outcome.done().unwrap(), "order 42 under fence 1");
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
