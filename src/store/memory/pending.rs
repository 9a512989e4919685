//! The pending-job operation of the in-memory store: the steps of `lua/queue_pending.lua`
//! under the queue's mutex.

use std::collections::HashMap;

use super::MemoryStore;
use super::queue::{due_ms, now_ms};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::queue::{Due, JobGroup, JobId, Keep, PendingPush, PendingRules, PendingStore, QueueName};
use crate::store::time::{after_epoch_ms, from_epoch_ms};

/// The keys' pending jobs of one queue, as the `PENDING` and `PENDING_JOBS` hashes of
/// `queue_pending.lua` hold them: a record lives while its job waits, and whatever ends the
/// wait forgets it ([`forget_job`](Self::forget_job)).
#[derive(Default)]
pub(super) struct PendingJobs {
    records: HashMap<LockKey, Record>,
    /// Job id -> the key whose pending job it is.
    keys: HashMap<JobId, LockKey>,
}

impl PendingJobs {
    /// Forgets the record of `id`, which no longer waits.
    pub(super) fn forget_job(&mut self, id: &JobId) {
        if let Some(key) = self.keys.remove(id) {
            self.records.remove(&key);
            super::idle::shrink(&mut self.keys);
            super::idle::shrink(&mut self.records);
        }
    }

    /// Makes `record` the pending job of `key`, dropping the reverse entry of the one it
    /// replaces.
    fn insert(&mut self, key: &LockKey, record: Record) {
        self.keys.insert(record.job.clone(), key.clone());
        if let Some(old) = self.records.insert(key.clone(), record)
            && self.records.get(key).is_some_and(|new| new.job != old.job)
        {
            self.keys.remove(&old.job);
        }
    }
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
    // The arguments of `PendingStore::push_pending_in_group`, whose body this is.
    #[allow(clippy::too_many_arguments)]
    fn push_pending_now(
        &self,
        queue: &QueueName,
        key: &LockKey,
        id: &JobId,
        envelope: Vec<u8>,
        due: Due,
        group: Option<&JobGroup>,
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
                    q.pending.insert(
                        key,
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
            q.store_new(id, envelope, due, group);
            let record = Record {
                job: id.clone(),
                revision: 1,
                first: now,
                arrived,
            };
            q.pending.insert(key, record);
            PendingPush::Stored {
                due: from_epoch_ms(due),
            }
        })
    }
}

impl PendingStore for MemoryStore {
    async fn push_pending_in_group(
        &self,
        queue: &QueueName,
        key: &LockKey,
        id: &JobId,
        envelope: Vec<u8>,
        due: Due,
        group: Option<&JobGroup>,
        rules: PendingRules,
    ) -> Result<PendingPush, StoreError> {
        Ok(self.push_pending_now(queue, key, id, envelope, due, group, rules))
    }
}
