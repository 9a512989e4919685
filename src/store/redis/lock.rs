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

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// With [`wait_for_replicas`](RedisStore::wait_for_replicas): waits for the replicas, and
    /// gives the lock back when too few acknowledged it.
    async fn await_replicas(&self, key: &LockKey, token: LockToken) -> Result<(), StoreError> {
        let Some((wanted, timeout)) = self.replication else {
            return Ok(());
        };
        let acked: u64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(millis(timeout))
            .query_async(&mut self.conn.clone())
            .await?;
        if acked < u64::from(wanted) {
            self.release(key, token).await?;
            return Err(StoreError::NotReplicated { acked, wanted });
        }
        Ok(())
    }
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
            (1, fence) => {
                let fence = u64::try_from(fence)
                    .map_err(|_| StoreError::Protocol(format!("negative fencing token {fence}")))?;
                self.await_replicas(key, token).await?;
                Ok(Acquisition::Acquired(FencingToken(fence)))
            }
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
