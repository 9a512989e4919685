//! The memory store's operator capabilities of a queue: read it, change it, list the queues.

use super::MemoryStore;
use super::queue::now_ms;
use crate::error::StoreError;
use crate::queue::{
    ACTIVITY_MINUTES, ControlQueue, InspectQueue, JobId, JobSet, ListCursor, ListedJob, MAX_PAGE,
    MinuteActivity, QueueGroups, QueueName, QueueRegistry, QueueStats, RawJob, RawJobState, RegisteredQueue,
};
use crate::store::time::from_epoch_ms;

impl InspectQueue for MemoryStore {
    async fn inspect(&self, queue: &QueueName, id: &JobId) -> Result<RawJob, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let state = if let Some(due) = q.model.due_of.get(id) {
                RawJobState::Delayed {
                    due: from_epoch_ms(*due),
                }
            } else if let Some((deadline, _)) = q.model.leases.get(id) {
                RawJobState::InFlight {
                    lease_until: from_epoch_ms(*deadline),
                }
            } else if let Some((at, reason)) = q.model.dead.get(id) {
                RawJobState::Dead {
                    buried_at: from_epoch_ms(*at),
                    reason: Some(reason.clone()),
                }
            } else if let (Some((at, envelope)), false) =
                (q.model.finished.get(id), q.model.jobs.contains_key(id))
            {
                return RawJob {
                    state: RawJobState::Done {
                        finished_at: from_epoch_ms(*at),
                    },
                    envelope: Some(envelope.clone()),
                };
            } else {
                RawJobState::Missing
            };
            RawJob {
                state,
                envelope: q.model.jobs.get(id).cloned(),
            }
        }))
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let now = now_ms();
            QueueStats {
                waiting: q.model.due_of.len() as u64,
                due: (q.model.delayed.iter().take_while(|(due, _)| *due <= now).count()
                    + q.model.fair.ready_count()) as u64,
                in_flight: q.model.inflight.len() as u64,
                dead: q.model.dead.len() as u64,
                done: q.model.done.len() as u64,
                paused: q.model.paused,
            }
        }))
    }

    async fn groups(&self, queue: &QueueName, most: usize) -> Result<QueueGroups, StoreError> {
        Ok(self.with_queue(queue, |q| q.model.fair.largest(most.min(MAX_PAGE))))
    }

    async fn list(
        &self,
        queue: &QueueName,
        set: JobSet,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<ListedJob>, StoreError> {
        Ok(self.with_queue(queue, |q| {
            q.model
                .entries(set, after, limit.min(MAX_PAGE))
                .into_iter()
                .map(|(at, id)| ListedJob {
                    envelope: match set {
                        JobSet::Done => q.model.finished.get(&id).map(|(_, envelope)| envelope.clone()),
                        _ => q.model.jobs.get(&id).cloned(),
                    },
                    reason: match set {
                        JobSet::Dead => q.model.dead.get(&id).map(|(_, reason)| reason.clone()),
                        _ => None,
                    },
                    id: id.to_string(),
                    at: from_epoch_ms(at),
                })
                .collect()
        }))
    }

    async fn activity(&self, queue: &QueueName) -> Result<Vec<MinuteActivity>, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let now = u64::try_from(now_ms() / 60_000).unwrap_or(0);
            q.model
                .activity
                .range(now.saturating_sub(ACTIVITY_MINUTES - 1)..)
                .map(|(_, minute)| *minute)
                .collect()
        }))
    }
}

impl ControlQueue for MemoryStore {
    async fn pause(&self, queue: &QueueName, paused: bool) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let was = std::mem::replace(&mut q.model.paused, paused);
            if was && !paused {
                q.wake.send_modify(|n| *n = n.wrapping_add(1));
            }
            was
        }))
    }

    async fn run_now(&self, queue: &QueueName, id: &JobId) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let Some(due) = q.model.due_of.get(id).copied() else {
                return false;
            };
            let now = now_ms();
            if due > now {
                q.model.schedule(id.clone(), now);
            }
            true
        }))
    }

    async fn requeue(&self, queue: &QueueName, ids: &[JobId]) -> Result<usize, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let now = now_ms();
            let mut moved = 0;
            for id in ids.iter().take(MAX_PAGE) {
                if q.model.dead.remove(id).is_some() {
                    q.model.expiries.remove(id);
                    q.model.schedule(id.clone(), now);
                    moved += 1;
                }
            }
            moved
        }))
    }

    async fn purge(&self, queue: &QueueName, set: JobSet, limit: usize) -> Result<usize, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let ids: Vec<JobId> = q
                .model
                .entries(set, None, limit.clamp(1, MAX_PAGE))
                .into_iter()
                .map(|(_, id)| id)
                .collect();
            if set == JobSet::Done {
                // A finished job's id may be in use again by a new job: only its record goes.
                for id in &ids {
                    if let Some((at, _)) = q.model.finished.remove(id) {
                        q.model.done.remove(&(at, id.clone()));
                    }
                }
                return ids.len();
            }
            for id in &ids {
                q.model.unschedule(id);
                q.model.drop_lease(id);
                q.model.dead.remove(id);
                q.model.jobs.remove(id);
                q.model.fair.forget(id);
                q.model.expiries.remove(id);
                q.model.handed.remove(id);
            }
            ids.len()
        }))
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
