//! The service that runs each request id once.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::Service;

use super::{Begun, IdempotencyStore};
use crate::guard::current_job;
use crate::guard::with_request_id;
use crate::guard::{Duplicate, Error, KeyExtractor, Nesting, Outcome, ResponseFuture, take_ready};
use crate::queue::{Codec, DelayQueue, JobId, QueueName};

/// Runs each request id once; built by [`IdempotencyLayer`](super::IdempotencyLayer).
///
/// A request with an id costs two store round trips (the record, then its end); a duplicate,
/// one.
pub struct IdempotencyService<S, Req, St, X, Enc, N> {
    inner: S,
    shared: Arc<Shared<Req, St, X, Enc>>,
    nesting: PhantomData<fn() -> N>,
}

struct Shared<Req, St, X, Enc> {
    queue: DelayQueue<Req, St, Enc>,
    key: X,
    hold: Duration,
}

impl<S, Req, St, X, Enc, N> IdempotencyService<S, Req, St, X, Enc, N> {
    pub(super) fn new(inner: S, queue: DelayQueue<Req, St, Enc>, key: X, hold: Duration) -> Self {
        IdempotencyService {
            inner,
            shared: Arc::new(Shared { queue, key, hold }),
            nesting: PhantomData,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, Req, St, X, Enc, N> Clone for IdempotencyService<S, Req, St, X, Enc, N> {
    fn clone(&self) -> Self {
        IdempotencyService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            nesting: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, Req, St, X, Enc, N> std::fmt::Debug for IdempotencyService<S, Req, St, X, Enc, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService")
            .field("inner", &self.inner)
            .field("queue", &self.shared.queue)
            .finish_non_exhaustive()
    }
}

impl<S, Req, St, X, Enc, N> Service<Req> for IdempotencyService<S, Req, St, X, Enc, N>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    Req: Serialize + DeserializeOwned + Send + 'static,
    St: IdempotencyStore,
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
        // A job of the queue is the id's record itself: its run goes ahead.
        if current_job().is_some_and(|job| job.queue == *self.shared.queue.name()) {
            return ResponseFuture::new(N::call(ready, request));
        }
        let id = match self
            .shared
            .key
            .lock_key(&request)
            .map(|key| JobId::from_key(&key))
        {
            None => return ResponseFuture::new(N::call(ready, request)),
            Some(Ok(id)) => id,
            Some(Err(invalid)) => {
                return ResponseFuture::new(std::future::ready(Err(Error::InvalidKey(invalid))));
            }
        };
        let shared = Arc::clone(&self.shared);
        ResponseFuture::new(async move {
            let shard = shared.queue.shard_of(&id).clone();
            let store = shared.queue.store();
            match store.begin_request(&shard, &id, shared.hold).await {
                Ok(Begun::New) => {}
                Ok(Begun::Duplicate(seen)) => return Ok(Outcome::Duplicate(Duplicate::new(id, seen))),
                Err(error) => return Err(Error::Store(error)),
            }
            let call = with_request_id(id.clone(), N::call(ready, request));
            let result = while_renewing(store, &shard, &id, shared.hold, call).await;
            // Ran: kept as a finished job would be. Deferred: its job (of this id) is its
            // record now. Failed: forgotten, so that a retry runs.
            let keep = match &result {
                Ok(Outcome::Done(_)) => shared.queue.retention().map(|retention| retention.max_age),
                _ => None,
            };
            if let Err(error) = store.end_request(&shard, &id, keep).await {
                tracing::warn!(%id, %error, "cannot record the request's end; its record runs out with its hold");
            }
            result
        })
    }
}

/// Awaits `call` while renewing request `id`'s running record every third of `hold`: the record
/// lives as long as the request is in progress, and a process that dies leaves it for one
/// `hold` at most. A call done within the first third costs no renewal. The renewals stop when
/// the record no longer says running (the request was deferred: its job is its record now).
async fn while_renewing<St: IdempotencyStore, F: Future>(
    store: &St,
    shard: &QueueName,
    id: &JobId,
    hold: Duration,
    call: F,
) -> F::Output {
    // A hold too short to be renewed in time is renewed as often as a millisecond allows.
    let every = (hold / 3).max(Duration::from_millis(1));
    let renewals = async {
        loop {
            tokio::time::sleep(every).await;
            match store.extend_request(shard, id, hold).await {
                Ok(true) => {}
                Ok(false) => return,
                // Tried again at the next third: the record lives a whole hold.
                Err(error) => tracing::warn!(%id, %error, "cannot renew the request's record"),
            }
        }
    };
    let mut call = std::pin::pin!(call);
    tokio::select! {
        output = &mut call => output,
        () = renewals => call.await,
    }
}
