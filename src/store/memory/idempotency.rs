//! The request records of the in-memory store: their model
//! ([`RequestModel`](crate::idempotency::model::RequestModel)) under the queue's mutex, beside
//! the queue's own; records run out by tokio's clock, as the locks' TTLs do.

use std::time::Duration;

use super::MemoryStore;
use crate::error::StoreError;
use crate::idempotency::{Begun, IdempotencyStore};
use crate::lock::LockToken;
use crate::queue::{JobId, QueueName};

impl IdempotencyStore for MemoryStore {
    async fn begin_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        hold: Duration,
    ) -> Result<Begun, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let as_job = q.model.locate(id).map(|(set, ..)| set);
            let now = q.requests_clock();
            q.requests.begin(id, as_job, request, hold, now)
        }))
    }

    async fn extend_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        hold: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let now = q.requests_clock();
            q.requests.extend(id, request, hold, now)
        }))
    }

    async fn end_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        request: LockToken,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.with_queue(queue, |q| {
            let now = q.requests_clock();
            q.requests.end(id, request, keep, now);
        });
        Ok(())
    }
}
