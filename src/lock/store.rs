//! What the lock layer needs of its store: the [`LockStore`] operations.

use std::future::Future;
use std::time::Duration;

use super::{Fencing, FencingToken, Handoffs, Holders, LockToken};
use crate::error::StoreError;
use crate::guard::{LineCap, LineJoin, Waiter};
use crate::key::LockKey;
use crate::sealed::Sealed;

/// What an acquisition attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquisition {
    /// The lock is ours, with the fencing token of this holding (`None` when acquired with
    /// [`Fencing::Off`]).
    Acquired(Option<FencingToken>),
    /// Another holder has the lock, or it is reserved for the first in line, or others are in
    /// line first.
    Held {
        /// How long the other holder's lock (or the reservation) still lives, if it has a TTL
        /// (a key written by another tool may have none).
        remaining: Option<Duration>,
        /// How many are in line before the caller (all of the line, when it is not in it).
        ahead: u64,
        /// How long the key is typically held, from its recent releases; `None` before any.
        typical_hold: Option<Duration>,
        /// The key is reserved for the first in line (being handed over), not held.
        reserved: bool,
    },
}

/// What one acquire asks for: the holding's token and TTL, the caller's place in line (when it
/// has one), and whether it wants the fencing token. [`LockStore::acquire`]'s arguments but the
/// key and its [`Holders`], as the stores' insides take them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireRequest<'a> {
    pub(crate) token: LockToken,
    pub(crate) ttl: Duration,
    pub(crate) waiter: Option<&'a Waiter>,
    pub(crate) fencing: Fencing,
}

impl AcquireRequest<'_> {
    /// The fencing token of a holding, as the caller asked for it: a store counts holdings
    /// either way, and hands the token out only when asked.
    pub(crate) fn fenced(&self, fence: Option<FencingToken>) -> Option<FencingToken> {
        fence.filter(|_| self.fencing == Fencing::On)
    }
}

/// What one join of a key's line asks for: who joins, in whose place (if anyone's), within
/// which cap (if any). [`LockStore::join_line`]'s arguments but the key and its [`Holders`], as
/// the stores' insides take them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JoinRequest<'a> {
    pub(crate) waiter: &'a Waiter,
    pub(crate) replacing: Option<&'a Waiter>,
    pub(crate) cap: Option<LineCap>,
}

/// Atomic operations on one key held by one holder (the lock) or by up to N (a semaphore's
/// permits, [`Holders::Permits`]), with a line of waiters per key. One family: the line, the
/// handoff at release, the fencing tokens, the renewal and the requests to stop are the same
/// for both; what differs (one `SET NX PX` key, or a set of leases) is the store's inside.
///
/// Each operation takes the [`Holders`] the key is held by: [`Holders::One`] for a lock, or
/// what [`holders`](LockStore::holders) says for the key (one holder, unless the store is
/// [`Permits`](crate::semaphore::Permits), which answers with the key's limit whatever it is
/// passed).
///
/// Implementations keep these semantics, which the conformance tests pin for every store:
/// - `try_acquire` succeeds only when no one holds the key and nobody is in line (or the
///   caller is first in line, or the key is reserved for it), or when the key already holds
///   `token` (a re-sent command after a lost reply counts as acquired, with a fencing token no
///   lower than the first reply's);
/// - fencing tokens strictly increase across the holders of one key (with gaps: a store may
///   count acquires that found the key taken);
/// - `extend` and `release` act only while the key holds `token`, and say whether it did;
/// - a release with waiters in line reserves the key for the first of them, for the store's
///   reservation time, makes its job due at once (a job waiter) and announces it on
///   [`line_handoffs`](LockStore::line_handoffs); a reservation that runs out unused drops its waiter
///   from the line at the next attempt on the key, which hands the key to the next.
///
/// Sealed: the crate's two stores implement it, and operations can be added without breaking
/// anyone (see [`store`](crate::store)). Its methods are public, for tools of your own.
pub trait LockStore: Sealed + Clone + Send + Sync + 'static {
    /// Whether `key` admits no holder now, whoever holds it: a semaphore whose limit for the
    /// key is 0 ([`permits_by`](crate::LockLayer::permits_by) closed it). A mutex never is.
    fn is_closed(&self, key: &LockKey) -> bool {
        let _ = key;
        false
    }

    /// How `key` is held through this store: by one holder (a store as it is), or by up to N
    /// ([`Permits`](crate::semaphore::Permits) says how many, asked at each operation, so a
    /// limit may change while the key is held).
    fn holders(&self, key: &LockKey) -> Holders {
        let _ = key;
        Holders::One
    }

    /// Takes the key (its lock, or one of its permits) for `ttl` as `waiter`, if given: when
    /// it is first in line, or the key is reserved for it; it then leaves the line. With
    /// [`Fencing::Off`], no fencing token.
    fn acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send;

    /// Resets the TTL of `token`'s holding of `key` to `ttl` if it still holds it; `false` if
    /// it does not.
    fn extend_holding(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
        holders: Holders,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Releases `token`'s holding of `key`, handing what it frees to the first in line, and,
    /// with `held_for`, telling the store how long it was held, which it averages into the
    /// key's typical hold (for `retry_after` estimates). `false` if `token` did not hold it.
    fn release_holding(
        &self,
        key: &LockKey,
        token: LockToken,
        holders: Holders,
        held_for: Option<Duration>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Puts `waiter` in `key`'s line, within `cap` if given: at the end, or in the place of
    /// `replacing` (a caller that waited in place, then deferred). Already in line, it keeps
    /// its place. If the key was released meanwhile, it is handed to the first in line now. A
    /// line that holds `cap.max` waiters (not counting `replacing`) takes a new one only by
    /// evicting its oldest jobs ([`Overflow::DropOldest`](crate::guard::Overflow::DropOldest), never a
    /// job the key is being handed to), else answers [`LineJoin::Full`] and changes nothing:
    /// the check and the join are one step.
    fn join_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        holders: Holders,
        cap: Option<LineCap>,
    ) -> impl Future<Output = Result<LineJoin, StoreError>> + Send;

    /// Takes `waiter` out of `key`'s line; if the key (or a permit) was reserved for it, hands
    /// it on.
    fn leave_line(
        &self,
        key: &LockKey,
        waiter: &Waiter,
        holders: Holders,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The announcements of who `key` is handed to, from now on.
    fn line_handoffs(&self, key: &LockKey, holders: Holders) -> Handoffs;

    /// Asks whoever holds `key` now to stop, on behalf of `from` (the newer request that wants
    /// the key): announced to the holders' [`stop_requests`](LockStore::stop_requests), in any
    /// process. Best effort, like a handoff's announcement: the asker asks again while it waits.
    fn request_stop(
        &self,
        key: &LockKey,
        from: &Waiter,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The requests to stop that holders of `key` get from now on, each as the waiter that
    /// asked.
    fn stop_requests(&self, key: &LockKey) -> Handoffs;

    /// How long a key handed to the first in line stays reserved for it (`with_reservation`
    /// of the store): unused that long, the next attempt on the key hands it on.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    /// use redefer::lock::LockStore;
    ///
    /// let store = MemoryStore::new().with_reservation(Duration::from_millis(500));
    /// assert_eq!(store.reservation(), Duration::from_millis(500));
    /// ```
    fn reservation(&self) -> Duration;
}
