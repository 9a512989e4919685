//! The throttle operations of the in-memory store: the steps of `lua/throttle.lua` under one
//! mutex, by the system clock (the clock queue due times follow, so a booked slot is a due time).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::{MemoryStore, lock_unpoisoned};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::Waiter;
use crate::throttle::{Admission, BOOKING_RETENTION, Booking, Rate, ThrottleStore};

#[derive(Default)]
pub(super) struct ThrottleState {
    keys: HashMap<LockKey, KeySchedule>,
    /// How many keys there were after the last sweep: the next sweeps when twice as many are.
    swept_at: usize,
}

/// One key's schedule (the script's `free_at` and bookings), in microseconds since the epoch.
struct KeySchedule {
    free_at: u64,
    /// When the state stops mattering: an absent key would decide the same after it.
    forget_at: u64,
    bookings: HashMap<Waiter, u64>,
}

impl KeySchedule {
    fn is_stale(&self, now: u64) -> bool {
        self.forget_at <= now && self.bookings.is_empty()
    }
}

/// The system clock in microseconds since the epoch.
fn now_micros() -> u64 {
    let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl ThrottleState {
    /// The script's steps for one call.
    fn decide(&mut self, key: &LockKey, rate: Rate, book: bool, job: Option<&Waiter>, now: u64) -> (u8, u64, u64) {
        self.sweep(now);
        let schedule = self.keys.entry(key.clone()).or_insert(KeySchedule {
            free_at: 0,
            forget_at: 0,
            bookings: HashMap::new(),
        });
        if let Some(job) = job
            && let Some(&slot) = schedule.bookings.get(job)
        {
            if !book {
                schedule.bookings.remove(job);
                return (2, slot.saturating_sub(now), slot);
            }
            return (3, slot.saturating_sub(now), slot);
        }
        if schedule.free_at > now && !book {
            return (0, schedule.free_at - now, schedule.free_at);
        }
        let (interval, tolerance) = (micros(rate.interval()), micros(rate.tolerance()));
        let slot = schedule.free_at.max(now);
        schedule.free_at = schedule.free_at.max(now.saturating_sub(tolerance)).saturating_add(interval);
        schedule.forget_at = schedule.free_at.saturating_add(tolerance);
        if !book {
            return (1, 0, slot);
        }
        if let Some(job) = job
            && slot > now
        {
            schedule.bookings.insert(job.clone(), slot);
            let retention = micros(BOOKING_RETENTION);
            schedule
                .bookings
                .retain(|_, booked| booked.saturating_add(retention) > now);
        }
        (3, slot - now, slot)
    }

    /// Forgets the keys whose state no longer matters, when their number has doubled since the
    /// last sweep: amortized constant work per call, memory bounded by the keys in use.
    fn sweep(&mut self, now: u64) {
        if self.keys.len() < self.swept_at.saturating_mul(2).max(64) {
            return;
        }
        let retention = micros(BOOKING_RETENTION);
        for schedule in self.keys.values_mut() {
            schedule
                .bookings
                .retain(|_, booked| booked.saturating_add(retention) > now);
        }
        self.keys.retain(|_, schedule| !schedule.is_stale(now));
        self.swept_at = self.keys.len();
    }
}

impl ThrottleStore for MemoryStore {
    async fn admit(&self, key: &LockKey, rate: Rate, booked_as: Option<&Waiter>) -> Result<Admission, StoreError> {
        let (status, wait, _) = lock_unpoisoned(&self.throttles).decide(key, rate, false, booked_as, now_micros());
        Ok(match status {
            1 => Admission::Admitted,
            2 => Admission::Redeemed {
                wait: Duration::from_micros(wait),
            },
            _ => Admission::Throttled {
                opens_in: Duration::from_micros(wait),
            },
        })
    }

    async fn book(&self, key: &LockKey, rate: Rate, job: Option<&Waiter>) -> Result<Booking, StoreError> {
        let (_, wait, slot) = lock_unpoisoned(&self.throttles).decide(key, rate, true, job, now_micros());
        Ok(Booking {
            at: SystemTime::UNIX_EPOCH + Duration::from_micros(slot),
            wait: Duration::from_micros(wait),
        })
    }
}
