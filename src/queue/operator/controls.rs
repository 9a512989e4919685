//! What an operator changes in a queue: pause and resume it, run a job now, move dead jobs
//! back, purge a set.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ControlQueue, InspectQueue, JobSet, ListCursor, QueueOperator};
use crate::queue::{Cancelled, Codec, JobId, MAX_PAGE, QueueError};

impl<T, St, Enc> QueueOperator<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: ControlQueue,
    Enc: Codec,
{
    /// Deletes a waiting or dead job: [`DelayQueue::cancel`](crate::queue::DelayQueue::cancel),
    /// which producers use too.
    pub async fn cancel(&self, id: &JobId) -> Result<Cancelled, QueueError> {
        self.queue.cancel(id).await
    }

    /// Pauses the queue (every shard): its claims hand out nothing until
    /// [`resume`](Self::resume), in every process, since the claim script checks it. Jobs in
    /// flight finish; pushes go on. Whether it was paused before.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "jobs")?;
    /// queue.push(&7, Duration::ZERO).await?;
    /// queue.operator().pause().await?;
    /// assert!(queue.claim(10, Duration::from_secs(30)).await?.jobs.is_empty());
    /// queue.operator().resume().await?;
    /// assert_eq!(queue.claim(10, Duration::from_secs(30)).await?.jobs.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self) -> Result<bool, QueueError> {
        self.set_paused(true).await
    }

    /// Resumes a paused queue and wakes its schedulers. Whether it was paused.
    pub async fn resume(&self) -> Result<bool, QueueError> {
        self.set_paused(false).await
    }

    async fn set_paused(&self, paused: bool) -> Result<bool, QueueError> {
        let mut was = false;
        for shard in self.queue.shards.names() {
            was |= self.queue.store().pause(shard, paused).await?;
        }
        Ok(was)
    }

    /// Makes the waiting job `id` due now; `false` when it is not waiting (in flight, dead,
    /// finished or unknown).
    pub async fn run_now(&self, id: &JobId) -> Result<bool, QueueError> {
        Ok(self.queue.store().run_now(self.queue.shards.of(id), id).await?)
    }

    /// Moves dead jobs back to wait, due now, with their attempts as they were (so a job that
    /// fails again is buried again); how many were dead and moved.
    pub async fn requeue(&self, ids: &[JobId]) -> Result<usize, QueueError> {
        let mut moved = 0;
        for shard in self.queue.shards.names() {
            let here: Vec<JobId> = ids
                .iter()
                .filter(|id| self.queue.shards.of(id) == shard)
                .cloned()
                .collect();
            for page in here.chunks(MAX_PAGE) {
                moved += self.queue.store().requeue(shard, page).await?;
            }
        }
        Ok(moved)
    }

    /// Deletes every job of `set`, bytes and all; how many.
    pub async fn purge(&self, set: JobSet) -> Result<usize, QueueError> {
        let mut purged = 0;
        for shard in self.queue.shards.names() {
            loop {
                let now_purged = self.queue.store().purge(shard, set, MAX_PAGE).await?;
                purged += now_purged;
                if now_purged < MAX_PAGE {
                    break;
                }
            }
        }
        Ok(purged)
    }
}

impl<T, St, Enc> QueueOperator<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: ControlQueue + InspectQueue,
    Enc: Codec,
{
    /// Moves every dead job with a valid id back to wait (see [`requeue`](Self::requeue)); how
    /// many moved. Entries that are not jobs of ours stay in the dead-letter set.
    pub async fn requeue_dead(&self) -> Result<usize, QueueError> {
        let mut moved = 0;
        for shard in self.queue.shards.names() {
            let mut after: Option<ListCursor> = None;
            loop {
                let page = self
                    .queue
                    .store()
                    .list(shard, JobSet::Dead, after.as_ref(), MAX_PAGE)
                    .await?;
                let Some(last) = page.last() else {
                    break;
                };
                after = Some(ListCursor {
                    at: last.at,
                    id: last.id.clone(),
                });
                let ids: Vec<JobId> = page
                    .iter()
                    .filter_map(|entry| JobId::new(entry.id.as_str()).ok())
                    .collect();
                moved += self.queue.store().requeue(shard, &ids).await?;
            }
        }
        Ok(moved)
    }
}
