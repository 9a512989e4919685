//! The lock operations of the in-memory store.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::MemoryStore;
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{Acquisition, LockStore};
use crate::lock::{FencingToken, LockToken};

#[derive(Default)]
pub(super) struct LockState {
    locks: HashMap<LockKey, Holding>,
    /// Per-key fencing counters; like Redis's, they outlive the locks.
    fences: HashMap<LockKey, u64>,
}

struct Holding {
    token: LockToken,
    fence: FencingToken,
    expires: Instant,
}

impl LockState {
    /// The live holding of `key`, dropping it first if it expired.
    fn live(&mut self, key: &LockKey, now: Instant) -> Option<&mut Holding> {
        if self.locks.get(key).is_some_and(|h| h.expires <= now) {
            self.locks.remove(key);
        }
        self.locks.get_mut(key)
    }
}

impl LockStore for MemoryStore {
    async fn try_acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> Result<Acquisition, StoreError> {
        let now = Instant::now();
        let mut state = self.locks();
        if let Some(holding) = state.live(key, now) {
            if holding.token != token {
                return Ok(Acquisition::Held {
                    remaining: Some(holding.expires - now),
                });
            }
            holding.expires = now + ttl;
            return Ok(Acquisition::Acquired(holding.fence));
        }
        let counter = state.fences.entry(key.clone()).or_insert(0);
        *counter += 1;
        let fence = FencingToken(*counter);
        state.locks.insert(
            key.clone(),
            Holding {
                token,
                fence,
                expires: now + ttl,
            },
        );
        Ok(Acquisition::Acquired(fence))
    }

    async fn extend(&self, key: &LockKey, token: LockToken, ttl: Duration) -> Result<bool, StoreError> {
        let now = Instant::now();
        match self.locks().live(key, now) {
            Some(holding) if holding.token == token => {
                holding.expires = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, key: &LockKey, token: LockToken) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.locks();
        match state.live(key, now) {
            Some(holding) if holding.token == token => {
                state.locks.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
