//! The pending-job operation of the in-memory store: the steps of `lua/queue_pending.lua`
//! under the queue's mutex.

use std::collections::HashMap;
use std::time::Duration;

use super::MemoryStore;
use super::queue::due_ms;
use crate::error::StoreError;
use crate::key::LockKey;
use crate::queue::{Due, JobId, Keep, PendingPush, PendingStore, QueueName};
use crate::store::time::from_epoch_ms;

/// The keys' pending jobs of one queue: key -> (job, revision). A record whose job no longer
/// waits is stale (the next push replaces it); stale records are swept when their number has
/// doubled since the last sweep, so the map stays within twice the keys with a waiting job.
/// Records need no expiry here: a job that stops waiting makes its record stale at once.
#[derive(Default)]
pub(super) struct PendingJobs {
    records: HashMap<LockKey, (JobId, u64)>,
    swept_at: usize,
}

impl MemoryStore {
    fn push_pending_now(
        &self,
        queue: &QueueName,
        key: &LockKey,
        id: &JobId,
        envelope: Vec<u8>,
        due: Due,
        keep: Keep,
    ) -> PendingPush {
        self.with_queue(queue, |q| {
            if let Some((pending, revision)) = q.pending.records.get(key).cloned() {
                if let Some(due) = q.waiting_due(&pending) {
                    let due = from_epoch_ms(due);
                    if keep == Keep::First {
                        return PendingPush::Joined {
                            id: pending,
                            revision,
                            due,
                        };
                    }
                    if pending != *id {
                        return PendingPush::EncodeFor(pending);
                    }
                    q.replace_envelope(id, envelope);
                    let revision = revision + 1;
                    q.pending.records.insert(key.clone(), (pending, revision));
                    return PendingPush::Joined {
                        id: id.clone(),
                        revision,
                        due,
                    };
                }
                if pending == *id {
                    return PendingPush::Moved;
                }
            }
            if q.holds(id) {
                return PendingPush::Moved;
            }
            let due = due_ms(due);
            q.store_new(id, envelope, due);
            q.pending.records.insert(key.clone(), (id.clone(), 1));
            if q.pending.records.len() >= 2 * q.pending.swept_at.max(64) {
                let mut records = std::mem::take(&mut q.pending.records);
                records.retain(|_, (job, _)| q.waiting_due(job).is_some());
                q.pending.swept_at = records.len();
                q.pending.records = records;
            }
            PendingPush::Stored {
                due: from_epoch_ms(due),
            }
        })
    }
}

impl PendingStore for MemoryStore {
    async fn push_pending(
        &self,
        queue: &QueueName,
        key: &LockKey,
        id: &JobId,
        envelope: Vec<u8>,
        due: Due,
        keep: Keep,
        _hold: Duration,
    ) -> Result<PendingPush, StoreError> {
        Ok(self.push_pending_now(queue, key, id, envelope, due, keep))
    }
}
