//! What a semaphore needs of its store: the [`SemaphoreStore`] operations.

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::{Acquisition, Fencing, Handoffs, LineCap, LineJoin, LockToken, Waiter};

/// Atomic semaphore operations on one key: up to `permits` holders at once, each a lease of its
/// own, and a line of waiters.
///
/// The semantics, pinned for every store by the conformance tests:
/// - an acquire takes a permit when fewer than `permits` hold the key (reservations count as
///   holders) and no waiter without a reservation is ahead of the caller, or when a permit is
///   reserved for the caller; a re-sent acquire whose first reply was lost finds its permit
///   and its fencing token again;
/// - each permit gets a fencing token, strictly greater than every earlier permit's of the key;
/// - a permit lives for its TTL unless extended; one whose holder died is free when its TTL
///   runs out, never before;
/// - a freed permit is reserved for the first waiter in line that has none, for the store's
///   reservation time (its job is made due at once, a caller hears it on
///   [`permit_handoffs`](SemaphoreStore::permit_handoffs)); a reservation that runs out unused
///   drops its waiter from the line and goes to the next.
///
/// The keys of a semaphore are not the keys of a mutex of the same name: guard a key with one
/// or the other, in every process (see [`semaphore`](crate::semaphore)).
///
/// Sealed, like [`LockStore`](crate::lock::LockStore): the crate's two stores implement it. A
/// store of semaphores is a lock store too: the requests to stop a key's holders
/// ([`LockStore::request_stop`](crate::lock::LockStore::request_stop)) go to its mutex and
/// semaphore holders alike.
pub trait SemaphoreStore: crate::lock::LockStore {
    /// Takes one of `key`'s `permits` for `ttl` as `waiter`, if given (first in line, or a
    /// permit reserved for it; it then leaves the line). With [`Fencing::Off`], no fencing token.
    fn try_acquire_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        permits: u32,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send;

    /// Resets the TTL of `token`'s permit to `ttl`; `false` when it holds none (it ran out).
    fn extend_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Gives `token`'s permit back, reserving free permits (of `permits`) for the first in
    /// line; `false` when it held none. `held_for` goes into the key's typical hold.
    fn release_permit(
        &self,
        key: &LockKey,
        token: LockToken,
        permits: u32,
        held_for: Option<Duration>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Puts `waiter` in `key`'s line (at the end, or in the place of `replacing`); already in
    /// line, it keeps its place. Permits free meanwhile go to the line now. Returns how many
    /// are in line before `waiter`.
    fn join_permits(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        permits: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        async move {
            match self
                .join_permits_within(key, waiter, replacing, permits, None)
                .await?
            {
                LineJoin::Joined { ahead, .. } => Ok(ahead),
                LineJoin::Full { waiting } => Ok(waiting),
            }
        }
    }

    /// [`join_permits`](SemaphoreStore::join_permits) within `cap`, as
    /// [`LockStore::join_within`](crate::lock::LockStore::join_within) (never evicting a
    /// waiter a permit is reserved for).
    fn join_permits_within(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        permits: u32,
        cap: Option<LineCap>,
    ) -> impl Future<Output = Result<LineJoin, StoreError>> + Send;

    /// Takes `waiter` out of `key`'s line; a permit reserved for it goes to the next.
    fn leave_permits(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        permits: u32,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The announcements of who a permit of `key` is reserved for, from now on.
    fn permit_handoffs(&self, key: &LockKey) -> Handoffs;
}
