//! What the set guard needs of its store beyond the lock's: a set of keys taken, waited for
//! and left in one step.

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;
use crate::guard::{LineCap, LineJoin, Waiter};
use crate::key::LockKey;
use crate::lock::{Fencing, FencingToken, LockStore, LockToken};

/// What an attempt at a set of keys found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetAcquisition {
    /// Every key is ours, with its fencing token, in the order of the keys (`None` each with
    /// [`Fencing::Off`]).
    Acquired(Vec<Option<FencingToken>>),
    /// None was taken: these keys are held by others, or reserved for others, or others wait
    /// for them first.
    Held(Vec<HeldKey>),
}

/// One key of a set that another holder has, as [`SetAcquisition::Held`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldKey {
    /// Its place in the set's keys.
    pub index: usize,
    /// How long the holder's lock (or the reservation) still lives, if it has a TTL.
    pub remaining: Option<Duration>,
    /// How many are in its line before the caller (all of the line, when it is not in it).
    pub ahead: u64,
    /// How long the key is typically held, from its recent releases.
    pub typical_hold: Option<Duration>,
    /// It is reserved for another waiter (being handed over), not held.
    pub reserved: bool,
}

/// The operations on a set of lock keys, each step on every key of the set at once (one Lua
/// script on Redis, one critical section in memory). A set is held as each of its keys is by
/// the lock ([`LockStore`]): the same token, a fencing token per key, extended and released key
/// by key with the lock's own operations, and seen by every single-key caller as held.
///
/// The lines of a set keep one order: a waiter joins every line of its set in one step, so two
/// waiters that share keys stand in the same order in all the lines they share, and the first
/// is handed every shared key before the second. Nobody waits for someone behind it: no
/// deadlock, whatever the sets and whatever order their keys come in.
///
/// Sealed, as [`LockStore`]: the crate's two stores implement it.
pub trait LockSetStore: LockStore {
    /// The keys of a set (sorted, no two alike, at least one) in the groups this store takes
    /// in one step, in the order to take them, none empty: one group, unless the store is a
    /// Redis Cluster and the keys are on several hash slots (then one group per slot, by slot).
    fn groups(
        &self,
        keys: Vec<LockKey>,
    ) -> impl Future<Output = Result<Vec<Vec<LockKey>>, StoreError>> + Send;

    /// Takes every key of `keys` for `ttl` as `token`, or none: each must be free with nobody
    /// in line before `waiter` (if given), or reserved for it, or already `token`'s. When others
    /// are not free, the keys reserved for `waiter` are free again with `waiter` first in their
    /// lines if it is first in every line of the set (an attempt on one hands it back), and go
    /// on to the next in line behind it otherwise.
    fn acquire_set(
        &self,
        keys: &[LockKey],
        token: LockToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
        fencing: Fencing,
    ) -> impl Future<Output = Result<SetAcquisition, StoreError>> + Send;

    /// Puts `waiter` in the line of every key of `keys` (or in the place of `replacing`), each
    /// within `cap`; a line that would refuse it refuses it for the set, and no line changes.
    /// `ahead` counts the longest of its lines before it.
    fn join_set_line(
        &self,
        keys: &[LockKey],
        waiter: &Waiter,
        replacing: Option<&Waiter>,
        cap: Option<LineCap>,
    ) -> impl Future<Output = Result<LineJoin, StoreError>> + Send;

    /// Takes `waiter` out of the line of every key of `keys`, handing on the keys reserved for
    /// it.
    fn leave_set_line(
        &self,
        keys: &[LockKey],
        waiter: &Waiter,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
