//! What a handler can learn about the job it runs for.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

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
}

impl Default for RunSignals {
    fn default() -> Self {
        RunSignals(Arc::new(Signals {
            returned: AtomicBool::new(false),
            lock_remaining_ms: AtomicU64::new(u64::MAX),
        }))
    }
}

impl RunSignals {
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
