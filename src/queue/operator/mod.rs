//! The queue's operator surface: [`QueueOperator`], the handle that reads and changes a queue
//! as an operator does (what the dashboard and the `redefer` command use), apart from the
//! [`DelayQueue`] producers and workers use; and the store capabilities it needs.

mod controls;
mod reading;
mod store;

use std::fmt;

pub use self::reading::{JobInfo, ListedEntry};
pub use self::store::{
    ControlQueue, InspectQueue, JobSet, ListCursor, ListedJob, QueueRegistry, QueueStats, RawJob,
    RawJobState, RegisteredQueue,
};
use super::{DelayQueue, Json};

/// A queue as an operator sees it: its jobs listed and read ([`job`](Self::job),
/// [`stats`](Self::stats), [`list_after`](Self::list_after), [`activity`](Self::activity)),
/// paused and resumed, dead jobs requeued, sets purged. Made from the queue's
/// [`DelayQueue`] (same name, shards and codec) by [`DelayQueue::operator`].
///
/// ```
/// use std::time::Duration;
/// use redefer::MemoryStore;
/// use redefer::queue::{DelayQueue, JobSet};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "jobs")?;
/// queue.push(&7, Duration::from_secs(60)).await?;
/// let operator = queue.operator();
/// assert_eq!(operator.stats().await?.waiting, 1);
/// assert_eq!(operator.list(JobSet::Waiting, 10).await?.len(), 1);
/// # Ok(()) }
/// ```
pub struct QueueOperator<T, St, Enc = Json> {
    queue: DelayQueue<T, St, Enc>,
}

impl<T, St, Enc> QueueOperator<T, St, Enc> {
    /// The operator's handle on `queue`.
    pub fn new(queue: DelayQueue<T, St, Enc>) -> Self {
        QueueOperator { queue }
    }

    /// The queue it operates.
    pub fn queue(&self) -> &DelayQueue<T, St, Enc> {
        &self.queue
    }
}

impl<T, St: Clone, Enc: Clone> Clone for QueueOperator<T, St, Enc> {
    fn clone(&self) -> Self {
        QueueOperator {
            queue: self.queue.clone(),
        }
    }
}

impl<T, St, Enc> fmt::Debug for QueueOperator<T, St, Enc> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueOperator")
            .field("queue", &self.queue)
            .finish()
    }
}

impl<T, St: Clone, Enc: Clone> DelayQueue<T, St, Enc> {
    /// The operator's handle on this queue: what the dashboard and the `redefer` command do
    /// to it (see [`QueueOperator`]).
    pub fn operator(&self) -> QueueOperator<T, St, Enc> {
        QueueOperator::new(self.clone())
    }
}
