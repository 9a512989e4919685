//! What an operator does to a queue while it runs: pause and resume it, run a job now, read
//! its recent activity.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Codec, DelayQueue, JobId, MinuteActivity, QueueError, QueueStore};

impl<T, St, Enc> DelayQueue<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: QueueStore,
    Enc: Codec,
{
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
    /// queue.pause().await?;
    /// assert!(queue.claim(10, Duration::from_secs(30)).await?.jobs.is_empty());
    /// queue.resume().await?;
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
        for shard in self.shards.names() {
            was |= self.store().pause(shard, paused).await?;
        }
        Ok(was)
    }

    /// Makes the waiting job `id` due now; `false` when it is not waiting (in flight, dead,
    /// finished or unknown).
    pub async fn run_now(&self, id: &JobId) -> Result<bool, QueueError> {
        Ok(self.store().run_now(self.shards.of(id), id).await?)
    }

    /// The queue's activity per minute over the last hour (every shard added up), oldest
    /// first; minutes with nothing counted are left out.
    pub async fn activity(&self) -> Result<Vec<MinuteActivity>, QueueError> {
        let mut minutes: Vec<MinuteActivity> = Vec::new();
        for shard in self.shards.names() {
            for minute in self.store().activity(shard).await? {
                match minutes.iter_mut().find(|known| known.minute == minute.minute) {
                    Some(known) => known.merge(&minute),
                    None => minutes.push(minute),
                }
            }
        }
        minutes.sort_by_key(|minute| minute.minute);
        Ok(minutes)
    }
}
