//! The delay-queue operations of the in-memory store: the same steps as the Lua scripts, under
//! one mutex instead of Redis's single thread.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::MemoryStore;
use super::fair_shares::FairShares;
use crate::error::StoreError;
use crate::lock::LockToken;
use crate::queue::rules::{NO_ENVELOPE, lease_ran_out, oversized};
use crate::queue::{
    ACTIVITY_MINUTES, Cancelled, ClaimBatch, ClaimLimits, Counters, Due, Hold, JobGroup, JobId, JobSet,
    ListCursor, MAX_LEASE, MAX_PAGE, MinuteActivity, QueueCore, QueueName, RawClaim, Retention, Wakeups,
};
use crate::store::handover::Promotion;
use crate::store::time::{after_epoch_ms, from_epoch_ms, to_epoch_ms};

/// One queue: the same sets as in Redis, scores in ms since the epoch.
pub(super) struct QueueState {
    /// The waiting jobs that are not ready (see `fair`), by due time.
    pub(super) delayed: BTreeSet<(i64, JobId)>,
    /// Every waiting job's due time, ready or not.
    pub(super) due_of: HashMap<JobId, i64>,
    /// The groups, and the due jobs of a queue that has groups, in their fair order.
    pub(super) fair: FairShares,
    /// The jobs in flight, by their lease's deadline.
    pub(super) inflight: BTreeSet<(i64, JobId)>,
    /// Each job in flight: its lease's deadline, and the claim's hold on it.
    pub(super) leases: HashMap<JobId, (i64, Hold)>,
    /// The jobs each claim's lease still holds, by the claim's token and first fence: they
    /// share its deadline.
    pub(super) claims: HashMap<(LockToken, u64), HashSet<JobId>>,
    pub(super) jobs: HashMap<JobId, Vec<u8>>,
    pub(super) dead: HashMap<JobId, (i64, String)>,
    /// How many of a job's leases ran out.
    pub(super) expiries: HashMap<JobId, u32>,
    /// The last job fencing token a claim handed out.
    pub(super) fence: u64,
    /// Jobs whose lock was handed to them while they were in flight.
    pub(super) handed: HashSet<JobId>,
    /// Finished jobs a retention keeps, by time finished, and their envelopes.
    pub(super) done: BTreeSet<(i64, JobId)>,
    pub(super) finished: HashMap<JobId, (i64, Vec<u8>)>,
    /// The last hour's activity, by minute (ms since the epoch / 60,000).
    pub(super) activity: BTreeMap<u64, MinuteActivity>,
    pub(super) paused: bool,
    pub(super) wake: watch::Sender<u64>,
    /// The keys' pending jobs (see `PendingStore`).
    pub(super) pending: super::pending::PendingJobs,
    /// The request records of the idempotency guard (see `IdempotencyStore`).
    pub(super) requests: super::idempotency::RequestRecords,
}

impl Default for QueueState {
    fn default() -> Self {
        QueueState {
            delayed: BTreeSet::new(),
            due_of: HashMap::new(),
            fair: FairShares::default(),
            inflight: BTreeSet::new(),
            leases: HashMap::new(),
            claims: HashMap::new(),
            jobs: HashMap::new(),
            dead: HashMap::new(),
            expiries: HashMap::new(),
            fence: 0,
            handed: HashSet::new(),
            done: BTreeSet::new(),
            finished: HashMap::new(),
            activity: BTreeMap::new(),
            paused: false,
            wake: watch::Sender::new(0),
            pending: super::pending::PendingJobs::default(),
            requests: super::idempotency::RequestRecords::default(),
        }
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

impl QueueState {
    /// Makes job `id` wait until `due` (ms since the epoch), moving it if it waits already (a
    /// ready job moved leaves the ready ones: it is ready again when due).
    pub(super) fn schedule(&mut self, id: JobId, due: i64) {
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
            self.wake.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// When the waiting job `id` is due; `None` when it is not waiting.
    pub(super) fn waiting_due(&self, id: &JobId) -> Option<i64> {
        self.due_of.get(id).copied()
    }

    /// The set job `id` is in, as the idempotency guard names it; `None` for no job.
    pub(super) fn seen_as_job(&self, id: &JobId) -> Option<crate::idempotency::Seen> {
        use crate::idempotency::Seen;
        if self.due_of.contains_key(id) {
            Some(Seen::Waiting)
        } else if self.leases.contains_key(id) {
            Some(Seen::InFlight)
        } else if self.dead.contains_key(id) {
            Some(Seen::Dead)
        } else if self.finished.contains_key(id) {
            Some(Seen::Done)
        } else {
            None
        }
    }

    /// Whether a job `id` is stored (waiting or in flight).
    pub(super) fn holds(&self, id: &JobId) -> bool {
        self.jobs.contains_key(id)
    }

    /// Stores a new job due at `due` (ms since the epoch), in `group` if one is given, as
    /// `queue_push_many.lua` does: a grouped job due now is ready at once.
    pub(super) fn store_new(&mut self, id: &JobId, envelope: Vec<u8>, due: i64, group: Option<&JobGroup>) {
        self.jobs.insert(id.clone(), envelope);
        if let Some(group) = group {
            self.fair.join(id, group);
            if due <= now_ms() {
                self.due_of.insert(id.clone(), due);
                self.fair.make_ready(id.clone(), due);
                self.wake.send_modify(|n| *n = n.wrapping_add(1));
                return;
            }
        }
        self.schedule(id.clone(), due);
    }

    /// Makes waiting or returning job `id` due now, ahead of every group's turn when the queue
    /// has groups: the lock it waits for was handed to it (`hand_now` of `queue_prelude.lua`).
    pub(super) fn hand_now(&mut self, id: &JobId, now: i64) {
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
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Moves job `id`, already out of the waiting and in-flight sets, to the dead-letter set at
    /// `now` with `reason` (`bury_now` of `queue_prelude.lua`).
    fn bury_now(&mut self, id: &JobId, reason: &str, now: i64) {
        self.dead.insert(id.clone(), (now, reason.to_string()));
        self.expiries.remove(id);
        self.handed.remove(id);
    }

    /// Replaces the envelope of the stored job `id`.
    pub(super) fn replace_envelope(&mut self, id: &JobId, envelope: Vec<u8>) {
        self.jobs.insert(id.clone(), envelope);
    }

    /// Takes `id` out of the waiting set (claimed, cancelled, buried, purged): it is no longer
    /// its key's pending job either.
    pub(super) fn unschedule(&mut self, id: &JobId) -> bool {
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
    pub(super) fn entries(&self, set: JobSet, after: Option<&ListCursor>, limit: usize) -> Vec<(i64, JobId)> {
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
    pub(super) fn record(&mut self, counters: Counters, now: i64, counts: &[(&str, u64)]) {
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
    fn keep_finished(&mut self, id: &JobId, now: i64, retention: Retention) {
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
    pub(super) fn drop_lease(&mut self, id: &JobId) {
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
    fn is_held_by(&self, id: &JobId, hold: Hold) -> bool {
        self.leases.get(id).is_some_and(|(_, held)| *held == hold)
    }

    /// Ends `hold`'s lease on `id`; `false` when that lease does not hold it.
    fn end_lease(&mut self, id: &JobId, hold: Hold) -> bool {
        if !self.is_held_by(id, hold) {
            return false;
        }
        self.drop_lease(id);
        true
    }

    /// Moves the deadline of `hold`'s claim's lease to `deadline`, for every job it holds.
    fn extend_claim(&mut self, hold: Hold, deadline: i64) {
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

impl MemoryStore {
    pub(super) fn with_queue<R>(&self, queue: &QueueName, f: impl FnOnce(&mut QueueState) -> R) -> R {
        let mut queues = self.queues();
        f(queues.entry(queue.clone()).or_default())
    }
}

impl MemoryStore {
    /// Makes the waiting job `id` due `after` from now, if sooner (see `queue_promote.lua`).
    pub(super) fn promote_now(&self, queue: &QueueName, id: &JobId, after: Duration) -> Promotion {
        self.with_queue(queue, |q| {
            if let Some(due) = q.due_of.get(id).copied() {
                let now = now_ms();
                let at = after_epoch_ms(now, after);
                if at <= now && q.fair.on() {
                    q.hand_now(id, now);
                } else if due > at {
                    q.schedule(id.clone(), at);
                }
                Promotion::Promoted
            } else if q.leases.contains_key(id) {
                // Its run may be on its way back to wait: it comes back due at once.
                q.handed.insert(id.clone());
                Promotion::Running
            } else {
                Promotion::Gone
            }
        })
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
            let stored = jobs
                .iter()
                .take(MAX_PAGE)
                .map(|(id, envelope)| {
                    if q.jobs.contains_key(id) {
                        return false;
                    }
                    q.store_new(id, envelope.clone(), due, group);
                    true
                })
                .collect();
            (from_epoch_ms(due), stored)
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
        let ClaimLimits {
            max_envelope,
            max_expiries,
        } = limits;
        Ok(self.with_queue(queue, |q| {
            let now = now_ms();
            if q.paused {
                return ClaimBatch {
                    jobs: Vec::new(),
                    next_in: None,
                };
            }
            let dead_before = q.dead.len();
            // Strictly past the deadline, as in the claim script: `now` is rounded down to the
            // ms, and a lease must never end early.
            let expired: Vec<(i64, JobId)> = q
                .inflight
                .iter()
                .take_while(|(deadline, _)| *deadline < now)
                .take(max)
                .cloned()
                .collect();
            for (deadline, id) in expired {
                q.drop_lease(&id);
                let expiries = q.expiries.entry(id.clone()).or_insert(0);
                *expiries += 1;
                if max_expiries > 0 && *expiries >= max_expiries {
                    let reason = lease_ran_out(*expiries);
                    q.expiries.remove(&id);
                    q.dead.insert(id, (now, reason));
                } else {
                    q.schedule(id, deadline);
                }
            }
            let deadline = after_epoch_ms(now, lease.min(MAX_LEASE));
            let due: Vec<(i64, JobId)> = if q.fair.on() {
                // Due jobs become ready first, a page per claim; the claim takes what the
                // groups' turns say.
                let became: Vec<(i64, JobId)> = q
                    .delayed
                    .iter()
                    .take_while(|(due, _)| *due <= now)
                    .take(MAX_PAGE)
                    .cloned()
                    .collect();
                for (due, id) in became {
                    q.delayed.remove(&(due, id.clone()));
                    q.fair.make_ready(id, due);
                }
                q.fair
                    .in_order()
                    .take(max)
                    .map(|id| (q.due_of.get(id).copied().unwrap_or(now), id.clone()))
                    .collect()
            } else {
                q.delayed
                    .iter()
                    .take_while(|(due, _)| *due <= now)
                    .take(max)
                    .cloned()
                    .collect()
            };
            let mut jobs = Vec::with_capacity(due.len());
            // The claim is named by its first job's fence.
            let mut first_fence = None;
            for (due, id) in due {
                q.unschedule(&id);
                let envelope = match q.jobs.get(&id) {
                    None => Err(NO_ENVELOPE.to_string()),
                    Some(bytes) if bytes.is_empty() => Err(NO_ENVELOPE.to_string()),
                    Some(bytes) if bytes.len() > max_envelope => Err(oversized(bytes.len(), max_envelope)),
                    Some(bytes) => Ok(bytes.clone()),
                };
                match envelope {
                    Ok(envelope) => {
                        let fence =
                            crate::lock::next_fences(&mut q.fence, 1, crate::store::time::now_micros());
                        let claim = *first_fence.get_or_insert(fence);
                        let hold = Hold { token, claim, fence };
                        q.inflight.insert((deadline, id.clone()));
                        q.leases.insert(id.clone(), (deadline, hold));
                        q.claims.entry((token, claim)).or_default().insert(id.clone());
                        jobs.push(RawClaim {
                            id,
                            due: from_epoch_ms(due),
                            envelope,
                            fence,
                            claim,
                        });
                    }
                    Err(reason) => {
                        q.dead.insert(id, (now, reason));
                    }
                }
            }
            let lags = jobs
                .iter()
                .map(|job| u64::try_from(now - to_epoch_ms(job.due)).unwrap_or(0));
            let lag_max = lags.clone().max().unwrap_or(0);
            q.record(
                counters,
                now,
                &[
                    ("claimed", jobs.len() as u64),
                    ("lag_ms", lags.sum()),
                    ("lag_max_ms", lag_max),
                    ("dead", (q.dead.len() - dead_before) as u64),
                ],
            );
            // A lease is recoverable 1 ms after its deadline (see above).
            let next_due = match q.fair.ready_count() {
                0 => q.delayed.first().map(|(due, _)| *due),
                _ => Some(now),
            };
            let next_recovery = q.inflight.first().map(|(deadline, _)| deadline.saturating_add(1));
            let next_at = next_due.into_iter().chain(next_recovery).min();
            ClaimBatch {
                jobs,
                next_in: next_at.map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0))),
            }
        }))
    }

    async fn ack(
        &self,
        queue: &QueueName,
        jobs: &[(&JobId, Hold)],
        retention: Option<Retention>,
        counters: Counters,
    ) -> Result<Vec<bool>, StoreError> {
        Ok(self.with_queue(queue, |q| {
            let now = now_ms();
            let acked: Vec<bool> = jobs
                .iter()
                .take(MAX_PAGE)
                .map(|(id, hold)| {
                    let ended = q.end_lease(id, *hold);
                    if ended {
                        match retention {
                            Some(retention) => q.keep_finished(id, now, retention),
                            None => drop(q.jobs.remove(*id)),
                        }
                        q.fair.forget(id);
                        q.expiries.remove(*id);
                        q.handed.remove(*id);
                    }
                    ended
                })
                .collect();
            let done = acked.iter().filter(|acked| **acked).count() as u64;
            if done > 0 {
                q.record(counters, now, &[("done", done)]);
            }
            acked
        }))
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
        Ok(self.with_queue(queue, |q| {
            if !q.end_lease(id, hold) {
                return None;
            }
            // A new envelope records a failed attempt; without one, the job only waits its turn.
            q.record(
                counters,
                now_ms(),
                &[(if envelope.is_some() { "failed" } else { "postponed" }, 1)],
            );
            if let Some(envelope) = envelope {
                q.jobs.insert(id.clone(), envelope);
            }
            // Its lock was handed to it while it ran: its turn is now, ahead of its group's.
            let now = now_ms();
            if q.handed.remove(id) {
                q.hand_now(id, now);
                return Some(from_epoch_ms(now));
            }
            let due = after_epoch_ms(now, delay);
            q.schedule(id.clone(), due);
            Some(from_epoch_ms(due))
        }))
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
            if !q.end_lease(id, hold) {
                return false;
            }
            if let Some(envelope) = envelope {
                q.jobs.insert(id.clone(), envelope);
            }
            let now = now_ms();
            q.bury_now(id, reason, now);
            q.record(counters, now, &[("dead", 1)]);
            true
        }))
    }

    async fn bury_waiting(
        &self,
        queue: &QueueName,
        id: &JobId,
        reason: &str,
        counters: Counters,
    ) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| {
            if !q.unschedule(id) {
                return false;
            }
            let now = now_ms();
            q.bury_now(id, reason, now);
            q.record(counters, now, &[("dead", 1), ("superseded", 1)]);
            true
        }))
    }

    async fn extend_lease(
        &self,
        queue: &QueueName,
        id: &JobId,
        hold: Hold,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.with_queue(queue, |q| {
            if !q.is_held_by(id, hold) {
                return false;
            }
            q.extend_claim(hold, after_epoch_ms(now_ms(), lease.min(MAX_LEASE)));
            true
        }))
    }

    async fn cancel(&self, queue: &QueueName, id: &JobId) -> Result<Cancelled, StoreError> {
        Ok(self.with_queue(queue, |q| {
            if q.leases.contains_key(id) {
                return Cancelled::InFlight;
            }
            let waiting = q.unschedule(id);
            let dead = q.dead.remove(id).is_some();
            let bytes = q.jobs.remove(id).is_some();
            q.fair.forget(id);
            q.expiries.remove(id);
            if waiting || dead || bytes {
                Cancelled::Deleted
            } else {
                Cancelled::NotFound
            }
        }))
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
