//! The keys' pending jobs in the queue's model: the steps of `queue_pending.lua` (coalesce,
//! debounce and supersede keep one waiting job per key).

use std::collections::HashMap;

use super::QueueModel;
use crate::key::LockKey;
use crate::queue::{JobId, Keep, PendingJob, PendingPush};
use crate::time::{after_epoch_ms, from_epoch_ms};

/// The keys' pending jobs of one queue, as the `PENDING` and `PENDING_JOBS` hashes of
/// `queue_pending.lua` hold them: a record lives while its job waits, and whatever ends the
/// wait forgets it ([`forget_job`](Self::forget_job)).
#[derive(Debug, Clone, Default)]
pub(crate) struct PendingJobs {
    records: HashMap<LockKey, Record>,
    /// Job id -> the key whose pending job it is.
    keys: HashMap<JobId, LockKey>,
}

impl PendingJobs {
    /// Forgets the record of `id`, which no longer waits.
    pub(crate) fn forget_job(&mut self, id: &JobId) {
        if let Some(key) = self.keys.remove(id) {
            self.records.remove(&key);
            crate::shrink::shrink(&mut self.keys);
            crate::shrink::shrink(&mut self.records);
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
#[derive(Debug, Clone)]
struct Record {
    job: JobId,
    /// How many requests the job has carried.
    revision: u64,
    /// When the job's first request came, in ms since the epoch.
    first: i64,
    /// When the request whose payload it carries arrived, in ms since the epoch.
    arrived: i64,
}

impl QueueModel {
    /// The pending job of `key` and how many requests it has carried, while it waits.
    pub fn pending_job(&self, key: &LockKey) -> Option<(&JobId, u64)> {
        self.pending
            .records
            .get(key)
            .map(|record| (&record.job, record.revision))
    }

    /// Pushes `job` as its key's pending job: a new job due at `due` (ms since the epoch) when
    /// the key has none waiting, else the waiting one carries the request as its rules say
    /// (`queue_pending.lua`).
    pub fn push_pending(&mut self, job: PendingJob<'_>, due: i64, now: i64) -> PendingPush {
        let PendingJob {
            key,
            id,
            envelope,
            group,
            rules,
        } = job;
        let ago = i64::try_from(rules.arrived_ago.as_millis()).unwrap_or(i64::MAX);
        let arrived = now.saturating_sub(ago);
        if let Some(record) = self.pending.records.get(key).cloned() {
            if let Some(due) = self.waiting_due(&record.job) {
                if rules.keep == Keep::First {
                    self.record(rules.counters, now, &[("coalesced", 1)]);
                    return PendingPush::Joined {
                        id: record.job,
                        revision: record.revision,
                        due: from_epoch_ms(due),
                    };
                }
                // A request at its first conflict is ordered by its push, not by the clock, which
                // may step back between two pushes (a host's time set back): it is the latest.
                let arrived = if ago == 0 {
                    arrived.max(record.arrived)
                } else {
                    arrived
                };
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
                self.replace_envelope(id, envelope);
                self.record(rules.counters, now, &[("coalesced", 1)]);
                let due = match rules.debounce {
                    Some(debounce) => {
                        let due = after_epoch_ms(now, debounce.period)
                            .min(after_epoch_ms(record.first, debounce.max_wait));
                        self.schedule(id.clone(), due);
                        due
                    }
                    None => due,
                };
                let revision = record.revision + 1;
                self.pending.insert(
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
        if self.holds(id) {
            return PendingPush::Moved;
        }
        self.store_new(id, envelope, due, group, now);
        let record = Record {
            job: id.clone(),
            revision: 1,
            first: now,
            arrived,
        };
        self.pending.insert(key, record);
        PendingPush::Stored {
            due: from_epoch_ms(due),
        }
    }
}
