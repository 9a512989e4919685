//! The request records of the in-memory store: the steps of `lua/request_record.lua` under the
//! queue's mutex; records run out by tokio's clock, as the locks' TTLs do.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::MemoryStore;
use crate::error::StoreError;
use crate::idempotency::{Begun, IdempotencyStore, Seen};
use crate::queue::{JobId, JobSet, QueueName};

/// Request id -> (running or finished, until when). Run-out records are dropped when their
/// number has doubled since the last sweep.
#[derive(Default)]
pub(super) struct RequestRecords {
    records: HashMap<JobId, (Seen, Instant)>,
    swept_at: usize,
}

impl RequestRecords {
    fn live(&self, id: &JobId, now: Instant) -> Option<Seen> {
        self.records
            .get(id)
            .filter(|(_, until)| *until > now)
            .map(|(seen, _)| *seen)
    }

    fn set(&mut self, id: &JobId, seen: Seen, until: Instant) {
        self.records.insert(id.clone(), (seen, until));
        if self.records.len() >= 2 * self.swept_at.max(64) {
            let now = Instant::now();
            self.records.retain(|_, (_, until)| *until > now);
            self.swept_at = self.records.len();
        }
    }
}

/// A job's set as a request sees it: its id is taken while the job is stored.
fn seen_as_job(set: JobSet) -> Seen {
    match set {
        JobSet::Waiting => Seen::Waiting,
        JobSet::InFlight => Seen::InFlight,
        JobSet::Dead => Seen::Dead,
        JobSet::Done => Seen::Done,
    }
}

impl IdempotencyStore for MemoryStore {
    async fn begin_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Duration,
    ) -> Result<Begun, StoreError> {
        let now = Instant::now();
        Ok(self.with_queue(queue, |q| {
            let as_job = q.model.locate(id).map(|(set, ..)| seen_as_job(set));
            if let Some(seen) = as_job.or_else(|| q.requests.live(id, now)) {
                return Begun::Duplicate(seen);
            }
            q.requests.set(id, Seen::Running, now + hold);
            Begun::New
        }))
    }

    async fn extend_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        Ok(self.with_queue(queue, |q| match q.requests.records.get_mut(id) {
            Some((Seen::Running, until)) if *until > now => {
                *until = now + hold;
                true
            }
            _ => false,
        }))
    }

    async fn end_request(
        &self,
        queue: &QueueName,
        id: &JobId,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        let now = Instant::now();
        self.with_queue(queue, |q| match keep {
            Some(keep) if !keep.is_zero() => q.requests.set(id, Seen::Finished, now + keep),
            _ => {
                q.requests.records.remove(id);
            }
        });
        Ok(())
    }
}
