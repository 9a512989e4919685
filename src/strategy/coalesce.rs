//! Defer, keeping one waiting job per key: the latest request, or the first.

use std::future::Future;
use std::time::Duration;

use futures_util::future::Either;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::defer::{JobWaits, back_to_wait, lock_wait_fallback};
use super::job_target::JobTarget;
use super::line_cap::take_place;
use super::{Conflict, ConflictStrategy, Decision};
use crate::error::BoxError;
use crate::guard::Deferred;
use crate::guard::LineCap;
use crate::metric_names;
use crate::queue::{Codec, DelayQueue, Due, JobGroup, JobId, Joining, Json, Keep, PendingStore};

/// Defers a request whose key is held (or over its [rate](crate::throttle::Rate)) like
/// [`Defer`](super::Defer), except that a key has at most one waiting job: a request deferred
/// while the key's job still waits joins that job instead of adding one.
///
/// - [`Coalesce::latest`] keeps the newest request: the job's payload is replaced, and it keeps
///   its id, its due time and its place in the key's line. Ten syncs that arrive while one
///   runs make one more run, with the last one's payload.
/// - [`Coalesce::first`] keeps the oldest: the newer request is dropped as a duplicate.
///
/// The caller learns which job carries its request: [`Deferred::job_id`], with
/// [`Deferred::revision`] above 1 when an older request's payload was replaced (that request
/// will not run), and [`Deferred::duplicate`] when this one was dropped. "Latest" is by arrival:
/// a caller that waited in place first (`Retry::new(..).then(Coalesce::latest(queue))`) and
/// falls through after a newer request was deferred replaces nothing, and gets
/// [`Error::Superseded`](crate::Error::Superseded) naming the job that carries the newer one. A job stops being the
/// key's waiting job when a [`Scheduler`](crate::Scheduler) claims it: a request deferred
/// while it runs starts a new one (one running, one waiting).
///
/// Re-encoding the newest request for the job it joins needs a copy of it: requests are
/// `Clone`.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{LockKey, LockLayer, LockToken, MemoryStore, Outcome};
/// use redefer::lock::{Fencing, Holders, LockStore};
/// use redefer::queue::DelayQueue;
/// use redefer::strategy::Coalesce;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Sync { account: u64, version: u32 }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let queue = DelayQueue::<Sync, _>::new(store.clone(), "syncs")?;
/// let syncs = LockLayer::new(store.clone(), |s: &Sync| Some(format!("account:{}", s.account)))
///     .on_conflict(Coalesce::latest(queue.clone()))
///     .layer(service_fn(|_: Sync| async { Ok::<_, Infallible>(()) }));
///
/// // A sync runs on account 7; three more arrive meanwhile.
/// let holder = LockToken::random();
/// store.acquire(&LockKey::new("account:7")?, holder, Duration::from_secs(30), Holders::One, None, Fencing::On)
///     .await?;
/// let mut deferrals = Vec::new();
/// for version in 1..=3 {
///     let outcome = syncs.clone().oneshot(Sync { account: 7, version }).await?;
///     deferrals.push(outcome.deferred().cloned().unwrap());
/// }
/// // One job carries them: the last one's payload, revision 3.
/// assert!(deferrals.iter().all(|d| d.job_id == deferrals[0].job_id));
/// assert_eq!(deferrals[2].revision, 3);
/// let job = queue.operator().job(&deferrals[0].job_id).await?.unwrap();
/// assert_eq!(job.envelope.unwrap()?.payload.version, 3);
/// assert_eq!(queue.operator().stats().await?.waiting, 1);
/// # Ok(()) }
/// ```
pub struct Coalesce<Req, St, Enc = Json> {
    target: JobTarget<Req, St, Enc>,
    keep: Keep,
}

impl<Req, St, Enc> std::fmt::Debug for Coalesce<Req, St, Enc> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalesce")
            .field("target", &self.target)
            .field("keep", &self.keep)
            .finish()
    }
}

impl<Req, St: Clone, Enc: Clone> Clone for Coalesce<Req, St, Enc> {
    fn clone(&self) -> Self {
        Coalesce {
            target: self.target.clone(),
            keep: self.keep,
        }
    }
}

impl<Req, St, Enc> Coalesce<Req, St, Enc> {
    /// Defers to `queue`, a key's waiting job keeping `keep`'s request.
    pub fn new(queue: DelayQueue<Req, St, Enc>, keep: Keep) -> Self {
        Coalesce {
            target: JobTarget::new(queue),
            keep,
        }
    }

    /// Defers to `queue`, a key's waiting job carrying the newest request.
    pub fn latest(queue: DelayQueue<Req, St, Enc>) -> Self {
        Coalesce::new(queue, Keep::Latest)
    }

    /// Defers to `queue`, a key's waiting job carrying the first request; later ones are
    /// dropped as duplicates while it waits.
    pub fn first(queue: DelayQueue<Req, St, Enc>) -> Self {
        Coalesce::new(queue, Keep::First)
    }

    /// Puts each key's new waiting job in the group `group_of` gives for the request that
    /// stores it, as [`Defer::group`](super::Defer::group) does (a request that joins a waiting
    /// job leaves it in its group).
    pub fn group(self, group_of: impl Fn(&Req) -> Option<JobGroup> + Send + Sync + 'static) -> Self {
        Coalesce {
            target: self.target.grouped(group_of),
            ..self
        }
    }

    /// Caps the key's line, as [`Defer::max_waiting`](super::Defer::max_waiting) does: a
    /// request that joins the key's waiting job adds no one to the line and always passes.
    pub fn max_waiting(self, cap: LineCap) -> Self {
        Coalesce {
            target: self.target.capped(cap),
            ..self
        }
    }
}

impl<Req, St, Enc> ConflictStrategy<Req> for Coalesce<Req, St, Enc>
where
    Req: Serialize + DeserializeOwned + Clone + Send + 'static,
    St: PendingStore,
    Enc: Codec,
{
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        if let Some(back) = back_to_wait(self.target.queue.name(), &conflict, JobWaits::InTheQueue) {
            return Either::Left(back);
        }
        let queue = self.target.queue_for(request);
        let request = request.clone();
        let (keep, line_cap) = (self.keep, self.target.line_cap);
        // A caller that waited in place before deferring arrived that long ago: a newer
        // request's payload already in the job stays. One that meets its first conflict is
        // ordered by its push (concurrent first deferrals: the last stored is the latest).
        let joining = Joining {
            keep,
            debounce: None,
            arrived_ago: if conflict.attempt == 0 {
                Duration::ZERO
            } else {
                conflict.waited
            },
        };
        // Held by a lock, the job's turn in line makes it due, its fallback only if that is
        // never announced. Over a throttle's rate it is due at the next slot, which it books once
        // stored: a request that joins a waiting job books nothing (a booking per request would
        // spend a slot each). Claimed before its booked slot, it waits for it (no attempt used).
        let due = match conflict.next_slot() {
            Some(slot) => Due::In(slot.opens_in() + Duration::from_millis(1)),
            None => Due::In(lock_wait_fallback(&queue, &conflict)),
        };
        Either::Right(async move {
            let encoder = queue.clone();
            let encode = move |id: &JobId| encoder.encode_new(id.clone(), &request);
            let pushed = queue
                .push_pending_encoded(&conflict.waits_for, encode, due, joining)
                .await?;
            if pushed.superseded {
                metric_names::coalesced(keep);
                return Ok(Decision::Superseded { by: pushed.id });
            }
            let mut deferred = Deferred::new(pushed.id.clone(), pushed.due, 0).with_revision(pushed.revision);
            if pushed.dropped {
                deferred = deferred.as_duplicate();
            }
            if pushed.joined {
                metric_names::coalesced(keep);
            } else if let Some(slot) = conflict.next_slot() {
                slot.book_for_job(&pushed.shard, &pushed.id).await?;
            } else if let Some(cap) = line_cap {
                match take_place(&queue, &conflict, cap, &pushed.shard, &pushed.id).await? {
                    Some(full) => return Ok(full),
                    None => deferred = deferred.already_in_line(),
                }
            }
            Ok(Decision::Deferred(deferred.in_queue(pushed.shard)))
        })
    }
}
