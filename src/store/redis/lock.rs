//! The lock operations of the Redis store.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::RedisStore;
use super::scripts::{LOCK_ACQUIRE, LOCK_EXTEND, LOCK_RELEASE};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{FencingToken, LockToken};
use crate::store::{Acquisition, LockStore};

/// Milliseconds for a script argument; at least 1, since Redis rejects a zero TTL.
pub(super) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl<C> LockStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn try_acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> Result<Acquisition, StoreError> {
        let (acquired, value): (i64, i64) = LOCK_ACQUIRE
            .key(self.prefix.lock_key(key))
            .key(self.prefix.fence_key(key))
            .arg(token)
            .arg(millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await?;
        match (acquired, value) {
            (1, fence) => u64::try_from(fence)
                .map(|fence| Acquisition::Acquired(FencingToken(fence)))
                .map_err(|_| StoreError::Protocol(format!("negative fencing token {fence}"))),
            (0, remaining) => Ok(Acquisition::Held {
                remaining: u64::try_from(remaining).ok().map(Duration::from_millis),
            }),
            other => Err(StoreError::Protocol(format!("acquire answered {other:?}"))),
        }
    }

    async fn extend(&self, key: &LockKey, token: LockToken, ttl: Duration) -> Result<bool, StoreError> {
        let extended: bool = LOCK_EXTEND
            .key(self.prefix.lock_key(key))
            .arg(token)
            .arg(millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(extended)
    }

    async fn release(&self, key: &LockKey, token: LockToken) -> Result<bool, StoreError> {
        let released: bool = LOCK_RELEASE
            .key(self.prefix.lock_key(key))
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(released)
    }
}
