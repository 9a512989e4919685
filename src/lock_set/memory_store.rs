//! The set in memory: the steps of the set scripts
//! (`set_acquire.lua`, `set_join.lua`, `set_leave.lua`) under the lock state's one mutex.

use std::time::Duration;

use super::model::SetHandoffs;
use super::{LockSetStore, SetAcquisition};
use crate::error::StoreError;
use crate::guard::{LineCap, LineJoin, Waiter};
use crate::key::LockKey;
use crate::lock::{Fencing, LockToken};
use crate::store::MemoryStore;
use crate::store::handover::{hand_over, reservation_expired};

impl MemoryStore {
    /// Runs a set operation of the model on `keys`, announcing the handoffs it made, then
    /// finishes them: jobs handed a key are made due.
    async fn on_set<R>(
        &self,
        keys: &[LockKey],
        operation: impl FnOnce(&mut crate::lock::model::LockModel, crate::lock::model::Now) -> (R, SetHandoffs),
    ) -> R {
        let (answer, handoffs) = self.with_locks(keys, |state, now| {
            let (answer, handoffs) = operation(&mut state.model, now);
            for (index, handed) in &handoffs {
                if let Some(key) = keys.get(*index) {
                    state.announce(key, handed);
                }
            }
            (answer, handoffs)
        });
        for (index, handed) in handoffs {
            let Some(key) = keys.get(index) else { continue };
            reservation_expired(key, handed.dropped.as_ref());
            hand_over(self, key, handed.reserved).await;
        }
        answer
    }
}

impl LockSetStore for MemoryStore {
    async fn groups(&self, keys: Vec<LockKey>) -> Result<Vec<Vec<LockKey>>, StoreError> {
        Ok(vec![keys])
    }

    async fn acquire_set(
        &self,
        keys: &[LockKey],
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> Result<SetAcquisition, StoreError> {
        let acquisition = self
            .on_set(keys, |model, now| {
                model.acquire_set(keys, token, ttl, waiter, now)
            })
            .await;
        Ok(match acquisition {
            // The counters move either way; the tokens are handed out only when asked.
            SetAcquisition::Acquired(fences) if fencing == Fencing::Off => {
                SetAcquisition::Acquired(vec![None; fences.len()])
            }
            other => other,
        })
    }

    async fn join_set_line(
        &self,
        keys: &[LockKey],
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
    ) -> Result<LineJoin, StoreError> {
        let joined = self
            .on_set(keys, |model, now| {
                model.join_set(keys, waiter, replacing, cap, now)
            })
            .await;
        Ok(match joined {
            Ok((ahead, evicted)) => LineJoin::Joined { ahead, evicted },
            Err(waiting) => LineJoin::Full { waiting },
        })
    }

    async fn leave_set_line(&self, keys: &[LockKey], waiter: &Waiter) -> Result<(), StoreError> {
        self.on_set(keys, |model, now| ((), model.leave_set(keys, waiter, now)))
            .await;
        Ok(())
    }
}
