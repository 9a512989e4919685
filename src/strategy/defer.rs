//! Store the request in a delay queue and run it later.

use std::future::{Future, ready};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::Either;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::job_target::JobTarget;
use super::line_cap::take_place;
use super::{Conflict, ConflictStrategy, Decision};
use crate::error::BoxError;
use crate::guard::Deferred;
use crate::guard::LineCap;
use crate::guard::current_request_id;
use crate::guard::{current_job_of, may_wait_in_place};
use crate::queue::{
    Codec, DelayQueue, JobGroup, JobId, Json, QueueError, QueueName, RawJobState, RetryPolicy,
};
use crate::queue::{Due, QueueStore};

/// Stores a request whose lock is held (or whose key is over its
/// [rate](crate::throttle::Rate)) in a delay queue.
///
/// Held by a lock, the job goes in the key's line: when
/// the holder releases the key, it is reserved for the first in line and that job is made due
/// at once; a [`Scheduler`](crate::Scheduler) on the queue re-injects it into the same service
/// stack, where it takes the key. Its due time is only a fallback (see
/// [`RetryPolicy::lock_wait_fallback`](crate::queue::RetryPolicy::lock_wait_fallback)), should
/// its turn never be announced.
///
/// Over a throttle's rate, the job is due at the key's next free slot, booked for it: N
/// requests deferred in a row run at N consecutive slots, in arrival order, each admitted at its
/// slot without a second check.
///
/// The caller gets [`Outcome::Deferred`](crate::Outcome::Deferred) with the job id and due
/// time, and only once the store has the job: a deferral reported is a deferral stored.
///
/// When a re-injected request meets the lock again, `Defer` stores nothing new: the job goes
/// back to wait in line, using no attempt, until the queue's
/// [`max_lock_wait`](crate::queue::RetryPolicy::max_lock_wait) buries it with
/// "waited D for lock K".
///
/// With [`job_id`](Defer::job_id), a request carries its own job id (a webhook's delivery id):
/// deferring it again while its job exists stores nothing and returns the existing deferral,
/// marked [`duplicate`](crate::Deferred::duplicate).
///
/// "Retry briefly, then defer" is one line:
///
/// ```
/// use std::time::{Duration, SystemTime};
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
pub struct Defer<Req, St, Enc = Json> {
    target: JobTarget<Req, St, Enc>,
    job_id: Option<Arc<JobIdOf<Req>>>,
}

/// Derives a request's idempotency key.
type JobIdOf<Req> = dyn Fn(&Req) -> Option<String> + Send + Sync;

impl<Req, St, Enc> std::fmt::Debug for Defer<Req, St, Enc> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Defer")
            .field("target", &self.target)
            .field("job_id", &self.job_id.is_some())
            .finish()
    }
}

impl<Req, St: Clone, Enc: Clone> Clone for Defer<Req, St, Enc> {
    fn clone(&self) -> Self {
        Defer {
            target: self.target.clone(),
            job_id: self.job_id.clone(),
        }
    }
}

impl<Req, St, Enc> Defer<Req, St, Enc> {
    /// Defers to `queue`, each request under a fresh random job id.
    pub fn new(queue: DelayQueue<Req, St, Enc>) -> Self {
        Defer {
            target: JobTarget::new(queue),
            job_id: None,
        }
    }

    /// Takes the job id from the request's key when `job_id` gives one (any UTF-8 text, made
    /// an id by [`JobId::from_key`]; a random id when it gives none), so that deferring the
    /// same request twice stores it once. A key too long to be an id fails the deferral with
    /// a [`KeyError`](crate::KeyError) (in [`Error::Strategy`](crate::Error::Strategy)): it is
    /// never replaced by a random id, which would lose the deduplication.
    ///
    /// ```
    /// use redefer::{MemoryStore, strategy::Defer};
    /// use redefer::queue::DelayQueue;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Webhook { delivery: String, order: u64 }
    ///
    /// let queue = DelayQueue::<Webhook, _>::new(MemoryStore::new(), "webhooks")?;
    /// let defer = Defer::new(queue).job_id(|hook: &Webhook| Some(hook.delivery.clone()));
    /// # let _ = defer;
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn job_id(self, job_id: impl Fn(&Req) -> Option<String> + Send + Sync + 'static) -> Self {
        Defer {
            job_id: Some(Arc::new(job_id)),
            ..self
        }
    }

    /// Puts each request's job in the group `group_of` gives (its tenant; none: ungrouped), so
    /// that once due it waits in its group's turn, not behind another group's backlog (see
    /// [`JobGroup`]).
    ///
    /// ```
    /// use redefer::{MemoryStore, strategy::Defer};
    /// use redefer::queue::{DelayQueue, JobGroup};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Export { tenant: String, report: u64 }
    ///
    /// let queue = DelayQueue::<Export, _>::new(MemoryStore::new(), "exports")?;
    /// let defer = Defer::new(queue).group(|export: &Export| JobGroup::new(export.tenant.clone()).ok());
    /// # let _ = defer;
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn group(self, group_of: impl Fn(&Req) -> Option<JobGroup> + Send + Sync + 'static) -> Self {
        Defer {
            target: self.target.grouped(group_of),
            ..self
        }
    }

    /// Caps the key's line: a request that finds `cap.max` waiting is refused with
    /// [`Error::LineFull`](crate::Error::LineFull) (nothing stored), or makes room by dropping
    /// the oldest waiting jobs to the dead-letter set ([`LineCap::drop_oldest`]). For a lock or
    /// a semaphore; a throttle's deferrals wait for booked slots, not in a line.
    ///
    /// ```
    /// use redefer::{MemoryStore, guard::LineCap, strategy::Defer};
    /// use redefer::queue::DelayQueue;
    ///
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "orders")?;
    /// let defer = Defer::new(queue).max_waiting(LineCap::new(100).drop_oldest());
    /// # let _ = defer;
    /// # Ok::<(), redefer::KeyError>(())
    /// ```
    pub fn max_waiting(self, cap: LineCap) -> Self {
        Defer {
            target: self.target.capped(cap),
            ..self
        }
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
        if let Some(back) = back_to_wait(
            self.target.queue.name(),
            &conflict,
            JobWaits::in_place(
                self.target.queue.policy(),
                lock_wait_fallback(&self.target.queue, &conflict),
            ),
        ) {
            return Either::Left(back);
        }
        // Encode now, while the request is borrowed; the returned future owns the bytes.
        // Its own key's id; else the id an idempotency guard gave the request (its job is then
        // the id's record); else a fresh one.
        let id = match self.job_id.as_ref().and_then(|job_id| job_id(request)) {
            Some(key) => JobId::from_key(&key),
            None => Ok(current_request_id().unwrap_or_else(JobId::random)),
        };
        let encoded: Result<_, BoxError> = match id {
            Ok(id) => self.target.queue.encode_new(id, request).map_err(Into::into),
            Err(invalid) => Err(invalid.into()),
        };
        let queue = self.target.queue_for(request);
        let fallback = lock_wait_fallback(&queue, &conflict);
        let line_cap = self.target.line_cap;
        Either::Right(async move {
            let (id, bytes) = encoded?;
            let shard = queue.shard_of(&id).clone();
            // Over a throttle's rate, the job is due at the slot booked for it; held by a lock,
            // its turn in line makes it due, and the fallback only if that is never announced.
            let due = match conflict.next_slot() {
                Some(slot) => Due::At(whole_millis_up(slot.book_for_job(&shard, &id).await?.at)),
                None => Due::In(fallback),
            };
            let deferred = match queue.push_encoded(id, bytes, due).await {
                Ok(scheduled) => {
                    let deferred = Deferred::new(scheduled.id.clone(), scheduled.due, 0);
                    match line_cap {
                        Some(cap) => match take_place(&queue, &conflict, cap, &shard, &scheduled.id).await? {
                            Some(full) => return Ok(full),
                            None => deferred.already_in_line(),
                        },
                        None => deferred,
                    }
                }
                Err(QueueError::DuplicateId(id)) => existing_deferral(&queue, id).await?,
                Err(error) => return Err(error.into()),
            };
            Ok(Decision::Deferred(deferred.in_queue(shard)))
        })
    }
}

/// Where a job that meets its lock held waits for its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JobWaits {
    /// In line where it is, out of its scheduler slot, looking again every `look_again` (when
    /// it would from the queue) for `at_most` in all, then from the queue (`Defer`). A turn
    /// heard meanwhile costs a wake-up and an attempt, where one in the queue costs a
    /// promotion, a claim and a run: 300 overlapping sets deferred kept their keys about half
    /// as busy as callers waiting in place when each turn went through the queue, and as busy
    /// waiting in place for 10 s (BENCHMARKS.md, "Deferred sets").
    InPlace { look_again: Duration, at_most: Duration },
    /// From the queue at once: there it is the key's waiting job again, which later requests
    /// join (`Coalesce`).
    InTheQueue,
}

impl JobWaits {
    /// In place as `policy` allows, looking again every `fallback`.
    fn in_place(policy: &RetryPolicy, fallback: Duration) -> Self {
        JobWaits::InPlace {
            look_again: fallback,
            at_most: policy.lock_wait_in_place(fallback),
        }
    }
}

/// A job of `queue` that meets its key again waits (as `waits` says; the scheduler puts it
/// back using no attempt), stored nothing new: `None` for a request that is not such a job.
pub(super) fn back_to_wait(
    queue: &QueueName,
    conflict: &Conflict,
    waits: JobWaits,
) -> Option<impl Future<Output = Result<Decision, BoxError>> + Send + use<>> {
    let job = current_job_of(queue)?;
    Some(match conflict.next_slot().cloned() {
        // Over a throttle's rate: the job books its slot and goes back to wait for it.
        Some(slot) => Either::Right(async move {
            let booking = slot.book_for_job(&job.shard, &job.id).await?;
            Ok(Decision::BackToQueue {
                retry_after: Some(booking.wait),
            })
        }),
        // Held by a lock: it waits in line where it is, woken by its turn, for a while (out
        // of its scheduler slot, when it has a place to wait in); then it goes back to wait in
        // line from the queue, under the same id.
        None => Either::Left(ready(Ok(match waits {
            JobWaits::InPlace { look_again, at_most } if at_most > conflict.waited && may_wait_in_place() => {
                Decision::RetryAfter(look_again.min(at_most - conflict.waited))
            }
            _ => Decision::BackToQueue {
                retry_after: conflict.retry_after,
            },
        }))),
    })
}

/// When a job deferred by a lock conflict runs should its turn in line never be announced.
pub(super) fn lock_wait_fallback<Req, St, Enc>(
    queue: &DelayQueue<Req, St, Enc>,
    conflict: &Conflict,
) -> Duration {
    queue.policy().lock_wait_fallback(
        conflict.retry_after,
        // A holder's TTL bounds the wait of the first in line, whose key it is should the
        // holder die; a reservation's end is the next handoff, not a free key.
        conflict
            .held()
            .and_then(|held| held.remaining.filter(|_| !held.reserved && held.ahead == 0)),
        Duration::ZERO,
    )
}

/// `at` rounded up to a whole millisecond: due times are kept in milliseconds, and a job due
/// at its slot's millisecond rounded down would be claimed before its slot, only to wait for it.
fn whole_millis_up(at: SystemTime) -> SystemTime {
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let rest = since.subsec_nanos() % 1_000_000;
    if rest == 0 {
        at
    } else {
        at + Duration::from_nanos(u64::from(1_000_000 - rest))
    }
}

/// The deferral already stored under `id`, marked as a duplicate.
async fn existing_deferral<Req, St, Enc>(
    queue: &DelayQueue<Req, St, Enc>,
    id: JobId,
) -> Result<Deferred, QueueError>
where
    Req: Serialize + DeserializeOwned,
    St: QueueStore,
    Enc: Codec,
{
    let job = queue.read_job(&id).await?;
    let (due, attempt) = match &job {
        Some(job) => (
            match job.state {
                RawJobState::Delayed { due } => due,
                _ => SystemTime::now(),
            },
            job.envelope
                .as_ref()
                .and_then(|envelope| envelope.as_ref().ok())
                .map_or(0, |envelope| envelope.attempt),
        ),
        // Gone between the push and this look (just finished): nothing of it is left to run.
        None => (SystemTime::now(), 0),
    };
    Ok(Deferred::new(id, due, attempt).as_duplicate())
}
