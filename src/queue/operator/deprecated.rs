//! The operator's verbs as 0.3 had them, on [`DelayQueue`]: kept for one release so that
//! code written for 0.3 still compiles; each forwards to [`QueueOperator`].

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{JobInfo, JobSet, ListCursor, ListedEntry, QueueStats};
use crate::queue::{Codec, DelayQueue, JobId, MinuteActivity, QueueError, QueueStore};

impl<T, St, Enc> DelayQueue<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: QueueStore,
    Enc: Codec + Clone,
{
    /// Moved to [`QueueOperator::job`](super::QueueOperator::job).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().job(id)`")]
    pub async fn job(&self, id: &JobId) -> Result<Option<JobInfo<T>>, QueueError> {
        self.operator().job(id).await
    }

    /// Moved to [`QueueOperator::stats`](super::QueueOperator::stats).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().stats()`")]
    pub async fn stats(&self) -> Result<QueueStats, QueueError> {
        self.operator().stats().await
    }

    /// Moved to [`QueueOperator::list`](super::QueueOperator::list).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().list(set, limit)`")]
    pub async fn list(&self, set: JobSet, limit: usize) -> Result<Vec<ListedEntry<T>>, QueueError> {
        self.operator().list(set, limit).await
    }

    /// Moved to [`QueueOperator::list_after`](super::QueueOperator::list_after).
    #[deprecated(
        since = "0.4.0",
        note = "use `queue.operator().list_after(set, after, limit)`"
    )]
    pub async fn list_after(
        &self,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<ListedEntry<T>>, QueueError> {
        self.operator().list_after(set, after, limit).await
    }

    /// Moved to [`QueueOperator::activity`](super::QueueOperator::activity).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().activity()`")]
    pub async fn activity(&self) -> Result<Vec<MinuteActivity>, QueueError> {
        self.operator().activity().await
    }

    /// Moved to [`QueueOperator::pause`](super::QueueOperator::pause).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().pause()`")]
    pub async fn pause(&self) -> Result<bool, QueueError> {
        self.operator().pause().await
    }

    /// Moved to [`QueueOperator::resume`](super::QueueOperator::resume).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().resume()`")]
    pub async fn resume(&self) -> Result<bool, QueueError> {
        self.operator().resume().await
    }

    /// Moved to [`QueueOperator::run_now`](super::QueueOperator::run_now).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().run_now(id)`")]
    pub async fn run_now(&self, id: &JobId) -> Result<bool, QueueError> {
        self.operator().run_now(id).await
    }

    /// Moved to [`QueueOperator::requeue`](super::QueueOperator::requeue).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().requeue(ids)`")]
    pub async fn requeue(&self, ids: &[JobId]) -> Result<usize, QueueError> {
        self.operator().requeue(ids).await
    }

    /// Moved to [`QueueOperator::requeue_dead`](super::QueueOperator::requeue_dead).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().requeue_dead()`")]
    pub async fn requeue_dead(&self) -> Result<usize, QueueError> {
        self.operator().requeue_dead().await
    }

    /// Moved to [`QueueOperator::purge`](super::QueueOperator::purge).
    #[deprecated(since = "0.4.0", note = "use `queue.operator().purge(set)`")]
    pub async fn purge(&self, set: JobSet) -> Result<usize, QueueError> {
        self.operator().purge(set).await
    }
}
