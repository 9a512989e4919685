//! The throttle's state machine in plain Rust: what `throttle.lua` and `throttle_close.lua`
//! do (GCRA over a key's schedule, booked slots, a key closed by an upstream's "retry after"),
//! written once, with the clock passed in (µs since the epoch, as the scripts read `TIME`).
//!
//! [`ThrottleModel`] is the in-memory store's throttle (the store adds a mutex and the system
//! clock), and the reference the scripts are checked against (`tests/throttle_model.rs`,
//! `tests/throttle_protocol.rs`).
//!
//! ```
//! use std::time::Duration;
//! use redefer::throttle::model::ThrottleModel;
//! use redefer::throttle::{Admission, Rate};
//! use redefer::LockKey;
//!
//! let mut model = ThrottleModel::new();
//! let key = LockKey::new("api.example.com")?;
//! let rate = Rate::per_second(2)?;
//! let now = 1_000_000_000;
//! assert_eq!(model.admit(&key, rate, None, now), Admission::Admitted);
//! // Closed for a second by an upstream's 429: nothing is admitted before then.
//! assert_eq!(model.close(&key, rate, Duration::from_secs(1), now), 1_000_000);
//! assert!(matches!(model.admit(&key, rate, None, now + 999_999), Admission::Throttled { .. }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::time::Duration;

use super::{Admission, BOOKING_RETENTION, Rate};
use crate::guard::Waiter;
use crate::key::LockKey;

/// The schedule of every throttled key, by a clock in microseconds since the epoch passed to
/// each operation. See the [module](self).
#[derive(Debug, Clone, Default)]
pub struct ThrottleModel {
    pub(crate) keys: HashMap<LockKey, KeySchedule>,
    /// How many keys there were after the last sweep: the next sweeps when twice as many are.
    swept_at: usize,
}

/// One key's times (the script's `free_at` and `run_free_at`) and bookings, in microseconds
/// since the epoch.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySchedule {
    pub(crate) free_at: u64,
    pub(crate) run_free_at: u64,
    /// The tolerance of the last rate the key was decided at: past `max(free_at, run_free_at) +
    /// tolerance`, the schedule no longer matters.
    tolerance: u64,
    pub(crate) bookings: HashMap<Waiter, u64>,
    /// The bookings of jobs sent back to wait for their start (the script's `>` entries):
    /// waiter -> its start, its run already counted.
    pub(crate) sent_back: HashMap<Waiter, u64>,
    /// Until when the key was closed (0: never), for the listing.
    pub(crate) closed_until: u64,
    /// The key's two times when it was closed, while it is: a reopening takes back what the
    /// closing added, never the schedule the closing found.
    before_closing: (u64, u64),
}

/// How many bookings from a closed key's end on a reopening looks at (its script's bounded
/// work): the jobs sent back among them get their runs back. Past them, the key's runs stay
/// where the closing put them.
pub const MAX_REOPENED_WAITERS: usize = 1_000;

/// The most a job waits for its start within its run (its scheduler's place held all that
/// while); a job told to wait longer goes back to wait in the queue (the script's constant).
const MAX_RUN_WAIT_US: u64 = 1_000_000;

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl KeySchedule {
    /// When the next slot opens.
    pub(crate) fn opens_at(&self) -> u64 {
        self.free_at.max(self.run_free_at)
    }

    /// When the schedule stops mattering: an absent key would decide the same after it.
    pub(crate) fn forget_at(&self) -> u64 {
        self.opens_at().saturating_add(self.tolerance)
    }

    /// Nothing left that an absent key would not decide the same way.
    pub(crate) fn is_stale(&self, now: u64) -> bool {
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

impl ThrottleModel {
    /// No key throttled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decides a request on `key` at `now` (µs since the epoch) against `rate`: admitted, a
    /// booking of `booked_as` redeemed, or throttled until the next slot (`throttle.lua`).
    pub fn admit(&mut self, key: &LockKey, rate: Rate, booked_as: Option<&Waiter>, now: u64) -> Admission {
        let (interval, tolerance) = (micros(rate.interval()), micros(rate.tolerance()));
        let schedule = self.schedule_at(key, now, tolerance);
        if let Some(waiter) = booked_as {
            // Sent back to wait for its start: its run was counted then, for then. Claimed
            // after it, the job finds that run spent (others may have taken the runs after
            // it): it takes a turn now, as a booking does.
            let sent_back = schedule.sent_back.remove(waiter);
            if let Some(start) = sent_back
                && start >= now
            {
                return Admission::Redeemed {
                    wait: Duration::from_micros(start - now),
                };
            }
            if let Some(slot) = sent_back.or_else(|| schedule.bookings.remove(waiter)) {
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

    /// Books the next slot of `key` for `waiter` at `now` (µs since the epoch): its slot, in µs
    /// since the epoch; booking again gives the same slot (`throttle.lua`, booking).
    pub fn book(&mut self, key: &LockKey, rate: Rate, waiter: &Waiter, now: u64) -> u64 {
        let (interval, tolerance) = (micros(rate.interval()), micros(rate.tolerance()));
        let schedule = self.schedule_at(key, now, tolerance);
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

    /// Closes `key` for `duration` from `now` (µs since the epoch): its next slot opens no
    /// earlier. How long until it opens, in µs (`throttle_close.lua`).
    pub fn close(&mut self, key: &LockKey, rate: Rate, duration: Duration, now: u64) -> u64 {
        let schedule = self.schedule_at(key, now, micros(rate.tolerance()));
        if schedule.closed_until <= now {
            schedule.before_closing = (schedule.free_at, schedule.run_free_at);
        }
        let until = now.saturating_add(micros(duration));
        schedule.free_at = schedule.free_at.max(until);
        schedule.run_free_at = schedule.run_free_at.max(until);
        schedule.closed_until = schedule.closed_until.max(until);
        schedule.opens_at().saturating_sub(now)
    }

    /// Reopens `key` at `now` (µs since the epoch) if it is closed, as if its closing had ended
    /// now: each of its times moves back by what the closing still held it, and no earlier than
    /// the schedule the closing found (the rate's bound holds across the reopening); the slots
    /// already booked keep their times. The jobs the closing sent back to wait had their runs
    /// counted for then: those runs are given back (each job holds a booking at its start
    /// again, counted when it starts), so that the runs move back with the rest; past
    /// [`MAX_REOPENED_WAITERS`] bookings at or after the closing's end, the runs stay where they
    /// are. How long until its next slot opens, in µs; `None` when it is not closed
    /// (`throttle_reopen.lua`).
    pub fn reopen(&mut self, key: &LockKey, now: u64) -> Option<u64> {
        let schedule = self
            .keys
            .get_mut(key)
            .filter(|schedule| schedule.closed_until > now)?;
        let until = schedule.closed_until;
        let (free_before, runs_before) = schedule.before_closing;
        // The bookings from the closing's end on, in the order the script reads them (by
        // time, then by name as Redis keeps them: a job sent back is named `>` and its waiter).
        let mut waiting: Vec<(u64, String, &Waiter, bool)> = schedule
            .bookings
            .iter()
            .map(|(waiter, slot)| (*slot, waiter.as_str().to_string(), waiter, false))
            .chain(
                schedule
                    .sent_back
                    .iter()
                    .map(|(waiter, start)| (*start, format!(">{}", waiter.as_str()), waiter, true)),
            )
            .filter(|(at, ..)| *at >= until)
            .collect();
        waiting.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let all_given_back = waiting.len() <= MAX_REOPENED_WAITERS;
        let given_back: Vec<(Waiter, u64)> = waiting
            .into_iter()
            .take(MAX_REOPENED_WAITERS)
            .filter(|(.., sent_back)| *sent_back)
            .map(|(start, _, waiter, _)| (waiter.clone(), start))
            .collect();
        for (waiter, start) in given_back {
            schedule.sent_back.remove(&waiter);
            schedule.bookings.insert(waiter, start);
        }
        // A time the closing found later than `until` was not held by it, nor is any of it now.
        let taken_back = |time: u64, before: u64| {
            let held = before.max(until) - before.max(now);
            time.saturating_sub(held).max(now)
        };
        schedule.free_at = taken_back(schedule.free_at, free_before);
        if all_given_back {
            schedule.run_free_at = taken_back(schedule.run_free_at, runs_before);
        }
        schedule.closed_until = 0;
        Some(schedule.opens_at() - now)
    }

    /// `key`'s times: when its next slot opens (`free_at`), and when the next run may start
    /// (`run_free_at`), in µs since the epoch; `None` for a key never decided.
    pub fn times(&self, key: &LockKey) -> Option<(u64, u64)> {
        self.keys
            .get(key)
            .map(|schedule| (schedule.free_at, schedule.run_free_at))
    }

    /// `key`'s bookings: each waiter's slot (its start, for a job sent back to wait for it),
    /// and whether it was sent back, by slot.
    pub fn bookings(&self, key: &LockKey) -> Vec<(Waiter, u64, bool)> {
        let Some(schedule) = self.keys.get(key) else {
            return Vec::new();
        };
        let booked = schedule
            .bookings
            .iter()
            .map(|(waiter, slot)| (waiter.clone(), *slot, false));
        let sent_back = schedule
            .sent_back
            .iter()
            .map(|(waiter, start)| (waiter.clone(), *start, true));
        let mut all: Vec<_> = booked.chain(sent_back).collect();
        all.sort_unstable_by(|a, b| (a.1, a.0.as_str()).cmp(&(b.1, b.0.as_str())));
        all
    }

    fn schedule_at(&mut self, key: &LockKey, now: u64, tolerance: u64) -> &mut KeySchedule {
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
