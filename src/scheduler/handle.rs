//! The handle of a scheduler running on a task of its own.

use std::panic::resume_unwind;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::SchedulerReport;

/// Shuts down a scheduler started with [`Scheduler::start`](super::Scheduler::start).
///
/// Dropping the handle leaves the scheduler running until the runtime shuts down.
#[derive(Debug)]
pub struct SchedulerHandle {
    stop: CancellationToken,
    task: JoinHandle<SchedulerReport>,
}

impl SchedulerHandle {
    pub(super) fn new(stop: CancellationToken, task: JoinHandle<SchedulerReport>) -> Self {
        SchedulerHandle { stop, task }
    }

    /// Stops claiming, lets running jobs finish within the grace period, gives the unfinished
    /// ones back to the queue, and returns what the scheduler did.
    pub async fn shutdown(self) -> SchedulerReport {
        self.stop.cancel();
        match self.task.await {
            Ok(report) => report,
            Err(error) if error.is_panic() => resume_unwind(error.into_panic()),
            Err(_) => SchedulerReport::default(),
        }
    }
}
