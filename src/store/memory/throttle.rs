//! The throttle operations of the in-memory store: the steps of `lua/throttle.lua` under one
//! mutex, by the system clock (the clock queue due times follow, so a booked slot is a due time).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::{MemoryStore, lock_unpoisoned};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::Waiter;
use crate::store::time::now_micros;
use crate::throttle::{Admission, BOOKING_RETENTION, Booking, Rate, ThrottleStore};

#[derive(Default)]
pub(super) struct ThrottleState {
    keys: HashMap<LockKey, KeySchedule>,
    /// How many keys there were after the last sweep: the next sweeps when twice as many are.
    swept_at: usize,
}

/// One key's times (the script's `free_at` and `run_free_at`) and bookings, in microseconds
/// since the epoch.
#[derive(Default)]
struct KeySchedule {
    free_at: u64,
    run_free_at: u64,
    /// The tolerance of the last rate the key was decided at: past `max(free_at, run_free_at) +
    /// tolerance`, the schedule no longer matters.
    tolerance: u64,
    bookings: HashMap<Waiter, u64>,
    /// The bookings of jobs sent back to wait for their start (the script's `>` entries):
    /// waiter -> its start, its run already counted.
    sent_back: HashMap<Waiter, u64>,
    /// Until when the key was closed (0: never), for the listing.
    closed_until: u64,
}

/// The most a job waits for its start within its run (its scheduler's place held all that
/// while); a job told to wait longer goes back to wait in the queue (the script's constant).
const MAX_RUN_WAIT_US: u64 = 1_000_000;

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl KeySchedule {
    /// When the next slot opens.
    fn opens_at(&self) -> u64 {
        self.free_at.max(self.run_free_at)
    }

    /// When the schedule stops mattering: an absent key would decide the same after it.
    fn forget_at(&self) -> u64 {
        self.opens_at().saturating_add(self.tolerance)
    }

    /// Nothing left that an absent key would not decide the same way.
    fn is_stale(&self, now: u64) -> bool {
        self.bookings.is_empty() && self.sent_back.is_empty() && self.forget_at() <= now
    }

    /// One more run, starting at `at`.
    fn run_at(&mut self, at: u64, interval: u64, tolerance: u64) {
        self.run_free_at = self
            .run_free_at
            .max(at.saturating_sub(tolerance))
            .saturating_add(interval);
    }

    fn drop_stale_bookings(&mut self, now: u64) {
        let retention = micros(BOOKING_RETENTION);
        self.bookings
            .retain(|_, slot| slot.saturating_add(retention) > now);
        self.sent_back
            .retain(|_, start| start.saturating_add(retention) > now);
    }
}

impl ThrottleState {
    /// The script's steps for a request, booked as `booked_as` or not.
    fn admit(&mut self, key: &LockKey, rate: Rate, booked_as: Option<&Waiter>, now: u64) -> Admission {
        let (interval, tolerance) = (micros(rate.interval()), micros(rate.tolerance()));
        let schedule = self.schedule(key, now, tolerance);
        if let Some(waiter) = booked_as {
            // Sent back to wait for its start: its run was counted then.
            if let Some(start) = schedule.sent_back.remove(waiter) {
                return Admission::Redeemed {
                    wait: Duration::from_micros(start.saturating_sub(now)),
                };
            }
            if let Some(slot) = schedule.bookings.remove(waiter) {
                let start = now.max(slot).max(schedule.run_free_at);
                schedule.run_at(start, interval, tolerance);
                // A job would hold its scheduler's place all that while: it goes back to wait.
                if start - now > MAX_RUN_WAIT_US && waiter.as_job().is_some() {
                    schedule.sent_back.insert(waiter.clone(), start);
                    return Admission::Throttled {
                        opens_in: Duration::from_micros(start - now),
                    };
                }
                return Admission::Redeemed {
                    wait: Duration::from_micros(start - now),
                };
            }
        }
        let opens = schedule.opens_at();
        if opens > now {
            return Admission::Throttled {
                opens_in: Duration::from_micros(opens - now),
            };
        }
        schedule.free_at = schedule
            .free_at
            .max(now.saturating_sub(tolerance))
            .saturating_add(interval);
        schedule.run_at(now, interval, tolerance);
        Admission::Admitted
    }

    /// The script's steps for a booking by `waiter`: its slot, in microseconds.
    fn book(&mut self, key: &LockKey, rate: Rate, waiter: &Waiter, now: u64) -> u64 {
        let (interval, tolerance) = (micros(rate.interval()), micros(rate.tolerance()));
        let schedule = self.schedule(key, now, tolerance);
        if let Some(&slot) = schedule.bookings.get(waiter).or(schedule.sent_back.get(waiter)) {
            return slot;
        }
        let slot = schedule.free_at.max(now);
        schedule.free_at = schedule
            .free_at
            .max(now.saturating_sub(tolerance))
            .saturating_add(interval);
        schedule.bookings.insert(waiter.clone(), slot);
        schedule.drop_stale_bookings(now);
        slot
    }

    /// The script's steps for closing `key` for `duration`: how long until it opens, in
    /// microseconds.
    fn close(&mut self, key: &LockKey, rate: Rate, duration: Duration, now: u64) -> u64 {
        let schedule = self.schedule(key, now, micros(rate.tolerance()));
        let until = now.saturating_add(micros(duration));
        schedule.free_at = schedule.free_at.max(until);
        schedule.run_free_at = schedule.run_free_at.max(until);
        schedule.closed_until = schedule.closed_until.max(until);
        schedule.opens_at().saturating_sub(now)
    }

    fn schedule(&mut self, key: &LockKey, now: u64, tolerance: u64) -> &mut KeySchedule {
        self.sweep(now);
        let schedule = self.keys.entry(key.clone()).or_default();
        schedule.tolerance = tolerance;
        schedule
    }

    /// Forgets the keys whose state no longer matters, when their number has doubled since the
    /// last sweep: amortized constant work per call, memory bounded by the keys in use.
    fn sweep(&mut self, now: u64) {
        if self.keys.len() < self.swept_at.saturating_mul(2).max(64) {
            return;
        }
        for schedule in self.keys.values_mut() {
            schedule.drop_stale_bookings(now);
        }
        self.keys.retain(|_, schedule| !schedule.is_stale(now));
        self.swept_at = self.keys.len();
    }
}

impl MemoryStore {
    /// Up to `limit` throttled keys whose schedule still matters, for
    /// [`ListLocks`](crate::store::ListLocks).
    pub(super) fn list_throttles(&self, limit: usize) -> Vec<crate::store::LockInfo> {
        let now = now_micros();
        lock_unpoisoned(&self.throttles)
            .keys
            .iter()
            .filter(|(_, schedule)| !schedule.is_stale(now))
            .take(limit)
            .map(|(key, schedule)| crate::store::LockInfo {
                key: key.as_str().to_string(),
                remaining: Some(Duration::from_micros(schedule.forget_at().saturating_sub(now))),
                fence: 0,
                waiters: (schedule.bookings.len() + schedule.sent_back.len()) as u64,
                holders: 0,
                limit: None,
                reserved_for: None,
                writing: false,
                writers_waiting: 0,
                next_slot: Some(Duration::from_micros(schedule.opens_at().saturating_sub(now))),
                closed_for: (schedule.closed_until > now)
                    .then(|| Duration::from_micros(schedule.closed_until - now)),
            })
            .collect()
    }
}

impl ThrottleStore for MemoryStore {
    async fn admit(
        &self,
        key: &LockKey,
        rate: Rate,
        booked_as: Option<&Waiter>,
    ) -> Result<Admission, StoreError> {
        Ok(lock_unpoisoned(&self.throttles).admit(key, rate, booked_as, now_micros()))
    }

    async fn book(&self, key: &LockKey, rate: Rate, waiter: &Waiter) -> Result<Booking, StoreError> {
        let now = now_micros();
        let slot = lock_unpoisoned(&self.throttles).book(key, rate, waiter, now);
        Ok(Booking {
            at: SystemTime::UNIX_EPOCH + Duration::from_micros(slot),
            wait: Duration::from_micros(slot.saturating_sub(now)),
        })
    }

    async fn close_for(&self, key: &LockKey, rate: Rate, duration: Duration) -> Result<Duration, StoreError> {
        let opens_in = lock_unpoisoned(&self.throttles).close(key, rate, duration, now_micros());
        Ok(Duration::from_micros(opens_in))
    }
}
