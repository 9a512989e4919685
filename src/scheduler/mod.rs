//! The scheduler: claims due jobs from a delay queue and re-injects each into the same service
//! stack, so the lock applies again; then acknowledges, retries or buries it.
//!
//! - It sleeps until the earliest due job, not on a fixed interval; a job pushed with an earlier
//!   due time, by any process, wakes it (pub/sub on Redis).
//! - Any number of schedulers, tasks or processes, can share a queue: each job is held by one
//!   of them at a time, under a lease renewed while its handler runs.
//! - A handler error or panic is a failed attempt: retried with the queue's backoff, buried
//!   after its last attempt. Store errors are retried with backoff; the loop never exits by
//!   itself.

mod acker;
mod handle;
mod job;
mod options;
mod report;
mod run;
mod settle;

pub use self::handle::SchedulerHandle;
pub use self::job::JobService;
pub use self::options::SchedulerOptions;
pub use self::report::SchedulerReport;
pub use crate::guard::current_job::{CurrentJob, current_job};

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::queue::QueueStore;
use crate::queue::{Codec, DelayQueue, Json};

/// Claims due jobs of one queue and runs each through `service`: the same stack, lock layer
/// included, that deferred them.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use redefer::{LockLayer, MemoryStore, Scheduler, strategy::Defer};
/// use redefer::queue::DelayQueue;
/// use tower::{service_fn, Layer};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Charge { order: u64 }
///
/// let store = MemoryStore::new();
/// let queue = DelayQueue::<Charge, _>::new(store.clone(), "charges")?;
/// let service = LockLayer::new(store, |c: &Charge| Some(format!("order:{}", c.order)))
///     .on_conflict(Defer::new(queue.clone()))
///     .layer(service_fn(|c: Charge| async move { Ok::<_, Infallible>(c.order) }));
///
/// let scheduler = Scheduler::new(queue.clone(), service).start();
/// queue.push(&Charge { order: 7 }, Duration::ZERO).await?;
/// // ... the scheduler handles it ...
/// let report = scheduler.shutdown().await;
/// # let _ = report;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Scheduler<S, T, St, Enc = Json> {
    queue: DelayQueue<T, St, Enc>,
    service: S,
    options: SchedulerOptions,
}

impl<S, T, St, Enc> Scheduler<S, T, St, Enc> {
    /// A scheduler of `queue` that runs its jobs through `service`, with default options.
    pub fn new(queue: DelayQueue<T, St, Enc>, service: S) -> Self {
        Scheduler {
            queue,
            service,
            options: SchedulerOptions::default(),
        }
    }

    /// Sets the options.
    pub fn options(mut self, options: SchedulerOptions) -> Self {
        self.options = options;
        self
    }
}

impl<S, T, St, Enc> Scheduler<S, T, St, Enc>
where
    S: JobService<T>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: QueueStore,
    Enc: Codec,
{
    /// Runs the scheduler on a task of its own; the handle shuts it down.
    pub fn start(self) -> SchedulerHandle {
        let stop = CancellationToken::new();
        let task = tokio::spawn(self.run(stop.clone()));
        SchedulerHandle::new(stop, task)
    }

    /// Runs the scheduler until `shutdown` resolves (a signal, say), then shuts it down
    /// gracefully: stops claiming, lets running jobs finish within the grace period, and gives
    /// the unfinished ones back to the queue for another scheduler to take at once.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> SchedulerReport {
        let stop = CancellationToken::new();
        let run = self.run(stop.clone());
        tokio::pin!(run);
        tokio::select! {
            report = &mut run => return report,
            () = shutdown => stop.cancel(),
        }
        run.await
    }
}
