//! The layer that builds [`IdempotencyService`]s.

use std::marker::PhantomData;
use std::time::Duration;

use tower::Layer;

use super::IdempotencyService;
use crate::guard::{GuardService, OverGuard, OverHandler};
use crate::queue::{DelayQueue, Json};

/// Runs each request id once over its whole life (see [the module](super)).
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{LockLayer, MemoryStore, Outcome};
/// use redefer::idempotency::{IdempotencyLayer, Seen};
/// use redefer::queue::{DelayQueue, Retention};
/// use redefer::strategy::Defer;
/// use tower::{service_fn, Layer, ServiceBuilder, ServiceExt};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Webhook { delivery: String, order: u64 }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let queue = DelayQueue::<Webhook, _>::new(store.clone(), "webhooks")?
///     .retain_finished(Retention::new(10_000, Duration::from_secs(24 * 3600)));
/// let hooks = ServiceBuilder::new()
///     .layer(IdempotencyLayer::new(queue.clone(), |hook: &Webhook| Some(hook.delivery.clone())).over_guard())
///     .layer(LockLayer::new(store, |hook: &Webhook| Some(format!("order:{}", hook.order))).on_conflict(Defer::new(queue)))
///     .service(service_fn(|_: Webhook| async { Ok::<_, Infallible>(()) }));
///
/// let hook = Webhook { delivery: "d-1".into(), order: 7 };
/// assert!(hooks.clone().oneshot(hook.clone()).await?.done().is_some());
/// // Delivered again: answered as a duplicate of the finished one, not run.
/// match hooks.oneshot(hook).await? {
///     Outcome::Duplicate(duplicate) => assert_eq!(duplicate.seen, Seen::Finished),
///     other => panic!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
pub struct IdempotencyLayer<Req, St, X, Enc = Json, N = OverHandler> {
    pub(super) queue: DelayQueue<Req, St, Enc>,
    pub(super) key: X,
    pub(super) hold: Duration,
    nesting: PhantomData<fn() -> N>,
}

/// How long the record of a request in progress lives unless renewed: the guard renews it every
/// third of this while the request runs (or waits in place for its key), so a process that dies
/// mid-run leaves the id taken for this long at most (it is then new again).
pub const DEFAULT_HOLD: Duration = Duration::from_secs(10);

impl<Req, St, X, Enc> IdempotencyLayer<Req, St, X, Enc, OverHandler> {
    /// Runs each request `key` gives an id (any text; [`JobId::from_key`](crate::queue::JobId::from_key))
    /// once, recording it on `queue` (the queue the stack defers to); requests without one pass.
    pub fn new(queue: DelayQueue<Req, St, Enc>, key: X) -> Self {
        IdempotencyLayer {
            queue,
            key,
            hold: DEFAULT_HOLD,
            nesting: PhantomData,
        }
    }
}

impl<Req, St, X, Enc, N> IdempotencyLayer<Req, St, X, Enc, N> {
    /// How long the record of a request in progress lives unless renewed (10 s by default):
    /// renewed every third of it while the request runs, it bounds how long an id stays taken
    /// after its process died mid-run.
    pub fn hold(self, hold: Duration) -> Self {
        IdempotencyLayer { hold, ..self }
    }

    /// Wraps another guard's service (a [`LockLayer`](crate::LockLayer)'s): the stack keeps
    /// its [`Outcome`](crate::Outcome) and [`Error`](crate::Error).
    pub fn over_guard(self) -> IdempotencyLayer<Req, St, X, Enc, OverGuard> {
        IdempotencyLayer {
            queue: self.queue,
            key: self.key,
            hold: self.hold,
            nesting: PhantomData,
        }
    }
}

impl<S, Req, St: Clone, X: Clone, Enc: Clone, N> Layer<S> for IdempotencyLayer<Req, St, X, Enc, N> {
    type Service = IdempotencyService<S, Req, St, X, Enc, N>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService::new(inner, self.clone())
    }
}

impl<Req, St: Clone, X: Clone, Enc: Clone, N> Clone for IdempotencyLayer<Req, St, X, Enc, N> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            queue: self.queue.clone(),
            key: self.key.clone(),
            hold: self.hold,
            nesting: PhantomData,
        }
    }
}

impl<Req, St, X, Enc, N> std::fmt::Debug for IdempotencyLayer<Req, St, X, Enc, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("queue", &self.queue)
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}
