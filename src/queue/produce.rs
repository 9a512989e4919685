//! What producers do: push jobs (one, or many in a round trip per shard) and cancel them.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Cancelled, Codec, DelayQueue, Due, JobId, MAX_PAGE, QueueCore, QueueError};

/// What a failed push tells: refused for memory, outcome unknown, or nothing written.
pub(crate) fn push_error(error: crate::error::StoreError) -> QueueError {
    if error.is_out_of_memory() {
        QueueError::Full(error)
    } else if error.outcome_unknown() {
        QueueError::Unconfirmed(error)
    } else {
        QueueError::Store(error)
    }
}

/// Where a pushed job went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    /// The job's id.
    pub id: JobId,
    /// When it becomes due, by the store's clock.
    pub due: SystemTime,
}

impl<T, St, Enc> DelayQueue<T, St, Enc>
where
    T: Serialize + DeserializeOwned,
    St: QueueCore,
    Enc: Codec,
{
    /// Pushes `item` to become due `delay` from now, by the store's clock.
    pub async fn push(&self, item: &T, delay: Duration) -> Result<Scheduled, QueueError> {
        let (id, bytes) = self.encode_new(JobId::random(), item)?;
        self.push_encoded(id, bytes, Due::In(delay)).await
    }

    /// Pushes `item` to become due at `at`.
    pub async fn push_at(&self, item: &T, at: SystemTime) -> Result<Scheduled, QueueError> {
        let (id, bytes) = self.encode_new(JobId::random(), item)?;
        self.push_encoded(id, bytes, Due::At(at)).await
    }

    /// Pushes `item` under an id of the caller's, so that pushing it twice stores it once:
    /// the second push fails with [`QueueError::DuplicateId`].
    pub async fn push_with_id(&self, id: JobId, item: &T, due: Due) -> Result<Scheduled, QueueError> {
        let (id, bytes) = self.encode_new(id, item)?;
        self.push_encoded(id, bytes, due).await
    }

    /// Pushes `items` to become due `delay` from now, each under a fresh id, in one round trip
    /// per shard and per 1,000 jobs (where `push` takes one per job). Every item is encoded
    /// first: one over the payload limit fails the call with nothing written.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::queue::DelayQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = DelayQueue::<u64, _>::new(MemoryStore::new(), "bulk")?;
    /// let scheduled = queue.push_many(&[1, 2, 3], Duration::ZERO).await?;
    /// assert_eq!(scheduled.len(), 3);
    /// assert_eq!(queue.operator().stats().await?.waiting, 3);
    /// # Ok(()) }
    /// ```
    pub async fn push_many(&self, items: &[T], delay: Duration) -> Result<Vec<Scheduled>, QueueError> {
        self.register().await;
        // Encoded straight into their shards' batches: no copy of the bytes.
        let mut by_shard: Vec<Vec<(JobId, Vec<u8>)>> = vec![Vec::new(); self.shards.names().len()];
        for item in items {
            let (id, bytes) = self.encode_new(JobId::random(), item)?;
            by_shard[self.shards.index_of(&id)].push((id, bytes));
        }
        let mut scheduled = Vec::with_capacity(items.len());
        for (shard, jobs) in self.shards.names().iter().zip(&by_shard) {
            for page in jobs.chunks(MAX_PAGE) {
                let pushed =
                    self.store
                        .push_many_in_group(shard, page, Due::In(delay), self.group.as_deref());
                let (due, stored) = match pushed.await {
                    Ok(pushed) => pushed,
                    Err(error) => return Err(push_error(error)),
                };
                // Fresh random ids are never taken: every job of the page is stored.
                scheduled.extend(
                    page.iter()
                        .zip(stored)
                        .filter(|(_, stored)| *stored)
                        .map(|((id, _), _)| Scheduled { id: id.clone(), due }),
                );
            }
        }
        Ok(scheduled)
    }

    /// Stores an envelope made by [`encode_new`](Self::encode_new).
    pub(crate) async fn push_encoded(
        &self,
        id: JobId,
        bytes: Vec<u8>,
        due: Due,
    ) -> Result<Scheduled, QueueError> {
        self.register().await;
        let job = [(id, bytes)];
        let shard = self.shards.of(&job[0].0);
        match self
            .store
            .push_many_in_group(shard, &job, due, self.group.as_deref())
            .await
        {
            Ok((due, stored)) if stored.first() == Some(&true) => {
                let [(id, _)] = job;
                Ok(Scheduled { id, due })
            }
            Ok(_) => {
                let [(id, _)] = job;
                Err(QueueError::DuplicateId(id))
            }
            Err(error) => Err(push_error(error)),
        }
    }

    /// Deletes a waiting or dead job.
    pub async fn cancel(&self, id: &JobId) -> Result<Cancelled, QueueError> {
        Ok(self.store.cancel(self.shards.of(id), id).await?)
    }
}
