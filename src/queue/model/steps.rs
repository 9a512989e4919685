//! The steps of the queue's scripts on its model: a push, a claim (and the leases that ran out,
//! taken back first), an ack, a retry, a burial, a lease's extension, a cancel, a promotion.

use std::collections::BTreeMap;
use std::time::Duration;

use super::QueueModel;
use crate::lock::LockToken;
use crate::queue::rules::{NO_ENVELOPE, lease_ran_out, oversized};
use crate::queue::{
    Cancelled, ClaimBatch, ClaimLimits, Counters, Hold, JobGroup, JobId, MAX_LEASE, MAX_PAGE, RawClaim,
    Retention,
};
use crate::time::{after_epoch_ms, from_epoch_ms, to_epoch_ms};

/// Where a promoted job was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promotion {
    /// Waiting: it is due now.
    Promoted,
    /// In flight: its run is under way and will take the reservation.
    Running,
    /// Not waiting nor running: nobody will take the reservation.
    Gone,
}

impl QueueModel {
    /// Makes the waiting job `id` due `after` from `now` (ms since the epoch), if sooner; a
    /// job in flight comes back due at once (`queue_promote.lua`). A store's hand-over calls it
    /// for the waiter a lock key is handed to (due now) and for the runner-up in its line (due
    /// when the reservation runs out).
    pub fn promote(&mut self, id: &JobId, after: Duration, now: i64) -> Promotion {
        {
            if let Some(due) = self.due_of.get(id).copied() {
                let at = after_epoch_ms(now, after);
                if at <= now && self.fair.on() {
                    self.hand_now(id, now);
                } else if due > at {
                    self.schedule(id.clone(), at);
                }
                Promotion::Promoted
            } else if self.leases.contains_key(id) {
                // Its run may be on its way back to wait: it comes back due at once.
                self.handed.insert(id.clone());
                Promotion::Running
            } else {
                Promotion::Gone
            }
        }
    }

    /// Stores each of `jobs` not stored yet (up to a page), due at `due` (ms since the epoch),
    /// in `group` if given; whether each was stored (`queue_push_many.lua`).
    pub fn push_many(
        &mut self,
        jobs: &[(JobId, Vec<u8>)],
        due: i64,
        group: Option<&JobGroup>,
        now: i64,
    ) -> Vec<bool> {
        {
            let stored: Vec<bool> = jobs
                .iter()
                .take(MAX_PAGE)
                .map(|(id, envelope)| {
                    if self.jobs.contains_key(id) {
                        return false;
                    }
                    self.store_new(id, envelope.clone(), due, group, now);
                    true
                })
                .collect();
            stored
        }
    }

    /// Claims up to `max` due jobs for `token`'s claim, under one lease of `lease` (the
    /// claim is named by its first job's fence); first, the jobs whose lease ran out go back
    /// to wait (or to the dead, past `limits.max_expiries`), and jobs that cannot be decoded go
    /// to the dead (`queue_claim.lua`). Fencing tokens start no lower than the clock in µs.
    pub fn claim(
        &mut self,
        max: usize,
        lease: Duration,
        token: LockToken,
        limits: ClaimLimits,
        counters: Counters,
        now: i64,
    ) -> ClaimBatch {
        let ClaimLimits {
            max_envelope,
            max_expiries,
        } = limits;
        {
            if self.paused {
                return ClaimBatch {
                    jobs: Vec::new(),
                    next_in: None,
                };
            }
            let dead_before = self.dead.len();
            for (deadline, id) in self.expired_claims(now, max) {
                self.drop_lease(&id);
                let expiries = self.expiries.entry(id.clone()).or_insert(0);
                *expiries += 1;
                if max_expiries > 0 && *expiries >= max_expiries {
                    let reason = lease_ran_out(*expiries);
                    self.expiries.remove(&id);
                    self.dead.insert(id, (now, reason));
                } else {
                    self.schedule(id, deadline);
                }
            }
            let deadline = after_epoch_ms(now, lease.min(MAX_LEASE));
            let due: Vec<(i64, JobId)> = if self.fair.on() {
                // Due jobs become ready first, a page per claim; the claim takes what the
                // groups' turns say.
                let became: Vec<(i64, JobId)> = self
                    .delayed
                    .iter()
                    .take_while(|(due, _)| *due <= now)
                    .take(MAX_PAGE)
                    .cloned()
                    .collect();
                for (due, id) in became {
                    self.delayed.remove(&(due, id.clone()));
                    self.fair.make_ready(id, due);
                }
                self.fair
                    .in_order()
                    .take(max)
                    .map(|id| (self.due_of.get(id).copied().unwrap_or(now), id.clone()))
                    .collect()
            } else {
                self.delayed
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
                self.unschedule(&id);
                let envelope = match self.jobs.get(&id) {
                    None => Err(NO_ENVELOPE.to_string()),
                    Some(bytes) if bytes.is_empty() => Err(NO_ENVELOPE.to_string()),
                    Some(bytes) if bytes.len() > max_envelope => Err(oversized(bytes.len(), max_envelope)),
                    Some(bytes) => Ok(bytes.clone()),
                };
                match envelope {
                    Ok(envelope) => {
                        let fence = crate::lock::next_fences(
                            &mut self.fence,
                            1,
                            now.saturating_mul(1000).max(0) as u64,
                        );
                        let claim = *first_fence.get_or_insert(fence);
                        let hold = Hold { token, claim, fence };
                        self.inflight.insert((deadline, id.clone()));
                        self.leases.insert(id.clone(), (deadline, hold));
                        self.claims.entry((token, claim)).or_default().insert(id.clone());
                        jobs.push(RawClaim {
                            id,
                            due: from_epoch_ms(due),
                            envelope,
                            fence,
                            claim,
                        });
                    }
                    Err(reason) => {
                        self.dead.insert(id, (now, reason));
                    }
                }
            }
            let lags = jobs
                .iter()
                .map(|job| u64::try_from(now - to_epoch_ms(job.due)).unwrap_or(0));
            let lag_max = lags.clone().max().unwrap_or(0);
            self.record(
                counters,
                now,
                &[
                    ("claimed", jobs.len() as u64),
                    ("lag_ms", lags.sum()),
                    ("lag_max_ms", lag_max),
                    ("dead", (self.dead.len() - dead_before) as u64),
                ],
            );
            // A lease is recoverable 1 ms after its deadline (see above).
            let next_due = match self.fair.ready_count() {
                0 => self.delayed.first().map(|(due, _)| *due),
                _ => Some(now),
            };
            let next_recovery = self
                .inflight
                .first()
                .map(|(deadline, _)| deadline.saturating_add(1));
            let next_at = next_due.into_iter().chain(next_recovery).min();
            ClaimBatch {
                jobs,
                next_in: next_at.map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0))),
            }
        }
    }

    /// Acknowledges each of `jobs` its hold still holds (up to a page): done, kept under
    /// `retention` if given. Whether each was (`queue_ack.lua`).
    pub fn ack(
        &mut self,
        jobs: &[(&JobId, Hold)],
        retention: Option<Retention>,
        counters: Counters,
        now: i64,
    ) -> Vec<bool> {
        {
            let acked: Vec<bool> = jobs
                .iter()
                .take(MAX_PAGE)
                .map(|(id, hold)| {
                    let ended = self.end_lease(id, *hold);
                    if ended {
                        match retention {
                            Some(retention) => self.keep_finished(id, now, retention),
                            None => drop(self.jobs.remove(*id)),
                        }
                        self.fair.forget(id);
                        self.expiries.remove(*id);
                        self.handed.remove(*id);
                    }
                    ended
                })
                .collect();
            let done = acked.iter().filter(|acked| **acked).count() as u64;
            if done > 0 {
                self.record(counters, now, &[("done", done)]);
            }
            acked
        }
    }

    /// Sends job `id`, still held by `hold`, back to wait `delay` (at once, when its lock was
    /// handed to it while it ran), with a new envelope if given (a failed attempt). When it is
    /// due, ms since the epoch; `None` when `hold` no longer holds it (`queue_retry.lua`).
    pub fn retry(
        &mut self,
        id: &JobId,
        hold: Hold,
        envelope: Option<Vec<u8>>,
        delay: Duration,
        counters: Counters,
        now: i64,
    ) -> Option<i64> {
        {
            if !self.end_lease(id, hold) {
                return None;
            }
            // A new envelope records a failed attempt; without one, the job only waits its turn.
            self.record(
                counters,
                now,
                &[(if envelope.is_some() { "failed" } else { "postponed" }, 1)],
            );
            if let Some(envelope) = envelope {
                self.jobs.insert(id.clone(), envelope);
            }
            // Its lock was handed to it while it ran: its turn is now, ahead of its group's.
            if self.handed.remove(id) {
                self.hand_now(id, now);
                return Some(now);
            }
            let due = after_epoch_ms(now, delay);
            self.schedule(id.clone(), due);
            Some(due)
        }
    }

    /// Moves job `id`, still held by `hold`, to the dead with `reason` (and a new envelope if
    /// given); `false` when `hold` no longer holds it (`queue_bury.lua`).
    pub fn bury(
        &mut self,
        id: &JobId,
        hold: Hold,
        reason: &str,
        envelope: Option<Vec<u8>>,
        counters: Counters,
        now: i64,
    ) -> bool {
        {
            if !self.end_lease(id, hold) {
                return false;
            }
            if let Some(envelope) = envelope {
                self.jobs.insert(id.clone(), envelope);
            }
            self.bury_now(id, reason, now);
            self.record(counters, now, &[("dead", 1)]);
            true
        }
    }

    /// Moves the waiting job `id` to the dead with `reason` (superseded); `false` when it does
    /// not wait (`queue_bury_waiting.lua`).
    pub fn bury_waiting(&mut self, id: &JobId, reason: &str, counters: Counters, now: i64) -> bool {
        {
            if !self.unschedule(id) {
                return false;
            }
            self.bury_now(id, reason, now);
            self.record(counters, now, &[("dead", 1), ("superseded", 1)]);
            true
        }
    }

    /// Moves the deadline of the lease of `hold`'s claim to `lease` from now, for every job it
    /// holds; `false` when it no longer holds `id` (`queue_extend.lua`).
    pub fn extend_lease(&mut self, id: &JobId, hold: Hold, lease: Duration, now: i64) -> bool {
        {
            if !self.is_held_by(id, hold) {
                return false;
            }
            self.extend_claim(hold, after_epoch_ms(now, lease.min(MAX_LEASE)));
            true
        }
    }

    /// Deletes job `id` unless it is in flight (`queue_cancel.lua`).
    pub fn cancel(&mut self, id: &JobId) -> Cancelled {
        {
            if self.leases.contains_key(id) {
                return Cancelled::InFlight;
            }
            let waiting = self.unschedule(id);
            let dead = self.dead.remove(id).is_some();
            let bytes = self.jobs.remove(id).is_some();
            self.fair.forget(id);
            self.expiries.remove(id);
            if waiting || dead || bytes {
                Cancelled::Deleted
            } else {
                Cancelled::NotFound
            }
        }
    }

    /// The jobs of the leases that ran out, with their lease's deadline: strictly past it, as
    /// in the claim script (`now` is rounded down to the ms, and a lease must never end early).
    /// Leases are taken whole, in the order of their deadlines (then of their names, as
    /// `INFLIGHT` orders them), each claim's jobs in the order it took them, until `max` jobs
    /// came back.
    fn expired_claims(&self, now: i64, max: usize) -> Vec<(i64, JobId)> {
        // Each lease that ran out, by (deadline, name): its jobs by fence.
        let mut leases: BTreeMap<(i64, String), BTreeMap<u64, JobId>> = BTreeMap::new();
        for (deadline, id) in self.inflight.iter().take_while(|(deadline, _)| *deadline < now) {
            // Bounded work: `max` leases give `max` jobs at least, and a later deadline's lease
            // comes after every one found (the jobs of one lease share its deadline).
            if leases.len() >= max && leases.keys().next_back().is_some_and(|(last, _)| deadline > last) {
                break;
            }
            let Some((_, hold)) = self.leases.get(id) else {
                continue;
            };
            let name = format!("{}:{}", String::from_utf8_lossy(&hold.token.to_hex()), hold.claim);
            leases
                .entry((*deadline, name))
                .or_default()
                .insert(hold.fence, id.clone());
        }
        let mut back = Vec::new();
        for ((deadline, _), jobs) in leases {
            if back.len() >= max {
                break;
            }
            back.extend(jobs.into_values().map(|id| (deadline, id)));
        }
        back
    }
}
