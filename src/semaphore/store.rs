//! What a semaphore needs of its store: the lock's operations, held by permits.

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{Acquisition, Fencing, Handoffs, Holders, LineCap, LineJoin, LockStore, LockToken, Waiter};

/// A store that keeps semaphores: every [`LockStore`] does, its family of operations taking
/// [`Holders::Permits`]. These are the shapes 0.3's semaphore operations had, each the
/// [`LockStore`] operation with the key's `permits`; kept so that code written for 0.3 still
/// compiles.
pub trait SemaphoreStore: LockStore {
    /// [`LockStore::acquire`] of one of `permits`.
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

    /// [`LockStore::extend_holding`] of a permit (its limit plays no part).
    fn extend_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.extend_holding(key, token, ttl, Holders::Permits(1))
    }

    /// [`LockStore::release_holding`] of a permit among `permits`.
    fn release_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        permits: u32,
        held_for: Option<Duration>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.release_holding(key, token, Holders::Permits(permits), held_for)
    }

    /// [`LockStore::join_line`] of a key of `permits`, without a cap; how many are in line
    /// before `waiter`.
    fn join_permits(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        permits: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        async move {
            match self
                .join_line(key, waiter, replacing, Holders::Permits(permits), None)
                .await?
            {
                LineJoin::Joined { ahead, .. } => Ok(ahead),
                LineJoin::Full { waiting } => Ok(waiting),
            }
        }
    }

    /// [`LockStore::join_line`] of a key of `permits`.
    fn join_permits_within(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        permits: u32,
        cap: Option<LineCap>,
    ) -> impl Future<Output = Result<LineJoin, StoreError>> + Send {
        self.join_line(key, waiter, replacing, Holders::Permits(permits), cap)
    }

    /// [`LockStore::leave_line`] of a key of `permits`.
    fn leave_permits(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        permits: u32,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.leave_line(key, waiter, Holders::Permits(permits))
    }

    /// [`LockStore::line_handoffs`] of a key held by permits.
    fn permit_handoffs(&self, key: &LockKey) -> Handoffs {
        self.line_handoffs(key, Holders::Permits(1))
    }
}

impl<St: LockStore> SemaphoreStore for St {}
