//! What the lock layer needs of its store: the [`LockStore`] operations.

use std::future::Future;
use std::time::Duration;

use super::{FencingToken, LockToken};
use crate::error::StoreError;
use crate::key::LockKey;
use crate::store::Sealed;

/// What an acquisition attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquisition {
    /// The lock is ours, with the fencing token of this holding.
    Acquired(FencingToken),
    /// Another holder has the lock.
    Held {
        /// How long the other holder's lock still lives, if it has a TTL (a key written by
        /// another tool may have none).
        remaining: Option<Duration>,
    },
}

/// Atomic lock operations on one key.
///
/// Implementations keep these semantics, which the conformance tests pin for every store:
/// - `try_acquire` succeeds only when no one holds the key, or when the key already holds
///   `token` (a re-sent command after a lost reply counts as acquired, with the same fencing
///   token as the first reply);
/// - fencing tokens strictly increase across the holders of one key;
/// - `extend` and `release` act only while the key holds `token`, and say whether it did.
///
/// Sealed: the crate's two stores implement it, and operations can be added without breaking
/// anyone (see [`store`](crate::store)). Its methods are public, for tools of your own.
pub trait LockStore: Sealed + Clone + Send + Sync + 'static {
    /// Takes the lock for `ttl` unless another holder has it.
    fn try_acquire(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send;

    /// Resets the lock's TTL to `ttl` if `token` still holds it; `false` if it does not.
    fn extend(
        &self,
        key: &LockKey,
        token: LockToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes the lock if `token` still holds it; `false` if it does not.
    fn release(
        &self,
        key: &LockKey,
        token: LockToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}
