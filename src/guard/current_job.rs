//! What a handler can learn about the job it runs for.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::Waiter;
use super::job_slot::JobSlot;
use crate::queue::{JobId, QueueName};
use crate::token::FencingToken;

tokio::task_local! {
    static CURRENT: JobScope;
}

/// What a re-injected request's task carries: the job, and what the lock layer tells its
/// scheduler about the run.
struct JobScope {
    job: CurrentJob,
    signals: RunSignals,
}

/// What the lock layer tells the scheduler about a job's run, beyond its outcome: that the
/// handler has returned (from then on the run is only finishing, its lock being released, and
/// the scheduler lets it finish instead of cancelling it), and how long the lock it met was
/// still held for (a holder that died frees it then: the job must look again by that time).
#[derive(Debug, Clone)]
pub(crate) struct RunSignals(Arc<Signals>);

#[derive(Debug)]
struct Signals {
    returned: AtomicBool,
    /// Milliseconds; `u64::MAX` for none.
    lock_remaining_ms: AtomicU64,
    /// The scheduler's slot the run holds (none when the run is not a scheduler's).
    slot: Option<JobSlot>,
    /// A throttle admitted the run at its rate: the run starts now or goes back to the queue,
    /// it does not wait in place for a lock inside the throttle (its start would drift off the
    /// rate).
    paced: AtomicBool,
}

impl RunSignals {
    /// The signals of a run in `slot`.
    pub(crate) fn in_slot(slot: JobSlot) -> Self {
        RunSignals(Arc::new(Signals {
            returned: AtomicBool::new(false),
            lock_remaining_ms: AtomicU64::new(u64::MAX),
            slot: Some(slot),
            paced: AtomicBool::new(false),
        }))
    }

    /// Gives the run's slot back to its scheduler: the handler has returned.
    pub(crate) fn free_slot(&self) {
        if let Some(slot) = &self.0.slot {
            slot.free();
        }
    }

    fn is_returned(&self) -> bool {
        self.0.returned.load(Ordering::Acquire)
    }

    /// Resolves when `stop` does, unless the handler has returned by then: then never.
    pub(crate) async fn unless_returned(&self, stop: impl Future<Output = ()>) {
        stop.await;
        if self.is_returned() {
            std::future::pending::<()>().await;
        }
    }

    /// How long the lock the run met was still held for, if it met one with a TTL.
    pub(crate) fn lock_remaining(&self) -> Option<Duration> {
        match self.0.lock_remaining_ms.load(Ordering::Acquire) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
}

/// The job a request was re-injected for by a [`Scheduler`](crate::Scheduler).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CurrentJob {
    /// The queue the job came from.
    pub queue: QueueName,
    /// The physical queue it lives on: `queue` itself, or one of its shards.
    pub shard: QueueName,
    /// The job's id: the same across its attempts, so handlers can use it to deduplicate.
    pub id: JobId,
    /// How many attempts failed before this one.
    pub attempt: u32,
    /// When this attempt was due, by the store's clock: the start of handling minus this is
    /// the promotion lag.
    pub due: std::time::SystemTime,
    /// The job fencing token of this run: strictly higher than that of any earlier run of the
    /// job. Pass it with the handler's writes so that a downstream store refuses those of a
    /// stale run (one whose lease ran out, say in a paused process, while another claimer runs
    /// the job), as with the lock's [`HeldLock::fence`](crate::HeldLock).
    pub fence: FencingToken,
}

/// The job the current request runs for, when a [`Scheduler`](crate::Scheduler) re-injected it;
/// `None` for requests that came from elsewhere.
///
/// Delivery is at-least-once: a handler with side effects can use the job id, the same across
/// attempts, to do them once.
///
/// ```
/// use std::convert::Infallible;
/// use redefer::current_job;
/// use tower::service_fn;
///
/// let handler = service_fn(|charge: u64| async move {
///     let idempotency_key = match current_job() {
///         Some(job) => format!("job-{}", job.id),     // re-injected: stable across attempts
///         None => format!("direct-{charge}"),         // a live request
///     };
///     Ok::<_, Infallible>(idempotency_key)
/// });
/// # let _ = handler;
/// ```
pub fn current_job() -> Option<CurrentJob> {
    CURRENT.try_with(|scope| scope.job.clone()).ok()
}

/// The current job when it is one of `queue`'s (a guard or strategy of that queue lets its own
/// jobs through, or sends them back to it); `None` for any other request.
pub(crate) fn current_job_of(queue: &QueueName) -> Option<CurrentJob> {
    CURRENT
        .try_with(|scope| (scope.job.queue == *queue).then(|| scope.job.clone()))
        .ok()
        .flatten()
}

/// The current job as a waiter in a key's line, when the request runs for one.
pub(crate) fn current_job_waiter() -> Option<Waiter> {
    CURRENT
        .try_with(|scope| Waiter::job(&scope.job.shard, &scope.job.id))
        .ok()
}

/// Runs `work` with `job` as the [`current_job`]; the lock layer inside it reports to
/// `signals` ([`handler_returned`], [`lock_met`]).
pub(crate) fn run_for_job<F: Future>(
    job: CurrentJob,
    signals: RunSignals,
    work: F,
) -> impl Future<Output = F::Output> {
    CURRENT.scope(JobScope { job, signals }, work)
}

/// Called by the lock layer when its handler returned: when the request runs for a job, the
/// job's run is now only finishing.
pub(crate) fn handler_returned() {
    let _ = CURRENT.try_with(|scope| scope.signals.0.returned.store(true, Ordering::Release));
}

/// Called by the lock layer when the request met its lock held for `remaining` more.
pub(crate) fn lock_met(remaining: Option<Duration>) {
    let ms = remaining.map_or(u64::MAX, |remaining| {
        u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX - 1)
    });
    let _ = CURRENT.try_with(|scope| scope.signals.0.lock_remaining_ms.store(ms, Ordering::Release));
}

/// Whether the current job may wait for its key in place (a free place in its scheduler,
/// `job_slot.rs`, and no throttle's rate to keep): `false` outside a scheduler's run.
pub(crate) fn may_wait_in_place() -> bool {
    CURRENT
        .try_with(|scope| {
            let signals = &scope.signals.0;
            !signals.paced.load(Ordering::Acquire) && signals.slot.as_ref().is_some_and(JobSlot::take_place)
        })
        .unwrap_or(false)
}

/// Called by a throttle that admitted the current request at its rate.
pub(crate) fn admitted_at_rate() {
    let _ = CURRENT.try_with(|scope| scope.signals.0.paced.store(true, Ordering::Release));
}

/// Runs `wait` out of the current job's scheduler slot when the job has a place to wait in;
/// as it is otherwise (a request, or a job that waits in its slot). `None` when the job's
/// scheduler began to stop before `wait` ended.
pub(crate) async fn out_of_slot<F: Future>(wait: F) -> Option<F::Output> {
    let signals = CURRENT.try_with(|scope| scope.signals.clone()).ok();
    match signals.as_ref().and_then(|signals| signals.0.slot.as_ref()) {
        Some(slot) => slot.out_of_slot(wait).await,
        None => Some(wait.await),
    }
}
