//! The layer that builds [`DebounceService`]s.

use std::marker::PhantomData;

use tower::Layer;

use super::{Debounce, DebounceService};
use crate::guard::{GuardService, OverGuard, OverHandler};
use crate::queue::{DelayQueue, Json};

/// Debounces each request by its key: it is deferred to `queue` as the key's pending job,
/// which later requests of the burst replace, and runs once, with the latest payload, when the
/// burst ends (or its longest wait is up). A [`Scheduler`](crate::Scheduler) on the queue runs
/// it through the same stack.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{MemoryStore, Outcome, Scheduler};
/// use redefer::debounce::{Debounce, DebounceLayer};
/// use redefer::queue::DelayQueue;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Reindex { document: u64, revision: u32 }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue = DelayQueue::<Reindex, _>::new(MemoryStore::new(), "reindex")?;
/// let debounce = Debounce::new(Duration::from_millis(50), Duration::from_secs(1))?;
/// let reindex = DebounceLayer::new(queue.clone(), |r: &Reindex| Some(format!("doc:{}", r.document)), debounce)
///     .layer(service_fn(|r: Reindex| async move { Ok::<_, Infallible>(r.revision) }));
///
/// let mut last = None;
/// for revision in 1..=5 {
///     let outcome = reindex.clone().oneshot(Reindex { document: 7, revision }).await?;
///     last = outcome.deferred().cloned();
/// }
/// assert_eq!(last.unwrap().revision, 5); // one job carries the five edits
/// assert_eq!(queue.operator().stats().await?.waiting, 1);
/// let scheduler = Scheduler::new(queue.clone(), reindex).start();
/// # scheduler.shutdown().await;
/// # Ok(()) }
/// ```
pub struct DebounceLayer<Req, St, X, Enc = Json, N = OverHandler> {
    pub(super) queue: DelayQueue<Req, St, Enc>,
    pub(super) extractor: X,
    pub(super) debounce: Debounce,
    nesting: PhantomData<fn() -> N>,
}

impl<Req, St, X, Enc> DebounceLayer<Req, St, X, Enc, OverHandler> {
    /// Debounces the requests `extractor` gives a key (the others pass) by `debounce`,
    /// deferring them to `queue`.
    pub fn new(queue: DelayQueue<Req, St, Enc>, extractor: X, debounce: Debounce) -> Self {
        DebounceLayer {
            queue,
            extractor,
            debounce,
            nesting: PhantomData,
        }
    }
}

impl<Req, St, X, Enc, N> DebounceLayer<Req, St, X, Enc, N> {
    /// Wraps another guard's service (a [`LockLayer`](crate::LockLayer)'s, say) rather than a
    /// handler: the stack keeps the guard's [`Outcome`](crate::Outcome) and
    /// [`Error`](crate::Error), so that one [`Scheduler`](crate::Scheduler) runs it.
    pub fn over_guard(self) -> DebounceLayer<Req, St, X, Enc, OverGuard> {
        DebounceLayer {
            queue: self.queue,
            extractor: self.extractor,
            debounce: self.debounce,
            nesting: PhantomData,
        }
    }
}

impl<S, Req, St: Clone, X: Clone, Enc: Clone, N> Layer<S> for DebounceLayer<Req, St, X, Enc, N> {
    type Service = DebounceService<S, Req, St, X, Enc, N>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService::new(inner, self.clone())
    }
}

impl<Req, St: Clone, X: Clone, Enc: Clone, N> Clone for DebounceLayer<Req, St, X, Enc, N> {
    fn clone(&self) -> Self {
        DebounceLayer {
            queue: self.queue.clone(),
            extractor: self.extractor.clone(),
            debounce: self.debounce,
            nesting: PhantomData,
        }
    }
}

impl<Req, St, X, Enc, N> std::fmt::Debug for DebounceLayer<Req, St, X, Enc, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebounceLayer")
            .field("queue", &self.queue)
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}
