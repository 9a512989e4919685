//! The delay queue's state machine in plain Rust: what the queue scripts do
//! (`queue_prelude.lua`, `queue_push_many.lua`, `queue_claim.lua`, `queue_ack.lua`,
//! `queue_retry.lua`, `queue_bury.lua`, `queue_bury_waiting.lua`, `queue_extend.lua`,
//! `queue_cancel.lua`, `queue_promote.lua`, `queue_pending.lua`), written once, with the clock
//! passed in (ms since the epoch, as the scripts read `TIME`): waiting jobs (delayed, and ready
//! in their groups' fair order), jobs in flight under one lease per claimed batch, retained
//! and dead jobs, the keys' pending jobs.
//!
//! [`QueueModel`] is the in-memory store's queue (the store adds a mutex per queue, the
//! schedulers' wake-ups and the request records), and the reference the scripts are checked
//! against (`tests/queue_model.rs`; `tests/queue_protocol.rs` explores its claims
//! exhaustively). The steps of the scripts are in `steps.rs`.
//!
//! ```
//! use std::time::Duration;
//! use redefer::lock::LockToken;
//! use redefer::queue::model::QueueModel;
//! use redefer::queue::{ClaimLimits, Counters, JobId};
//!
//! let mut model = QueueModel::default();
//! let now = 1_800_000_000_000;
//! let job = JobId::new("job-1")?;
//! assert_eq!(model.push_many(&[(job.clone(), b"{}".to_vec())], now, None, now), vec![true]);
//! let limits = ClaimLimits { max_envelope: 1024, max_expiries: 3 };
//! let claimed = model.claim(10, Duration::from_secs(30), LockToken::random(), limits, Counters::Off, now);
//! assert_eq!(claimed.jobs.len(), 1);
//! // Claimed once: a second claim finds nothing due.
//! let again = model.claim(10, Duration::from_secs(30), LockToken::random(), limits, Counters::Off, now);
//! assert!(again.jobs.is_empty());
//! # Ok::<(), redefer::KeyError>(())
//! ```

mod fair_shares;
mod operator;
mod pending;
mod steps;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;

pub(crate) use self::fair_shares::FairShares;
pub(crate) use self::pending::PendingJobs;
pub use self::steps::Promotion;
use crate::lock::LockToken;
use crate::queue::{
    ACTIVITY_MINUTES, Counters, Hold, JobGroup, JobId, JobSet, ListCursor, MinuteActivity, Retention,
};
use crate::time::to_epoch_ms;

/// One queue: the same sets as in Redis, scores in ms since the epoch. See the [module](self).
#[derive(Debug, Clone, Default)]
pub struct QueueModel {
    /// The waiting jobs that are not ready (see `fair`), by due time.
    pub(crate) delayed: BTreeSet<(i64, JobId)>,
    /// Every waiting job's due time, ready or not.
    pub(crate) due_of: HashMap<JobId, i64>,
    /// The groups, and the due jobs of a queue that has groups, in their fair order.
    pub(crate) fair: FairShares,
    /// The jobs in flight, by their lease's deadline.
    pub(crate) inflight: BTreeSet<(i64, JobId)>,
    /// Each job in flight: its lease's deadline, and the claim's hold on it.
    pub(crate) leases: HashMap<JobId, (i64, Hold)>,
    /// The jobs each claim's lease still holds, by the claim's token and first fence: they
    /// share its deadline.
    pub(crate) claims: HashMap<(LockToken, u64), HashSet<JobId>>,
    pub(crate) jobs: HashMap<JobId, Vec<u8>>,
    pub(crate) dead: HashMap<JobId, (i64, String)>,
    /// How many of a job's leases ran out.
    pub(crate) expiries: HashMap<JobId, u32>,
    /// The last job fencing token a claim handed out.
    pub(crate) fence: u64,
    /// Jobs whose lock was handed to them while they were in flight.
    pub(crate) handed: HashSet<JobId>,
    /// Finished jobs a retention keeps, by time finished, and their envelopes.
    pub(crate) done: BTreeSet<(i64, JobId)>,
    pub(crate) finished: HashMap<JobId, (i64, Vec<u8>)>,
    /// The last hour's activity, by minute (ms since the epoch / 60,000).
    pub(crate) activity: BTreeMap<u64, MinuteActivity>,
    pub(crate) paused: bool,
    /// How many times a job became due sooner than every other: the store wakes its
    /// schedulers when this moves.
    pub(crate) wakes: u64,
    /// The keys' pending jobs (see `PendingStore`).
    pub(crate) pending: PendingJobs,
}

impl QueueModel {
    /// Makes job `id` wait until `due` (ms since the epoch), moving it if it waits already (a
    /// ready job moved leaves the ready ones: it is ready again when due).
    pub(crate) fn schedule(&mut self, id: JobId, due: i64) {
        if let Some(old) = self.due_of.insert(id.clone(), due)
            && !self.fair.unready_at(&id, old)
        {
            self.delayed.remove(&(old, id.clone()));
        }
        let first = self
            .delayed
            .first()
            .is_none_or(|(first_due, first_id)| (due, &id) < (*first_due, first_id));
        self.delayed.insert((due, id));
        if first {
            self.wakes = self.wakes.wrapping_add(1);
        }
    }

    /// When the waiting job `id` is due; `None` when it is not waiting.
    pub(crate) fn waiting_due(&self, id: &JobId) -> Option<i64> {
        self.due_of.get(id).copied()
    }

    /// Where job `id` is: the set it is in, with the hold of the lease it is in flight under
    /// (in flight), and when it is due (waiting) or its lease ends (in flight), ms since the
    /// epoch; `None` for no job.
    pub fn locate(&self, id: &JobId) -> Option<(JobSet, Option<Hold>, Option<i64>)> {
        if let Some(due) = self.due_of.get(id) {
            Some((JobSet::Waiting, None, Some(*due)))
        } else if let Some((deadline, hold)) = self.leases.get(id) {
            Some((JobSet::InFlight, Some(*hold), Some(*deadline)))
        } else if self.dead.contains_key(id) {
            Some((JobSet::Dead, None, None))
        } else if self.finished.contains_key(id) {
            Some((JobSet::Done, None, None))
        } else {
            None
        }
    }

    /// How many of job `id`'s leases ran out.
    pub fn expiries(&self, id: &JobId) -> u32 {
        self.expiries.get(id).copied().unwrap_or(0)
    }

    /// Whether a job `id` is stored (waiting or in flight).
    pub(crate) fn holds(&self, id: &JobId) -> bool {
        self.jobs.contains_key(id)
    }

    /// Stores a new job due at `due` (ms since the epoch), in `group` if one is given, as
    /// `queue_push_many.lua` does: a grouped job due now is ready at once.
    pub(crate) fn store_new(
        &mut self,
        id: &JobId,
        envelope: Vec<u8>,
        due: i64,
        group: Option<&JobGroup>,
        now: i64,
    ) {
        self.jobs.insert(id.clone(), envelope);
        if let Some(group) = group {
            self.fair.join(id, group);
            if due <= now {
                self.due_of.insert(id.clone(), due);
                self.fair.make_ready(id.clone(), due);
                self.wakes = self.wakes.wrapping_add(1);
                return;
            }
        }
        self.schedule(id.clone(), due);
    }

    /// Makes waiting or returning job `id` due now, ahead of every group's turn when the queue
    /// has groups: the lock it waits for was handed to it (`hand_now` of `queue_prelude.lua`).
    pub(crate) fn hand_now(&mut self, id: &JobId, now: i64) {
        if !self.fair.on() {
            self.schedule(id.clone(), now);
            return;
        }
        let due = match self.due_of.get(id).copied() {
            Some(due) => {
                if !self.fair.unready_at(id, due) {
                    self.delayed.remove(&(due, id.clone()));
                }
                due.min(now)
            }
            None => now,
        };
        self.due_of.insert(id.clone(), due);
        self.fair.hand_now(id.clone(), due);
        self.wakes = self.wakes.wrapping_add(1);
    }

    /// Moves job `id`, already out of the waiting and in-flight sets, to the dead-letter set at
    /// `now` with `reason` (`bury_now` of `queue_prelude.lua`).
    pub(crate) fn bury_now(&mut self, id: &JobId, reason: &str, now: i64) {
        self.dead.insert(id.clone(), (now, reason.to_string()));
        self.expiries.remove(id);
        self.handed.remove(id);
    }

    /// Replaces the envelope of the stored job `id`.
    pub(crate) fn replace_envelope(&mut self, id: &JobId, envelope: Vec<u8>) {
        self.jobs.insert(id.clone(), envelope);
    }

    /// Takes `id` out of the waiting set (claimed, cancelled, buried, purged): it is no longer
    /// its key's pending job either.
    pub(crate) fn unschedule(&mut self, id: &JobId) -> bool {
        self.pending.forget_job(id);
        match self.due_of.remove(id) {
            Some(due) => {
                if !self.fair.unready_at(id, due) {
                    self.delayed.remove(&(due, id.clone()));
                }
                true
            }
            None => false,
        }
    }

    /// Up to `limit` entries of `set` in time order (ties by id), as the sorted sets hold them
    /// in Redis, from just after `after`.
    pub(crate) fn entries(&self, set: JobSet, after: Option<&ListCursor>, limit: usize) -> Vec<(i64, JobId)> {
        let after = after.map(|cursor| (to_epoch_ms(cursor.at), cursor.id.as_str()));
        let page = |ordered: &BTreeSet<(i64, JobId)>| -> Vec<(i64, JobId)> {
            let start = match after.and_then(|(at, id)| Some((at, JobId::new(id).ok()?))) {
                Some(cursor) => Bound::Excluded(cursor),
                None => Bound::Unbounded,
            };
            ordered
                .range((start, Bound::Unbounded))
                .filter(|(at, id)| after.is_none_or(|cursor| (*at, id.as_str()) > cursor))
                .take(limit)
                .cloned()
                .collect()
        };
        match set {
            JobSet::Waiting => {
                // A waiting job is delayed or ready: both pages, merged in time order.
                let mut merged = page(&self.delayed);
                merged.extend(page(&self.fair.ready_due));
                merged.sort();
                merged.truncate(limit);
                merged
            }
            JobSet::InFlight => page(&self.inflight),
            JobSet::Done => page(&self.done),
            JobSet::Dead => {
                let dead: BTreeSet<_> = self.dead.iter().map(|(id, (at, _))| (*at, id.clone())).collect();
                page(&dead)
            }
        }
    }

    /// Adds `counts` to the current minute's activity, forgetting minutes out of the window,
    /// when the queue's `counters` are on.
    pub(crate) fn record(&mut self, counters: Counters, now: i64, counts: &[(&str, u64)]) {
        if counters == Counters::Off {
            return;
        }
        let minute = u64::try_from(now / 60_000).unwrap_or(0);
        if !self.activity.contains_key(&minute) {
            // A new minute: the ones out of the window go.
            self.activity = self
                .activity
                .split_off(&minute.saturating_sub(ACTIVITY_MINUTES - 1));
        }
        let entry = self
            .activity
            .entry(minute)
            .or_insert_with(|| MinuteActivity::starting(minute));
        for (name, count) in counts {
            entry.add(name, *count);
        }
    }

    /// Keeps the finished job `id` under `retention`, forgetting the oldest beyond it.
    pub(crate) fn keep_finished(&mut self, id: &JobId, now: i64, retention: Retention) {
        let Some(envelope) = self.jobs.remove(id) else {
            return;
        };
        if let Some((at, _)) = self.finished.insert(id.clone(), (now, envelope)) {
            self.done.remove(&(at, id.clone()));
        }
        self.done.insert((now, id.clone()));
        let oldest_kept =
            now.saturating_sub(i64::try_from(retention.max_age.as_millis()).unwrap_or(i64::MAX));
        while let Some((at, old)) = self.done.first().cloned() {
            if at >= oldest_kept && self.done.len() <= retention.max_count {
                break;
            }
            self.done.pop_first();
            self.finished.remove(&old);
        }
    }

    /// Takes job `id` out of its claim's lease, if one holds it.
    pub(crate) fn drop_lease(&mut self, id: &JobId) {
        let Some((deadline, hold)) = self.leases.remove(id) else {
            return;
        };
        self.inflight.remove(&(deadline, id.clone()));
        let claim = (hold.token, hold.claim);
        if let Some(jobs) = self.claims.get_mut(&claim) {
            jobs.remove(id);
            if jobs.is_empty() {
                self.claims.remove(&claim);
            }
        }
    }

    /// Whether `hold`'s lease holds job `id`.
    pub(crate) fn is_held_by(&self, id: &JobId, hold: Hold) -> bool {
        self.leases.get(id).is_some_and(|(_, held)| *held == hold)
    }

    /// Ends `hold`'s lease on `id`; `false` when that lease does not hold it.
    pub(crate) fn end_lease(&mut self, id: &JobId, hold: Hold) -> bool {
        if !self.is_held_by(id, hold) {
            return false;
        }
        self.drop_lease(id);
        true
    }

    /// Moves the deadline of `hold`'s claim's lease to `deadline`, for every job it holds.
    pub(crate) fn extend_claim(&mut self, hold: Hold, deadline: i64) {
        let Some(jobs) = self.claims.get(&(hold.token, hold.claim)) else {
            return;
        };
        for id in jobs {
            if let Some((old, _)) = self.leases.get_mut(id) {
                self.inflight.remove(&(*old, id.clone()));
                *old = deadline;
                self.inflight.insert((deadline, id.clone()));
            }
        }
    }
}
