//! The lock operations of the Redis store.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::RedisStore;
use super::keys;
use super::scripts::{LOCK_ACQUIRE, LOCK_EXTEND, LOCK_RELEASE};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{Acquisition, FencingToken, LockStore, LockToken};
use crate::store::time::ttl_millis;

impl<Conn> RedisStore<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// With [`wait_for_replicas`](RedisStore::wait_for_replicas): waits for the replicas, and
    /// gives the lock back when too few acknowledged it.
    async fn await_replicas(&self, key: &LockKey, token: LockToken) -> Result<(), StoreError> {
        let Some((wanted, timeout)) = self.replication else {
            return Ok(());
        };
        let acked: u64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(ttl_millis(timeout))
            .query_async(&mut self.conn.clone())
            .await?;
        if acked < u64::from(wanted) {
            self.release(key, token).await?;
            return Err(StoreError::NotReplicated { acked, wanted });
        }
        Ok(())
    }
}

impl<Conn> LockStore for RedisStore<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn try_acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> Result<Acquisition, StoreError> {
        let (acquired, value): (i64, i64) = LOCK_ACQUIRE
            .key(keys::lock(&self.prefix, key))
            .key(keys::fence(&self.prefix, key))
            .arg(token)
            .arg(ttl_millis(ttl))
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
            .key(keys::lock(&self.prefix, key))
            .arg(token)
            .arg(ttl_millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(extended)
    }

    async fn release(&self, key: &LockKey, token: LockToken) -> Result<bool, StoreError> {
        let released: bool = LOCK_RELEASE
            .key(keys::lock(&self.prefix, key))
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(released)
    }
}
