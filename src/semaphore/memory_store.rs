//! The semaphore in memory: the permits' model ([`PermitModel`]) under one mutex, with the
//! announcements of handoffs and the idle sweep.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::model::{PermitModel, PermitsHanded};
use crate::error::StoreError;
use crate::guard::{LineJoin, Waiter};
use crate::key::LockKey;
use crate::lock::model::Now;
use crate::lock::{AcquireRequest, Acquisition, Handoffs, Holders, JoinRequest, LockToken};
use crate::metric_names;
use crate::queue::model::Promotion;
use crate::queue::{JobId, QueueName};
use crate::shrink::shrink;
use crate::store::MemoryStore;
use crate::store::handover::{HandOver, hand_over, reservation_expired};
use crate::store::memory::key_records::KeyRecords;
use crate::store::memory::{GuardState, lock_unpoisoned};

/// The permits of every key, and when their keys were last used.
struct SemaphoreState {
    model: PermitModel,
    records: KeyRecords,
}

impl GuardState for SemaphoreState {
    fn new(reservation: Duration) -> Self {
        SemaphoreState {
            model: PermitModel::new(reservation),
            records: KeyRecords::default(),
        }
    }

    fn reserve_for(&mut self, reservation: Duration) {
        self.model.reservation = reservation;
    }
}

impl SemaphoreState {
    /// Notes a use of `key` and gives the time; forgets what idle keys left, when a sweep is
    /// due. A key unused for a minute holds no live permit (a holder extends its lease every
    /// third of its TTL).
    fn touch(&mut self, key: &LockKey) -> Now {
        let now = Instant::now();
        if let Some(idle) = self.records.touch(key, now) {
            self.model.forget(&idle, self.records.now(now).time);
            shrink(&mut self.model.keys);
        }
        self.records.now(now)
    }

    /// Runs `operation` on the model for `key`, announcing the permits it handed.
    fn on_key<R>(
        &mut self,
        key: &LockKey,
        operation: impl FnOnce(&mut PermitModel, Now) -> (R, PermitsHanded),
    ) -> (R, PermitsHanded) {
        let now = self.touch(key);
        let (answer, handed) = operation(&mut self.model, now);
        for waiter in &handed.reserved {
            self.records.announce(key, waiter);
        }
        (answer, handed)
    }
}

impl MemoryStore {
    fn semaphores(&self) -> Arc<Mutex<SemaphoreState>> {
        self.state_of()
    }

    /// Runs a permit operation on `key`, then finishes its handoffs: logs the dropped waiters,
    /// wakes the reserved ones.
    async fn on_permits<R>(
        &self,
        key: &LockKey,
        permits: u32,
        operation: impl FnOnce(&mut PermitModel, Now) -> (R, PermitsHanded),
    ) -> R {
        let (answer, handed) = lock_unpoisoned(&self.semaphores()).on_key(key, operation);
        for waiter in &handed.dropped {
            reservation_expired(key, Some(waiter));
        }
        let line = PermitLine { store: self, permits };
        hand_over(&line, key, handed.reserved).await;
        answer
    }

    fn leave_permits_now(&self, key: &LockKey, waiter: &Waiter, permits: u32) -> Vec<Waiter> {
        let holders = Holders::Permits(permits);
        let ((), handed) = lock_unpoisoned(&self.semaphores())
            .on_key(key, |model, now| ((), model.leave(key, waiter, holders, now)));
        for dropped in &handed.dropped {
            reservation_expired(key, Some(dropped));
        }
        handed.reserved
    }
}

impl MemoryStore {
    /// Up to `limit` semaphores with permits held or reserved, for [`ListLocks`](crate::store::ListLocks).
    pub(crate) fn list_semaphores(&self, limit: usize) -> Vec<crate::store::LockInfo> {
        let semaphores = self.semaphores();
        let state = lock_unpoisoned(&semaphores);
        let now = state.records.now(Instant::now()).time;
        state
            .model
            .keys
            .iter()
            .filter_map(|(key, permits)| {
                let last = permits.last_deadline().filter(|last| *last > now);
                // A key with a line and no permit out is listed too: its waiters wait.
                if last.is_none() && permits.line.order.is_empty() {
                    return None;
                }
                let reserved: Vec<&str> = permits
                    .reserved
                    .iter()
                    .filter(|(_, deadline)| **deadline > now)
                    .map(|(waiter, _)| waiter.as_str())
                    .collect();
                let live_holders = permits
                    .holders
                    .iter()
                    .filter(|(_, (_, deadline))| *deadline > now);
                Some(crate::store::LockInfo {
                    key: key.as_str().to_string(),
                    remaining: last.map(|last| last - now),
                    fence: permits.fence,
                    waiters: permits.line.order.len() as u64,
                    holders: live_holders.clone().count() as u64,
                    limit: crate::store::list_locks::listed_limit(u64::from(permits.limit)),
                    reserved_for: (!reserved.is_empty()).then(|| reserved.join(" ")),
                    writing: live_holders
                        .into_iter()
                        .any(|(token, _)| permits.writer == Some(*token)),
                    writers_waiting: permits
                        .line
                        .order
                        .values()
                        .filter(|waiter| permits.writers.contains(*waiter))
                        .count() as u64,
                    next_slot: None,
                    closed_for: None,
                    unreadable: None,
                })
            })
            .take(limit)
            .collect()
    }
}

impl MemoryStore {
    pub(crate) async fn acquire_permit_in_line(
        &self,
        key: &LockKey,
        holders: Holders,
        request: AcquireRequest<'_>,
    ) -> Result<Acquisition, StoreError> {
        let acquired = self
            .on_permits(key, holders.limit(), |model, now| {
                let AcquireRequest {
                    token, ttl, waiter, ..
                } = request;
                let acquired = model.acquire(key, token, ttl, holders, waiter, now);
                ((acquired.acquisition, acquired.handoff_waited), acquired.handed)
            })
            .await;
        let (acquisition, handoff_waited) = acquired;
        if let Some(waited) = handoff_waited {
            metric_names::handoff_taken(waited);
        }
        Ok(match acquisition {
            Acquisition::Acquired(fence) => Acquisition::Acquired(request.fenced(fence)),
            held => held,
        })
    }

    pub(crate) async fn extend_permit_lease(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
    ) -> Result<bool, StoreError> {
        let semaphores = self.semaphores();
        let mut state = lock_unpoisoned(&semaphores);
        let now = state.touch(key);
        Ok(state.model.extend(key, token, ttl, holders, now))
    }

    pub(crate) async fn release_permit_lease(
        &self,
        key: &LockKey,
        token: LockToken,
        holders: Holders,
        held_for: Option<Duration>,
    ) -> Result<bool, StoreError> {
        Ok(self
            .on_permits(key, holders.limit(), |model, now| {
                model.release(key, token, holders, held_for, now)
            })
            .await)
    }

    pub(crate) async fn join_permit_line(
        &self,
        key: &LockKey,
        holders: Holders,
        request: JoinRequest<'_>,
    ) -> Result<LineJoin, StoreError> {
        let joined = self
            .on_permits(key, holders.limit(), |model, now| {
                model.join(key, request.waiter, request.replacing, holders, request.cap, now)
            })
            .await;
        Ok(match joined {
            Ok((ahead, evicted)) => LineJoin::Joined { ahead, evicted },
            Err(waiting) => LineJoin::Full { waiting },
        })
    }

    pub(crate) async fn leave_permit_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        holders: Holders,
    ) -> Result<(), StoreError> {
        let permits = holders.limit();
        let handed = self.leave_permits_now(key, waiter, permits);
        let line = PermitLine { store: self, permits };
        hand_over(&line, key, handed).await;
        Ok(())
    }

    pub(crate) fn permit_line_handoffs(&self, key: &LockKey) -> Handoffs {
        lock_unpoisoned(&self.semaphores()).records.handoffs(key)
    }
}

/// A semaphore's line, for a handoff: a waiter whose job is gone leaves the line, and the
/// permit reserved for it goes to the next.
struct PermitLine<'a> {
    store: &'a MemoryStore,
    permits: u32,
}

impl HandOver for PermitLine<'_> {
    async fn promote(&self, queue: &QueueName, id: &JobId, after: Duration) -> Result<Promotion, StoreError> {
        Ok(self.store.promote_now(queue, id, after))
    }

    async fn pass_on(&self, key: &LockKey, waiter: &Waiter) -> Result<Vec<Waiter>, StoreError> {
        Ok(self.store.leave_permits_now(key, waiter, self.permits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Fencing, LockStore};
    use crate::store::lifetimes::IDLE_KEY_TTL;

    /// The semaphore keeps only what is in use, as the mutex does: the permits, counters and
    /// last holds of keys idle for a minute are forgotten; a permit of a long TTL is kept.
    #[tokio::test(start_paused = true)]
    async fn the_state_of_idle_keys_is_forgotten() {
        let store = MemoryStore::new();
        let ttl = Duration::from_secs(5);
        for n in 0..500 {
            let key = LockKey::new(format!("tenant:{n}")).unwrap();
            let token = LockToken::random();
            let taken = store
                .acquire(&key, token, ttl, Holders::Permits(2), None, Fencing::On)
                .await
                .unwrap();
            assert!(matches!(taken, Acquisition::Acquired(Some(_))));
            assert!(
                store
                    .release_holding(&key, token, Holders::Permits(2), Some(ttl / 2))
                    .await
                    .unwrap()
            );
        }
        // A permit that outlives the minute, unextended.
        let long = LockKey::new("tenant:long").unwrap();
        let held = store
            .acquire(
                &long,
                LockToken::random(),
                3 * IDLE_KEY_TTL,
                Holders::Permits(2),
                None,
                Fencing::On,
            )
            .await
            .unwrap();
        assert!(matches!(held, Acquisition::Acquired(_)));
        assert_eq!(lock_unpoisoned(&store.semaphores()).model.keys.len(), 501);

        tokio::time::advance(2 * IDLE_KEY_TTL).await;
        let again = LockKey::new("tenant:7").unwrap();
        store
            .acquire(
                &again,
                LockToken::random(),
                ttl,
                Holders::Permits(2),
                None,
                Fencing::On,
            )
            .await
            .unwrap();
        let semaphores = store.semaphores();
        let state = lock_unpoisoned(&semaphores);
        assert!(state.model.keys.contains_key(&long), "a live permit is kept");
        assert_eq!(
            state.model.keys.len(),
            2,
            "only the key used since and the live permit's are kept"
        );
    }
}
