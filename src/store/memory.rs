//! The in-process store: the embedded default for a single process, and the reference the
//! Redis store is tested against.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquisition, LockStore};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{FencingToken, LockToken};

/// A store in this process's memory, with the same semantics as [`RedisStore`](super::RedisStore).
///
/// Clones share the same data. Time is tokio's clock, so tests can pause and advance it.
///
/// ```
/// use std::time::Duration;
/// use redefer::{LockKey, LockToken, MemoryStore};
/// use redefer::store::{Acquisition, LockStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let key = LockKey::new("order:42")?;
/// let first = store.try_acquire(&key, LockToken::random(), Duration::from_secs(5)).await?;
/// assert!(matches!(first, Acquisition::Acquired(_)));
/// let second = store.try_acquire(&key, LockToken::random(), Duration::from_secs(5)).await?;
/// assert!(matches!(second, Acquisition::Held { .. }));
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    locks: HashMap<LockKey, Holding>,
    /// Per-key fencing counters; like Redis's, they outlive the locks.
    fences: HashMap<LockKey, u64>,
}

struct Holding {
    token: LockToken,
    fence: FencingToken,
    expires: Instant,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave `State` half-updated: every critical
        // section below is a single map operation, so the data is still consistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl State {
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
        let mut state = self.state();
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
        match self.state().live(key, now) {
            Some(holding) if holding.token == token => {
                holding.expires = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, key: &LockKey, token: LockToken) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut state = self.state();
        match state.live(key, now) {
            Some(holding) if holding.token == token => {
                state.locks.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
