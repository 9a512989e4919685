//! The throttle in memory: the throttle's model ([`ThrottleModel`]) under one
//! mutex, by the system clock (the clock queue due times follow, so a booked slot is a due time).

use std::time::{Duration, SystemTime};

use super::model::ThrottleModel;
use super::{Admission, Booking, Rate, ThrottleStore};
use crate::error::StoreError;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::store::MemoryStore;
use crate::store::memory::{GuardState, lock_unpoisoned};
use crate::time::now_micros;

/// The throttle keeps no reservations: a booking is its waiter's own slot.
impl GuardState for ThrottleModel {
    fn new(_reservation: Duration) -> Self {
        ThrottleModel::default()
    }
}

impl MemoryStore {
    /// Up to `limit` throttled keys whose schedule still matters, for
    /// [`ListLocks`](crate::store::ListLocks).
    pub(crate) fn list_throttles(&self, limit: usize) -> Vec<crate::store::LockInfo> {
        let now = now_micros();
        lock_unpoisoned(&self.state_of::<ThrottleModel>())
            .keys
            .iter()
            .filter(|(_, schedule)| !schedule.is_stale(now))
            .take(limit)
            .map(|(key, schedule)| {
                crate::store::LockInfo::throttled(
                    key.as_str().to_string(),
                    Some(Duration::from_micros(schedule.forget_at().saturating_sub(now))),
                    (schedule.bookings.len() + schedule.sent_back.len()) as u64,
                    Duration::from_micros(schedule.opens_at().saturating_sub(now)),
                    (schedule.closed_until > now).then(|| Duration::from_micros(schedule.closed_until - now)),
                )
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
        Ok(lock_unpoisoned(&self.state_of::<ThrottleModel>()).admit(key, rate, booked_as, now_micros()))
    }

    async fn book(&self, key: &LockKey, rate: Rate, waiter: &Waiter) -> Result<Booking, StoreError> {
        let now = now_micros();
        let slot = lock_unpoisoned(&self.state_of::<ThrottleModel>()).book(key, rate, waiter, now);
        Ok(Booking {
            at: SystemTime::UNIX_EPOCH + Duration::from_micros(slot),
            wait: Duration::from_micros(slot.saturating_sub(now)),
        })
    }

    async fn close_for(&self, key: &LockKey, rate: Rate, duration: Duration) -> Result<Duration, StoreError> {
        let opens_in =
            lock_unpoisoned(&self.state_of::<ThrottleModel>()).close(key, rate, duration, now_micros());
        Ok(Duration::from_micros(opens_in))
    }

    async fn reopen(&self, key: &LockKey) -> Result<Option<Duration>, StoreError> {
        let opens_in = lock_unpoisoned(&self.state_of::<ThrottleModel>()).reopen(key, now_micros());
        Ok(opens_in.map(Duration::from_micros))
    }
}
