//! The Redis store's one [`LockStore`](crate::lock::LockStore) (see `store/lock_family.rs`),
//! and its requests to stop: one channel per key, for the lock and the semaphore alike.

use super::RedisStore;
use super::keys::LockKeys;
use crate::error::StoreError;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::lock::Handoffs;
use crate::store::RedisConnection;
use crate::store::lock_family::lock_family;

lock_family!(impl<Conn> for RedisStore<Conn> where Conn: RedisConnection);

impl<Conn: RedisConnection> RedisStore<Conn> {
    pub(super) async fn ask_holders_to_stop(&self, key: &LockKey, from: &Waiter) -> Result<(), StoreError> {
        let channel = LockKeys::new(&self.prefix, key).stop().to_string();
        let _heard_by: u64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(from.as_str())
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    pub(super) fn stop_channel(&self, key: &LockKey) -> Handoffs {
        self.announced_on(LockKeys::new(&self.prefix, key).stop().to_string())
    }
}
