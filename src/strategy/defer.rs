//! Store the request in a delay queue and run it later.

use std::future::{Future, ready};

use futures_util::future::Either;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Conflict, ConflictStrategy, Decision};
use crate::error::BoxError;
use crate::middleware::Deferred;
use crate::queue::{Codec, DelayQueue, JobId, Json};
use crate::queue::{Due, QueueStore};
use crate::scheduler::current_job;

/// Stores a request whose lock is held in a delay queue, due after the queue's first backoff;
/// a [`Scheduler`](crate::Scheduler) on the queue re-injects it into the same service stack.
///
/// The caller gets [`Outcome::Deferred`](crate::Outcome::Deferred) with the job id and due
/// time, and only once the store has the job: a deferral reported is a deferral stored.
///
/// When a re-injected request meets the lock again, `Defer` stores nothing new: the conflict
/// goes back to the scheduler, which puts the same job back with its attempt counted and a
/// longer backoff, or buries it with "lock still held after N attempts" once the queue's
/// [`RetryPolicy`](crate::queue::RetryPolicy) is spent.
///
/// "Retry briefly, then defer" is one line:
///
/// ```
/// use std::time::Duration;
/// use redefer::{Backoff, MemoryStore, strategy::{Defer, Retry}};
/// use redefer::queue::DelayQueue;
///
/// # fn main() -> Result<(), redefer::KeyError> {
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Charge { order: u64 }
///
/// let queue = DelayQueue::<Charge, _>::new(MemoryStore::new(), "charges")?;
/// let strategy = Retry::new(Backoff::exponential(Duration::from_millis(10), Duration::from_millis(50)))
///     .max_attempts(3)
///     .then(Defer::new(queue));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Defer<Req, St, Enc = Json> {
    queue: DelayQueue<Req, St, Enc>,
}

impl<Req, St: Clone, Enc: Clone> Clone for Defer<Req, St, Enc> {
    fn clone(&self) -> Self {
        Defer {
            queue: self.queue.clone(),
        }
    }
}

impl<Req, St, Enc> Defer<Req, St, Enc> {
    /// Defers to `queue`.
    pub fn new(queue: DelayQueue<Req, St, Enc>) -> Self {
        Defer { queue }
    }
}

impl<Req, St, Enc> ConflictStrategy<Req> for Defer<Req, St, Enc>
where
    Req: Serialize + DeserializeOwned + 'static,
    St: QueueStore,
    Enc: Codec,
{
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        if current_job().is_some_and(|job| job.queue == *self.queue.name()) {
            // Already a job of this queue: its scheduler re-defers it under the same id.
            return Either::Left(ready(Ok(Decision::Reject {
                retry_after: conflict.remaining,
            })));
        }
        // Encode now, while the request is borrowed; the returned future owns the bytes.
        let encoded = self.queue.encode_new(JobId::random(), request);
        let queue = self.queue.clone();
        Either::Right(async move {
            let (id, bytes) = encoded?;
            let delay = queue.policy().backoff.delay(0, &mut rand::rng());
            let scheduled = queue.push_encoded(id, bytes, Due::In(delay)).await?;
            Ok(Decision::Deferred(Deferred::new(scheduled.id, scheduled.due, 0)))
        })
    }
}
