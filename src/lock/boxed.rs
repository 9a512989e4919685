//! A name for a lock stack's type.

use tower::util::BoxCloneSyncService;

use crate::guard::{Error, Outcome};

/// A lock stack (a [`LockLayer`](super::LockLayer) over a handler, with whatever layers around
/// it) with its type erased: one name for axum state, a struct field, or a
/// [`Scheduler`](crate::Scheduler)'s service, whatever the strategy, extractor and handler
/// types are. `Req` is the request, `Res` the handler's response, `E` its error.
///
/// Boxing costs one allocation per call; the stack's own types remain usable where they can
/// be named.
///
/// ```
/// use std::convert::Infallible;
/// use redefer::{BoxLockService, LockLayer, MemoryStore, Scheduler};
/// use redefer::queue::DelayQueue;
/// use redefer::strategy::Defer;
/// use tower::{service_fn, Layer};
///
/// #[derive(Clone)]
/// struct AppState {
///     orders: BoxLockService<u64, String, Infallible>,
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let queue = DelayQueue::<u64, _>::new(store.clone(), "orders")?;
/// let stack = LockLayer::new(store, |order: &u64| Some(format!("order:{order}")))
///     .on_conflict(Defer::new(queue.clone()))
///     .layer(service_fn(|order: u64| async move { Ok::<_, Infallible>(format!("order {order}")) }));
/// let state = AppState { orders: BoxLockService::new(stack) };
/// let scheduler = Scheduler::new(queue, state.orders.clone()).start();
/// # scheduler.shutdown().await;
/// # Ok(()) }
/// ```
pub type BoxLockService<Req, Res, E> = BoxCloneSyncService<Req, Outcome<Res>, Error<E>>;
