//! The service that runs each request id once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::Service;

use super::{Begun, IdempotencyLayer, IdempotencyStore};
use crate::error::KeyError;
use crate::guard::{Duplicate, Error, Guard, GuardService, KeyExtractor, Nesting, Outcome};
use crate::guard::{current_job_of, with_request_id};
use crate::lock::LockToken;
use crate::queue::{Codec, JobId, QueueName};
use crate::sealed::SealedGuard;

/// Runs each request id once; built by [`IdempotencyLayer`].
///
/// A request with an id costs two store round trips (the record, then its end); a duplicate,
/// one.
pub type IdempotencyService<S, Req, St, X, Enc, N> = GuardService<S, IdempotencyLayer<Req, St, X, Enc, N>>;

impl<Req, St, X, Enc, N> SealedGuard for IdempotencyLayer<Req, St, X, Enc, N> {}

impl<S, Req, St, X, Enc, N> Guard<S, Req> for IdempotencyLayer<Req, St, X, Enc, N>
where
    S: Service<Req> + Send + 'static,
    Req: Serialize + DeserializeOwned + Send + 'static,
    St: IdempotencyStore,
    X: KeyExtractor<Req> + Send + Sync + 'static,
    Enc: Codec,
    N: Nesting<S, Req>,
    N::Response: Send + 'static,
    N::Error: Send + 'static,
{
    type Over = N;
    type Key = JobId;

    fn key(&self, request: &Req) -> Result<Option<JobId>, KeyError> {
        // A job of the queue is the id's record itself: its run goes ahead.
        if current_job_of(self.queue.name()).is_some() {
            return Ok(None);
        }
        self.key
            .lock_key(request)
            .map(|key| JobId::from_key(&key))
            .transpose()
    }

    async fn call(
        self: Arc<Self>,
        id: JobId,
        inner: S,
        request: Req,
    ) -> Result<Outcome<N::Response>, Error<N::Error>> {
        let shard = self.queue.shard_of(&id).clone();
        let store = self.queue.store();
        // The request's own token: its record is renewed and ended by it alone.
        let token = LockToken::random();
        match store.begin_request(&shard, &id, token, self.hold).await {
            Ok(Begun::New) => {}
            Ok(Begun::Duplicate(seen)) => return Ok(Outcome::Duplicate(Duplicate::new(id, seen))),
            Err(error) => return Err(Error::Store(error)),
        }
        let call = with_request_id(id.clone(), N::call(inner, request));
        let result = while_renewing(store, &shard, &id, token, self.hold, call).await;
        // Ran: kept as a finished job would be. Deferred: its job (of this id) is its
        // record now. Failed: forgotten, so that a retry runs.
        let keep = match &result {
            Ok(Outcome::Done(_)) => self.queue.retention().map(|retention| retention.max_age),
            _ => None,
        };
        if let Err(error) = store.end_request(&shard, &id, token, keep).await {
            tracing::warn!(%id, %error, "cannot record the request's end; its record runs out with its hold");
        }
        result
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
    token: LockToken,
    hold: Duration,
    call: F,
) -> F::Output {
    // A hold too short to be renewed in time is renewed as often as a millisecond allows.
    let every = (hold / 3).max(Duration::from_millis(1));
    let renewals = async {
        loop {
            tokio::time::sleep(every).await;
            match store.extend_request(shard, id, token, hold).await {
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
