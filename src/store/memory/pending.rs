//! The pending-job operation of the in-memory store: the queue model's
//! [`push_pending`](crate::queue::model::QueueModel::push_pending) under the queue's mutex.

use super::MemoryStore;
use super::queue::{due_ms, now_ms};
use crate::error::StoreError;
use crate::queue::{Due, PendingJob, PendingPush, PendingStore, QueueName};

impl PendingStore for MemoryStore {
    async fn push_pending(
        &self,
        queue: &QueueName,
        job: PendingJob<'_>,
        due: Due,
    ) -> Result<PendingPush, StoreError> {
        // The clock is read under the queue's mutex: requests are decided in the order of their
        // times.
        Ok(self.with_queue(queue, |q| {
            let (due, now) = (due_ms(due), now_ms());
            q.model.push_pending(job, due, now)
        }))
    }
}
