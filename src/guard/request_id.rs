//! The id of the request being handled, for the strategies behind an idempotency guard: a
//! request deferred there is stored under it.

use std::future::Future;

use crate::queue::JobId;

tokio::task_local! {
    static REQUEST_ID: JobId;
}

/// The id the idempotency guard gave the request being handled, if any.
pub(crate) fn current_request_id() -> Option<JobId> {
    REQUEST_ID.try_with(JobId::clone).ok()
}

/// Runs `work` with `id` as the [`current_request_id`].
pub(crate) fn with_request_id<F: Future>(id: JobId, work: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, work)
}
