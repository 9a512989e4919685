//! What a handler can learn about the job it runs for.

use std::future::Future;

use crate::queue::{JobId, QueueName};

tokio::task_local! {
    static CURRENT: CurrentJob;
}

/// The job a request was re-injected for by a [`Scheduler`](crate::Scheduler).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CurrentJob {
    /// The queue the job came from.
    pub queue: QueueName,
    /// The job's id: the same across its attempts, so handlers can use it to deduplicate.
    pub id: JobId,
    /// How many attempts failed before this one.
    pub attempt: u32,
    /// When this attempt was due, by the store's clock: the start of handling minus this is
    /// the promotion lag.
    pub due: std::time::SystemTime,
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
    CURRENT.try_with(CurrentJob::clone).ok()
}

/// Runs `work` with `job` as the [`current_job`].
pub(crate) fn run_for_job<F: Future>(job: CurrentJob, work: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(job, work)
}
