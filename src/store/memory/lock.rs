//! The lock operations of the in-memory store: the same steps as the lock scripts, under one
//! mutex instead of Redis's single thread.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::MemoryStore;
use super::key_records::KeyRecords;
use crate::error::StoreError;
use crate::guard::{LineJoin, Waiter};
use crate::key::LockKey;
use crate::lock::model::{Handed, Holder, LockModel, Now};
use crate::lock::{AcquireRequest, Acquisition, Handoffs, JoinRequest, LockToken};
use crate::metric_names;
use crate::shrink::shrink;
use crate::store::handover::{hand_over, hand_over_with_runner_up, reservation_expired};

/// The lock's model under the store's mutex, with what the model leaves to a store: the
/// announcements of handoffs, the requests to stop, and when each key was last used.
pub(crate) struct LockState {
    pub(crate) model: LockModel,
    /// Per-key requests to stop, for holders that listen.
    pub(super) stops: HashMap<LockKey, broadcast::Sender<String>>,
    pub(super) records: KeyRecords,
}

impl LockState {
    pub(super) fn new(reservation: Duration) -> Self {
        LockState {
            model: LockModel::new(reservation),
            stops: HashMap::new(),
            records: KeyRecords::default(),
        }
    }

    /// Notes a use of `key`; forgets what idle keys left, when a sweep is due.
    pub(super) fn touch(&mut self, key: &LockKey, now: Instant) {
        let Some(idle) = self.records.touch(key, now) else {
            return;
        };
        self.model.forget(&idle, self.records.now(now).time);
        self.stops.retain(|_, sender| sender.receiver_count() > 0);
        shrink(&mut self.model.keys);
        shrink(&mut self.stops);
    }

    /// Tells `key`'s listeners whom it was handed to.
    pub(crate) fn announce(&mut self, key: &LockKey, handed: &Handed) {
        if let Some(waiter) = &handed.reserved {
            self.records.announce(key, waiter);
        }
    }
}

impl MemoryStore {
    /// The lock state, with every key of `keys` noted as used, and the time.
    pub(crate) fn with_locks<R>(&self, keys: &[LockKey], f: impl FnOnce(&mut LockState, Now) -> R) -> R {
        let mut state = self.locks();
        let now = Instant::now();
        for key in keys {
            state.touch(key, now);
        }
        let now = state.records.now(now);
        f(&mut state, now)
    }

    pub(super) async fn acquire_lock(
        &self,
        key: &LockKey,
        request: AcquireRequest<'_>,
    ) -> Result<Acquisition, StoreError> {
        let AcquireRequest {
            token, ttl, waiter, ..
        } = request;
        let acquired = self.with_locks(std::slice::from_ref(key), |state, now| {
            let acquired = state.model.acquire(key, token, ttl, waiter, now);
            state.announce(key, &acquired.handed);
            acquired
        });
        if let Some(waited) = acquired.handoff_waited {
            metric_names::handoff_taken(waited);
        }
        reservation_expired(key, acquired.handed.dropped.as_ref());
        hand_over(self, key, acquired.handed.reserved).await;
        Ok(match acquired.acquisition {
            Acquisition::Acquired(fence) => Acquisition::Acquired(request.fenced(fence)),
            held => held,
        })
    }

    pub(super) async fn extend_lock(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.with_locks(std::slice::from_ref(key), |state, now| {
            state.model.extend(key, token, ttl, now)
        }))
    }

    pub(super) async fn release_lock(
        &self,
        key: &LockKey,
        token: LockToken,
        held_for: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let released = self.with_locks(std::slice::from_ref(key), |state, now| {
            let released = state.model.release(key, token, held_for, now)?;
            state.announce(key, &released.handed);
            Some(released)
        });
        let Some(released) = released else {
            return Ok(false);
        };
        hand_over_with_runner_up(
            self,
            key,
            released.handed.reserved,
            released.runner_up,
            self.reservation,
        )
        .await;
        Ok(true)
    }

    pub(super) async fn join_lock_line(
        &self,
        key: &LockKey,
        request: JoinRequest<'_>,
    ) -> Result<LineJoin, StoreError> {
        let joined = self.with_locks(std::slice::from_ref(key), |state, now| {
            let joined = state
                .model
                .join(key, request.waiter, request.replacing, request.cap, now)?;
            state.announce(key, &joined.handed);
            Ok(joined)
        });
        let joined = match joined {
            Ok(joined) => joined,
            Err(waiting) => return Ok(LineJoin::Full { waiting }),
        };
        reservation_expired(key, joined.handed.dropped.as_ref());
        hand_over(self, key, joined.handed.reserved).await;
        Ok(LineJoin::Joined {
            ahead: joined.ahead,
            evicted: joined.evicted,
        })
    }

    pub(super) async fn leave_lock_line(&self, key: &LockKey, waiter: &Waiter) -> Result<(), StoreError> {
        let next = self.pass_on_now(key, waiter);
        hand_over(self, key, next).await;
        Ok(())
    }

    pub(super) fn lock_handoffs(&self, key: &LockKey) -> Handoffs {
        self.with_locks(std::slice::from_ref(key), |state, _| state.records.handoffs(key))
    }

    /// Takes `waiter` out of the line; hands the key on if it was reserved for it.
    pub(super) fn pass_on_now(&self, key: &LockKey, waiter: &Waiter) -> Option<Waiter> {
        self.with_locks(std::slice::from_ref(key), |state, now| {
            let reserved = state.model.leave(key, waiter, now);
            state.announce(
                key,
                &Handed {
                    reserved: reserved.clone(),
                    dropped: None,
                },
            );
            reserved
        })
    }
}

impl crate::store::ListLocks for MemoryStore {
    async fn list_locks(&self, limit: usize) -> Result<Vec<crate::store::LockInfo>, StoreError> {
        let mut locks = {
            let state = self.locks();
            let now = state.records.now(Instant::now()).time;
            let listed = |(key, kept): (&LockKey, &crate::lock::model::KeyState)| {
                let holding = kept.holding.as_ref().filter(|holding| holding.expires > now);
                let reserved_for = match holding.map(|holding| &holding.holder) {
                    Some(Holder::Reserved { waiter, .. }) => Some(waiter.to_string()),
                    _ => None,
                };
                crate::store::LockInfo::mutex(
                    key.as_str().to_string(),
                    holding.map(|holding| holding.expires - now),
                    kept.fence,
                    kept.waiters.order.len() as u64,
                    holding.is_some() && reserved_for.is_none(),
                    reserved_for,
                )
            };
            let is_held = |kept: &crate::lock::model::KeyState| {
                kept.holding.as_ref().is_some_and(|holding| holding.expires > now)
            };
            let keys = &state.model.keys;
            let mut held: Vec<_> = keys
                .iter()
                .filter(|(_, kept)| is_held(kept))
                .take(limit)
                .map(listed)
                .collect();
            // Keys with a line and no holder (a reservation ran out unused): their waiters wait.
            let unheld = keys
                .iter()
                .filter(|(_, kept)| !is_held(kept) && !kept.waiters.order.is_empty())
                .take(limit.saturating_sub(held.len()))
                .map(listed);
            held.extend(unheld);
            held
        };
        locks.extend(self.list_semaphores(limit - locks.len()));
        locks.extend(self.list_throttles(limit - locks.len()));
        Ok(locks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Fencing, Holders, LockStore};
    use crate::store::lifetimes::IDLE_KEY_TTL;

    /// A process that locks each of many keys once keeps only the last minute's state: the
    /// counters, the last holds and the lines of idle keys are forgotten, and a key used again
    /// after that still gets a higher token.
    #[tokio::test(start_paused = true)]
    async fn the_state_of_idle_keys_is_forgotten() {
        let store = MemoryStore::new();
        let ttl = Duration::from_secs(5);
        let mut fences = HashMap::new();
        for n in 0..1_000 {
            let key = LockKey::new(format!("order:{n}")).unwrap();
            let token = LockToken::random();
            let Acquisition::Acquired(Some(fence)) = store
                .acquire(&key, token, ttl, Holders::One, None, Fencing::On)
                .await
                .unwrap()
            else {
                panic!("the key is free");
            };
            fences.insert(key.clone(), fence);
            assert!(
                store
                    .release_holding(&key, token, Holders::One, Some(ttl / 2))
                    .await
                    .unwrap()
            );
        }
        assert_eq!(store.locks().model.keys.len(), 1_000);

        tokio::time::advance(2 * IDLE_KEY_TTL).await;
        let again = LockKey::new("order:7").unwrap();
        let Acquisition::Acquired(Some(fence)) = store
            .acquire(&again, LockToken::random(), ttl, Holders::One, None, Fencing::On)
            .await
            .unwrap()
        else {
            panic!("the key is free");
        };
        let state = store.locks();
        let keys = &state.model.keys;
        assert_eq!(keys.len(), 1, "only the key used since is remembered");
        assert!(
            keys[&again].typical_hold().is_none(),
            "its last hold was forgotten with it"
        );
        assert!(state.model.fence(&again) >= fence.0);
        assert!(keys.capacity() < 100, "the map gave its room back");
        assert!(fence > fences[&again], "{fence:?} after {:?}", fences[&again]);
    }
}
