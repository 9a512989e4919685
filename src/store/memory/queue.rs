//! The delay queue of the in-memory store: the queue's model ([`QueueModel`]) under one mutex
//! per store, with what the model leaves to a store: the schedulers' wake-ups, the request
//! records, and the clock (read under the mutex: operations see it in their order).

use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::MemoryStore;
use crate::error::StoreError;
use crate::idempotency::model::RequestModel;
use crate::lock::LockToken;
use crate::queue::model::Promotion;
use crate::queue::model::QueueModel;
use crate::queue::{
    Cancelled, ClaimBatch, ClaimLimits, Counters, Due, Hold, JobGroup, JobId, QueueCore, QueueName,
    Retention, Wakeups,
};
use crate::time::{after_epoch_ms, from_epoch_ms, to_epoch_ms};

/// One queue: its model, the channel that wakes its schedulers, the idempotency guard's
/// request records (see `IdempotencyStore`) and the origin of their clock.
pub(super) struct QueueState {
    pub(super) model: QueueModel,
    pub(super) wake: watch::Sender<u64>,
    pub(super) requests: RequestModel,
    requests_origin: Instant,
}

impl Default for QueueState {
    fn default() -> Self {
        QueueState {
            model: QueueModel::default(),
            wake: watch::Sender::new(0),
            requests: RequestModel::default(),
            requests_origin: Instant::now(),
        }
    }
}

impl QueueState {
    /// The request records' clock: tokio's, as the locks' TTLs run on (a test that pauses
    /// time runs them out).
    pub(super) fn requests_clock(&self) -> Duration {
        Instant::now().saturating_duration_since(self.requests_origin)
    }
}

pub(super) fn now_ms() -> i64 {
    to_epoch_ms(SystemTime::now())
}

/// When a job pushed `due` is due, in ms since the epoch.
pub(super) fn due_ms(due: Due) -> i64 {
    match due {
        Due::In(delay) => after_epoch_ms(now_ms(), delay),
        Due::At(at) => to_epoch_ms(at),
    }
}

impl MemoryStore {
    /// Runs `f` on `queue`'s state; wakes its schedulers when a job became due sooner than
    /// every other.
    pub(super) fn with_queue<R>(&self, queue: &QueueName, f: impl FnOnce(&mut QueueState) -> R) -> R {
        let mut queues = self.queues();
        let state = queues.entry(queue.clone()).or_default();
        let wakes = state.model.wakes;
        let answer = f(state);
        if state.model.wakes != wakes {
            state.wake.send_modify(|n| *n = n.wrapping_add(1));
        }
        answer
    }

    /// Makes the waiting job `id` due `after` from now, if sooner (see `queue_promote.lua`).
    pub(crate) fn promote_now(&self, queue: &QueueName, id: &JobId, after: Duration) -> Promotion {
        self.with_queue(queue, |q| q.model.promote(id, after, now_ms()))
    }
}

impl QueueCore for MemoryStore {
    async fn push_many_in_group(
        &self,
        queue: &QueueName,
        jobs: &[(JobId, Vec<u8>)],
        due: Due,
        group: Option<&JobGroup>,
    ) -> Result<(SystemTime, Vec<bool>), StoreError> {
        Ok(self.with_queue(queue, |q| {
            let due = due_ms(due);
            (from_epoch_ms(due), q.model.push_many(jobs, due, group, now_ms()))
        }))
    }

    async fn claim(
        &self,
        queue: &QueueName,
        max: usize,
        lease: Duration,
        token: LockToken,
        limits: ClaimLimits,
        counters: Counters,
    ) -> Result<ClaimBatch, StoreError> {
        Ok(self.with_queue(queue, |q| {
            q.model.claim(max, lease, token, limits, counters, now_ms())
        }))
    }

    async fn ack(
        &self,
        queue: &QueueName,
        jobs: &[(&JobId, Hold)],
        retention: Option<Retention>,
        counters: Counters,
    ) -> Result<Vec<bool>, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.ack(jobs, retention, counters, now_ms())))
    }

    async fn retry(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        envelope: Option<Vec<u8>>,
        delay: Duration,
        counters: Counters,
    ) -> Result<Option<SystemTime>, StoreError> {
        let due = self.with_queue(queue, |q| {
            q.model.retry(id, hold, envelope, delay, counters, now_ms())
        });
        Ok(due.map(from_epoch_ms))
    }

    async fn bury(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        reason: &str,
        envelope: Option<Vec<u8>>,
        counters: Counters,
    ) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| {
            q.model.bury(id, hold, reason, envelope, counters, now_ms())
        }))
    }

    async fn bury_waiting(
        &self,
        queue: &QueueName,
        id: &JobId,
        reason: &str,
        counters: Counters,
    ) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.bury_waiting(id, reason, counters, now_ms())))
    }

    async fn extend_lease(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.extend_lease(id, hold, lease, now_ms())))
    }

    async fn cancel(&self, queue: &QueueName, id: &JobId) -> Result<Cancelled, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.cancel(id)))
    }

    async fn register(
        &self,
        queue: &QueueName,
        shards: usize,
        counters: Option<Counters>,
    ) -> Result<(), StoreError> {
        let mut registered = self
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = registered
            .entry(queue.as_str().to_string())
            .or_insert((shards, Counters::On));
        entry.0 = shards;
        if let Some(counters) = counters {
            entry.1 = counters;
        }
        Ok(())
    }

    fn wakeups(&self, queue: &QueueName) -> Wakeups {
        let signal = self.with_queue(queue, |q| q.wake.subscribe());
        Wakeups::new(signal, None)
    }
}
