//! The pending-job operation of the in-memory store: the steps of `lua/queue_pending.lua`
//! under the queue's mutex.

use std::collections::HashMap;

use super::MemoryStore;
use super::queue::{due_ms, now_ms};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::queue::{Due, JobId, Keep, PendingPush, PendingRules, PendingStore, QueueName};
use crate::store::time::{after_epoch_ms, from_epoch_ms};

/// The keys' pending jobs of one queue. A record whose job no longer waits is stale (the next
/// push replaces it); stale records are swept when their number has doubled since the last
/// sweep, so the map stays within twice the keys with a waiting job. Records need no expiry
/// here (the `hold` of the Redis record): a job that stops waiting makes its record stale.
#[derive(Default)]
pub(super) struct PendingJobs {
    records: HashMap<LockKey, Record>,
    swept_at: usize,
}

/// A key's pending job, as the `PENDING` hash of `queue_pending.lua` holds it.
#[derive(Clone)]
struct Record {
    job: JobId,
    /// How many requests the job has carried.
    revision: u64,
    /// When the job's first request came, in ms since the epoch.
    first: i64,
    /// When the request whose payload it carries arrived, in ms since the epoch.
    arrived: i64,
}

impl MemoryStore {
    fn push_pending_now(
        &self,
        queue: &QueueName,
        key: &LockKey,
        id: &JobId,
        envelope: Vec<u8>,
        due: Due,
        rules: PendingRules,
    ) -> PendingPush {
        self.with_queue(queue, |q| {
            let now = now_ms();
            let ago = i64::try_from(rules.arrived_ago.as_millis()).unwrap_or(i64::MAX);
            let arrived = now.saturating_sub(ago);
            if let Some(record) = q.pending.records.get(key).cloned() {
                if let Some(due) = q.waiting_due(&record.job) {
                    if rules.keep == Keep::First {
                        q.record(rules.counters, now, &[("coalesced", 1)]);
                        return PendingPush::Joined {
                            id: record.job,
                            revision: record.revision,
                            due: from_epoch_ms(due),
                        };
                    }
                    if arrived < record.arrived {
                        return PendingPush::Newer {
                            id: record.job,
                            revision: record.revision,
                            due: from_epoch_ms(due),
                        };
                    }
                    if record.job != *id {
                        return PendingPush::EncodeFor(record.job);
                    }
                    q.replace_envelope(id, envelope);
                    q.record(rules.counters, now, &[("coalesced", 1)]);
                    let due = match rules.debounce {
                        Some(debounce) => {
                            let due = after_epoch_ms(now, debounce.period)
                                .min(after_epoch_ms(record.first, debounce.max_wait));
                            q.schedule(id.clone(), due);
                            due
                        }
                        None => due,
                    };
                    let revision = record.revision + 1;
                    q.pending.records.insert(
                        key.clone(),
                        Record {
                            revision,
                            arrived,
                            ..record
                        },
                    );
                    return PendingPush::Joined {
                        id: id.clone(),
                        revision,
                        due: from_epoch_ms(due),
                    };
                }
                if record.job == *id {
                    return PendingPush::Moved;
                }
            }
            if q.holds(id) {
                return PendingPush::Moved;
            }
            let due = due_ms(due);
            q.store_new(id, envelope, due);
            let record = Record {
                job: id.clone(),
                revision: 1,
                first: now,
                arrived,
            };
            q.pending.records.insert(key.clone(), record);
            if q.pending.records.len() >= 2 * q.pending.swept_at.max(64) {
                let mut records = std::mem::take(&mut q.pending.records);
                records.retain(|_, record| q.waiting_due(&record.job).is_some());
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
        rules: PendingRules,
    ) -> Result<PendingPush, StoreError> {
        Ok(self.push_pending_now(queue, key, id, envelope, due, rules))
    }
}
