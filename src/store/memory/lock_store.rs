//! The memory store's one [`LockStore`](crate::lock::LockStore) (see `store/lock_family.rs`),
//! and its requests to stop: one channel per key, for the lock and the semaphore alike.

use tokio::sync::broadcast;

use super::MemoryStore;
use crate::error::StoreError;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::lock::Handoffs;
use crate::store::lock_family::lock_family;

lock_family!(impl for MemoryStore);

impl MemoryStore {
    pub(super) async fn ask_holders_to_stop(&self, key: &LockKey, from: &Waiter) -> Result<(), StoreError> {
        self.with_locks(std::slice::from_ref(key), |state, _| {
            if let Some(sender) = state.stops.get(key)
                && sender.send(from.as_str().to_string()).is_err()
            {
                state.stops.remove(key);
            }
        });
        Ok(())
    }

    pub(super) fn stop_channel(&self, key: &LockKey) -> Handoffs {
        let receiver = self.with_locks(std::slice::from_ref(key), |state, _| {
            state
                .stops
                .entry(key.clone())
                .or_insert_with(|| broadcast::channel(16).0)
                .subscribe()
        });
        Handoffs::new(receiver, None, true)
    }
}
