//! The memory store's one [`LockStore`]: the lock's inside (`lock.rs`) or the semaphore's
//! (`semaphore.rs`), by [`Holders`]; the requests to stop, one channel per key for both.

use std::time::Duration;

use tokio::sync::broadcast;

use super::MemoryStore;
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{Acquisition, Fencing, Handoffs, Holders, LineCap, LineJoin, LockStore, LockToken, Waiter};

impl LockStore for MemoryStore {
    async fn acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> Result<Acquisition, StoreError> {
        match holders {
            Holders::One => self.acquire_lock(key, token, ttl, waiter, fencing).await,
            Holders::Permits(permits) => {
                self.acquire_permit_in_line(key, token, ttl, permits, waiter, fencing)
                    .await
            }
        }
    }

    async fn extend_holding(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
    ) -> Result<bool, StoreError> {
        match holders {
            Holders::One => self.extend_lock(key, token, ttl).await,
            Holders::Permits(_) => self.extend_permit_lease(key, token, ttl).await,
        }
    }

    async fn release_holding(
        &self,
        key: &LockKey,
        token: LockToken,
        holders: Holders,
        held_for: Option<Duration>,
    ) -> Result<bool, StoreError> {
        match holders {
            Holders::One => self.release_lock(key, token, held_for).await,
            Holders::Permits(permits) => self.release_permit_lease(key, token, permits, held_for).await,
        }
    }

    async fn join_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        holders: Holders,
        cap: Option<LineCap>,
    ) -> Result<LineJoin, StoreError> {
        match holders {
            Holders::One => self.join_lock_line(key, waiter, replacing, cap).await,
            Holders::Permits(permits) => self.join_permit_line(key, waiter, replacing, permits, cap).await,
        }
    }

    async fn leave_line(&self, key: &LockKey, waiter: &Waiter, holders: Holders) -> Result<(), StoreError> {
        match holders {
            Holders::One => self.leave_lock_line(key, waiter).await,
            Holders::Permits(permits) => self.leave_permit_line(key, waiter, permits).await,
        }
    }

    fn line_handoffs(&self, key: &LockKey, holders: Holders) -> Handoffs {
        match holders {
            Holders::One => self.lock_handoffs(key),
            Holders::Permits(_) => self.permit_line_handoffs(key),
        }
    }

    async fn request_stop(&self, key: &LockKey, from: &Waiter) -> Result<(), StoreError> {
        self.with_locks(key, |state, _, _| {
            if let Some(sender) = state.stops.get(key)
                && sender.send(from.as_str().to_string()).is_err()
            {
                state.stops.remove(key);
            }
        });
        Ok(())
    }

    fn stop_requests(&self, key: &LockKey) -> Handoffs {
        let receiver = self.with_locks(key, |state, _, _| {
            state
                .stops
                .entry(key.clone())
                .or_insert_with(|| broadcast::channel(16).0)
                .subscribe()
        });
        Handoffs::new(receiver, None)
    }
}
