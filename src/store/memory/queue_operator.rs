//! The memory store's operator capabilities of a queue (the model's verbs, under the queue's
//! mutex), and the list of queues.

use super::MemoryStore;
use super::queue::now_ms;
use crate::error::StoreError;
use crate::queue::{
    ControlQueue, InspectQueue, JobId, JobSet, ListCursor, ListedJob, MinuteActivity, QueueGroups, QueueName,
    QueueRegistry, QueueStats, RawJob, RegisteredQueue,
};

impl InspectQueue for MemoryStore {
    async fn inspect(&self, queue: &QueueName, id: &JobId) -> Result<RawJob, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.inspect(id)))
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.stats(now_ms())))
    }

    async fn groups(&self, queue: &QueueName, most: usize) -> Result<QueueGroups, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.groups(most)))
    }

    async fn list(
        &self,
        queue: &QueueName,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<ListedJob>, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.list(set, after, limit)))
    }

    async fn activity(&self, queue: &QueueName) -> Result<Vec<MinuteActivity>, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.activity(now_ms())))
    }
}

impl ControlQueue for MemoryStore {
    async fn pause(&self, queue: &QueueName, paused: bool) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.pause(paused)))
    }

    async fn run_now(&self, queue: &QueueName, id: &JobId) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.run_now(id, now_ms())))
    }

    async fn requeue(&self, queue: &QueueName, ids: &[JobId]) -> Result<usize, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.requeue(ids, now_ms())))
    }

    async fn purge(&self, queue: &QueueName, set: JobSet, limit: usize) -> Result<usize, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.purge(set, limit)))
    }
}

impl QueueRegistry for MemoryStore {
    async fn registered(&self) -> Result<Vec<RegisteredQueue>, StoreError> {
        Ok(self
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(name, (shards, counters))| RegisteredQueue {
                name: name.clone(),
                shards: *shards,
                counters: *counters,
            })
            .collect())
    }
}
