//! The service that defers each keyed request as its key's debounced job: what the debounce
//! guard does with a request.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::Service;

use super::{Debounce, DebounceLayer};
use crate::error::KeyError;
use crate::guard::current_job_of;
use crate::guard::{Deferred, Error, Guard, GuardService, KeyExtractor, Nesting, Outcome, guarded_key};
use crate::key::LockKey;
use crate::metric_names;
use crate::queue::{Codec, Due, JobId, Joining, Keep, PendingStore};
use crate::sealed::SealedGuard;

/// Debounces each request by its key; built by [`DebounceLayer`].
///
/// A keyed request costs one store round trip (two when it replaces the waiting payload) and
/// answers [`Outcome::Deferred`]: its job's id, its due time so far, and its
/// [`revision`](Deferred::revision). The job's run passes through to the inner service.
pub type DebounceService<S, Req, St, X, Enc, N> = GuardService<S, DebounceLayer<Req, St, X, Enc, N>>;

impl<Req, St, X, Enc, N> SealedGuard for DebounceLayer<Req, St, X, Enc, N> {}

impl<S, Req, St, X, Enc, N> Guard<S, Req> for DebounceLayer<Req, St, X, Enc, N>
where
    S: Service<Req> + Send + 'static,
    Req: Serialize + DeserializeOwned + Send + 'static,
    St: PendingStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Enc: Codec,
    N: Nesting<S, Req>,
    N::Response: Send + 'static,
    N::Error: Send + 'static,
{
    type Over = N;
    type Key = LockKey;

    fn key(&self, request: &Req) -> Result<Option<LockKey>, KeyError> {
        // The debounced job's own run passes: it is the burst's one run.
        if current_job_of(self.queue.name()).is_some() {
            return Ok(None);
        }
        guarded_key(&self.extractor, request)
    }

    async fn call(
        self: Arc<Self>,
        key: LockKey,
        _inner: S,
        request: Req,
    ) -> Result<Outcome<N::Response>, Error<N::Error>> {
        let Debounce { period, max_wait } = self.debounce;
        let joining = Joining {
            keep: Keep::Latest,
            debounce: Some(self.debounce),
            arrived_ago: Duration::ZERO,
        };
        let encoder = self.queue.clone();
        let encode = move |id: &JobId| encoder.encode_new(id.clone(), &request);
        let pushed = self
            .queue
            .push_pending_encoded(&key, encode, Due::In(period.min(max_wait)), joining)
            .await
            .map_err(|error| Error::Strategy(error.into()))?;
        metric_names::debounced(pushed.joined);
        let deferred = Deferred::new(pushed.id, pushed.due, 0)
            .with_revision(pushed.revision)
            .in_queue(pushed.shard);
        Ok(Outcome::Deferred(deferred))
    }
}
