//! The service that defers each keyed request as its key's debounced job.

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::Service;

use super::Debounce;
use crate::guard::current_job;
use crate::guard::{
    Deferred, Error, KeyExtractor, Nesting, Outcome, ResponseFuture, guarded_key, take_ready,
};
use crate::metric_names;
use crate::queue::{Codec, DelayQueue, Due, JobId, Joining, Keep, PendingStore};

/// Debounces each request by its key; built by [`DebounceLayer`](super::DebounceLayer).
///
/// A keyed request costs one store round trip (two when it replaces the waiting payload) and
/// answers [`Outcome::Deferred`]: its job's id, its due time so far, and its
/// [`revision`](Deferred::revision). The job's run passes through to the inner service.
pub struct DebounceService<S, Req, St, X, Enc, N> {
    inner: S,
    shared: Arc<Shared<Req, St, X, Enc>>,
    nesting: PhantomData<fn() -> N>,
}

struct Shared<Req, St, X, Enc> {
    queue: DelayQueue<Req, St, Enc>,
    extractor: X,
    debounce: Debounce,
}

impl<S, Req, St, X, Enc, N> DebounceService<S, Req, St, X, Enc, N> {
    pub(super) fn new(inner: S, queue: DelayQueue<Req, St, Enc>, extractor: X, debounce: Debounce) -> Self {
        DebounceService {
            inner,
            shared: Arc::new(Shared {
                queue,
                extractor,
                debounce,
            }),
            nesting: PhantomData,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, Req, St, X, Enc, N> Clone for DebounceService<S, Req, St, X, Enc, N> {
    fn clone(&self) -> Self {
        DebounceService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            nesting: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, Req, St, X, Enc, N> std::fmt::Debug for DebounceService<S, Req, St, X, Enc, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebounceService")
            .field("inner", &self.inner)
            .field("queue", &self.shared.queue)
            .field("debounce", &self.shared.debounce)
            .finish_non_exhaustive()
    }
}

impl<S, Req, St, X, Enc, N> Service<Req> for DebounceService<S, Req, St, X, Enc, N>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    Req: Serialize + DeserializeOwned + Send + 'static,
    St: PendingStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Enc: Codec,
    N: Nesting<S, Req>,
    N::Response: Send + 'static,
    N::Error: Send + 'static,
{
    type Response = Outcome<N::Response>;
    type Error = Error<N::Error>;
    type Future = ResponseFuture<N::Response, N::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(N::ready_error)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let ready = take_ready(&mut self.inner);
        // The debounced job's own run passes: it is the burst's one run.
        if current_job().is_some_and(|job| job.queue == *self.shared.queue.name()) {
            return ResponseFuture::new(N::call(ready, request));
        }
        let key = match guarded_key(&self.shared.extractor, &request) {
            Ok(Some(key)) => key,
            Ok(None) => return ResponseFuture::new(N::call(ready, request)),
            Err(invalid) => return ResponseFuture::new(std::future::ready(Err(Error::InvalidKey(invalid)))),
        };
        let shared = Arc::clone(&self.shared);
        ResponseFuture::new(async move {
            let Debounce { period, max_wait } = shared.debounce;
            let joining = Joining {
                keep: Keep::Latest,
                debounce: Some(shared.debounce),
                arrived_ago: Duration::ZERO,
            };
            let encoder = shared.queue.clone();
            let encode = move |id: &JobId| encoder.encode_new(id.clone(), &request);
            let pushed = shared
                .queue
                .push_pending_encoded(&key, encode, Due::In(period.min(max_wait)), joining)
                .await
                .map_err(|error| Error::Strategy(error.into()))?;
            metric_names::debounced(pushed.joined);
            let deferred = Deferred::new(pushed.id, pushed.due, 0)
                .with_revision(pushed.revision)
                .in_queue(pushed.shard);
            Ok(Outcome::Deferred(deferred))
        })
    }
}
