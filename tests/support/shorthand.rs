//! The tests' shorthand for [`LockStore`]'s operations: each is the store's operation with the
//! [`Holders`] the store says for the key (or a semaphore's `permits`), no cap and fencing on,
//! so that a test names only what it is about.

use std::future::Future;
use std::time::Duration;

use redefer::LockKey;
use redefer::error::StoreError;
use redefer::guard::{LineJoin, Waiter};
use redefer::lock::{Acquisition, Fencing, Holders, LockStore, LockToken};

pub trait Shorthand: LockStore {
    fn try_acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        self.acquire(key, token, ttl, self.holders(key), None, Fencing::On)
    }

    fn try_acquire_in_line(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        self.acquire(key, token, ttl, self.holders(key), waiter, fencing)
    }

    fn extend(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.extend_holding(key, token, ttl, self.holders(key))
    }

    fn release(
        &self,
        key: &LockKey,
        token: LockToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.release_holding(key, token, self.holders(key), None)
    }

    fn release_after(
        &self,
        key: &LockKey,
        token: LockToken,
        held_for: Option<Duration>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.release_holding(key, token, self.holders(key), held_for)
    }

    /// How many are in line before `waiter` once it joined.
    fn join(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        join_ahead(self, key, waiter, replacing, self.holders(key))
    }

    fn leave(&self, key: &LockKey, waiter: &Waiter) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.leave_line(key, waiter, self.holders(key))
    }

    fn try_acquire_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        permits: u32,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        self.acquire(key, token, ttl, Holders::Permits(permits), waiter, fencing)
    }

    fn extend_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.extend_holding(key, token, ttl, Holders::Permits(1))
    }

    fn release_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        permits: u32,
        held_for: Option<Duration>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.release_holding(key, token, Holders::Permits(permits), held_for)
    }

    fn join_permits(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        permits: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        join_ahead(self, key, waiter, replacing, Holders::Permits(permits))
    }

    fn leave_permits(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        permits: u32,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.leave_line(key, waiter, Holders::Permits(permits))
    }
}

impl<St: LockStore> Shorthand for St {}

async fn join_ahead<St: LockStore>(
    store: &St,
    key: &LockKey,
    waiter: &Waiter,
    replacing: Option<&Waiter>,
    holders: Holders,
) -> Result<u64, StoreError> {
    match store.join_line(key, waiter, replacing, holders, None).await? {
        LineJoin::Joined { ahead, .. } => Ok(ahead),
        LineJoin::Full { waiting } => Ok(waiting),
    }
}
