//! The operator's verbs on the queue's model: read a job, count, list, the last hour's
//! activity, the groups' backlogs; pause, run now, requeue the dead, purge.

use super::QueueModel;
use crate::queue::{
    ACTIVITY_MINUTES, JobId, JobSet, ListCursor, ListedJob, MAX_PAGE, MinuteActivity, QueueGroups,
    QueueStats, RawJob, RawJobState,
};
use crate::time::from_epoch_ms;

impl QueueModel {
    /// Where job `id` is, with its envelope (`queue_inspect.lua`).
    pub fn inspect(&self, id: &JobId) -> RawJob {
        let state = if let Some(due) = self.due_of.get(id) {
            RawJobState::Delayed {
                due: from_epoch_ms(*due),
            }
        } else if let Some((deadline, _)) = self.leases.get(id) {
            RawJobState::InFlight {
                lease_until: from_epoch_ms(*deadline),
            }
        } else if let Some((at, reason)) = self.dead.get(id) {
            RawJobState::Dead {
                buried_at: from_epoch_ms(*at),
                reason: Some(reason.clone()),
            }
        } else if let (Some((at, envelope)), false) = (self.finished.get(id), self.jobs.contains_key(id)) {
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
            envelope: self.jobs.get(id).cloned(),
        }
    }

    /// How many jobs each set holds at `now` (`queue_stats.lua`).
    pub fn stats(&self, now: i64) -> QueueStats {
        QueueStats {
            waiting: self.due_of.len() as u64,
            due: (self.delayed.iter().take_while(|(due, _)| *due <= now).count() + self.fair.ready_count())
                as u64,
            in_flight: self.inflight.len() as u64,
            dead: self.dead.len() as u64,
            done: self.done.len() as u64,
            paused: self.paused,
        }
    }

    /// The `most` largest groups by due jobs waiting for their turn (at most [`MAX_PAGE`]), and
    /// how many groups have due jobs (`queue_groups.lua`).
    pub fn groups(&self, most: usize) -> QueueGroups {
        self.fair.largest(most.min(MAX_PAGE))
    }

    /// Up to `limit` jobs of `set` after `after`, in time order (`queue_list.lua`).
    pub fn list(&self, set: JobSet, after: Option<&ListCursor>, limit: usize) -> Vec<ListedJob> {
        self.entries(set, after, limit.min(MAX_PAGE))
            .into_iter()
            .map(|(at, id)| ListedJob {
                envelope: match set {
                    JobSet::Done => self.finished.get(&id).map(|(_, envelope)| envelope.clone()),
                    _ => self.jobs.get(&id).cloned(),
                },
                reason: match set {
                    JobSet::Dead => self.dead.get(&id).map(|(_, reason)| reason.clone()),
                    _ => None,
                },
                id: id.to_string(),
                at: from_epoch_ms(at),
            })
            .collect()
    }

    /// The last hour's activity at `now`, by minute.
    pub fn activity(&self, now: i64) -> Vec<MinuteActivity> {
        let now = u64::try_from(now / 60_000).unwrap_or(0);
        self.activity
            .range(now.saturating_sub(ACTIVITY_MINUTES - 1)..)
            .map(|(_, minute)| *minute)
            .collect()
    }

    /// Pauses (or resumes) the claims; whether it was paused (`queue_pause.lua`).
    pub fn pause(&mut self, paused: bool) -> bool {
        let was = std::mem::replace(&mut self.paused, paused);
        if was && !paused {
            self.wakes = self.wakes.wrapping_add(1);
        }
        was
    }

    /// Makes the waiting job `id` due at `now`, if later; whether it waits (`queue_run_now.lua`).
    pub fn run_now(&mut self, id: &JobId, now: i64) -> bool {
        let Some(due) = self.due_of.get(id).copied() else {
            return false;
        };
        if due > now {
            self.schedule(id.clone(), now);
        }
        true
    }

    /// Moves the dead jobs of `ids` back to wait, due at `now`; how many (`queue_requeue.lua`).
    pub fn requeue(&mut self, ids: &[JobId], now: i64) -> usize {
        let mut moved = 0;
        for id in ids.iter().take(MAX_PAGE) {
            if self.dead.remove(id).is_some() {
                self.expiries.remove(id);
                self.schedule(id.clone(), now);
                moved += 1;
            }
        }
        moved
    }

    /// Deletes up to `limit` jobs of `set`, oldest first; how many (`queue_purge.lua`).
    pub fn purge(&mut self, set: JobSet, limit: usize) -> usize {
        let ids: Vec<JobId> = self
            .entries(set, None, limit.clamp(1, MAX_PAGE))
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        if set == JobSet::Done {
            // A finished job's id may be in use again by a new job: only its record goes.
            for id in &ids {
                if let Some((at, _)) = self.finished.remove(id) {
                    self.done.remove(&(at, id.clone()));
                }
            }
            return ids.len();
        }
        for id in &ids {
            self.unschedule(id);
            self.drop_lease(id);
            self.dead.remove(id);
            self.jobs.remove(id);
            self.fair.forget(id);
            self.expiries.remove(id);
            self.handed.remove(id);
        }
        ids.len()
    }
}
