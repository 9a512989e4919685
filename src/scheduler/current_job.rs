//! What a handler can learn about the job it runs for.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::lock::FencingToken;
use crate::queue::{JobId, QueueName};

tokio::task_local! {
    static CURRENT: JobScope;
}

/// What a re-injected request's task carries: the job, and the flag the lock layer raises
/// when the handler has returned.
struct JobScope {
    job: CurrentJob,
    returned: HandlerReturned,
}

/// Raised once the handler of a job's run has returned: from then on the run is finishing
/// (the lock being released), and the scheduler lets it finish instead of cancelling it.
#[derive(Debug, Clone, Default)]
pub(crate) struct HandlerReturned(Arc<AtomicBool>);

impl HandlerReturned {
    fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Resolves when `stop` does, unless the handler has returned by then: then never.
    pub(crate) async fn unless_returned(&self, stop: impl Future<Output = ()>) {
        stop.await;
        if self.is_raised() {
            std::future::pending::<()>().await;
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

/// Runs `work` with `job` as the [`current_job`]; `returned` is raised by
/// [`handler_returned`] inside it.
pub(crate) fn run_for_job<F: Future>(
    job: CurrentJob,
    returned: HandlerReturned,
    work: F,
) -> impl Future<Output = F::Output> {
    CURRENT.scope(JobScope { job, returned }, work)
}

/// Called by the lock layer when its handler returned: when the request runs for a job, the
/// job's run is now only finishing.
pub(crate) fn handler_returned() {
    let _ = CURRENT.try_with(|scope| scope.returned.raise());
}
