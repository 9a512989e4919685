//! Listing the locks a store holds, for operators: `redefer locks` and the dashboard.

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;

/// A guarded key as found in a store: a mutex, a semaphore's permits, or a throttled key's
/// schedule (the one with a [`next_slot`](LockInfo::next_slot)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LockInfo {
    /// The lock key, as the application gave it.
    pub key: String,
    /// How long it still lives (a semaphore: until its last permit's deadline); `None` for a
    /// key without a TTL (written by another tool). In JSON, `remaining_ms`.
    #[serde(rename = "remaining_ms", serialize_with = "crate::time::serialize_opt_millis")]
    pub remaining: Option<Duration>,
    /// The key's fencing counter: the token of its latest holder.
    pub fence: u64,
    /// How many wait in the key's line.
    pub waiters: u64,
    /// How many hold the key now: 0 or 1 for a mutex, the permits held for a semaphore.
    pub holders: u64,
    /// How many may hold it at once: 1 for a mutex, a semaphore's limit as its last acquire
    /// asked (0: closed, see [`Error::Closed`](crate::Error::Closed)); `None` when nothing
    /// limits its holders: a read-write lock's readers without a limit, or a throttled key
    /// (which has no holders).
    pub limit: Option<u64>,
    /// Whether a writer holds it (a [read-write lock](crate::read_write)'s; then `holders` is
    /// 1): else its holders read, or hold permits.
    pub writing: bool,
    /// How many of its `waiters` wait to write (a read-write lock's).
    pub writers_waiting: u64,
    /// The waiters the key (or a permit of it) is reserved for while handed over, separated by
    /// spaces.
    pub reserved_for: Option<String>,
    /// A throttled key: how long until its next slot opens (zero: one is open now). Its
    /// `waiters` are the slots booked ahead and not yet taken; `None` for a lock. In JSON,
    /// `next_slot_ms`.
    #[serde(rename = "next_slot_ms", serialize_with = "crate::time::serialize_opt_millis")]
    pub next_slot: Option<Duration>,
    /// A throttled key a handler closed (an upstream's "429, retry after"): how long it stays
    /// closed. In JSON, `closed_ms`.
    #[serde(rename = "closed_ms", serialize_with = "crate::time::serialize_opt_millis")]
    pub closed_for: Option<Duration>,
    /// What of the key's records could not be read, and why: a value no redefer process
    /// writes there (another tool's key under the prefix, a damaged value). The fields it
    /// would have filled are listed as when the record is missing (0, `None`). `None` when
    /// every record was read.
    pub unreadable: Option<String>,
}

impl LockInfo {
    /// A mutex as a store lists it: held by one holder or none (none while the key is
    /// reserved for `reserved_for`, the first in its line), limit 1. Written once for both
    /// stores.
    pub(crate) fn mutex(
        key: String,
        remaining: Option<Duration>,
        fence: u64,
        waiters: u64,
        held: bool,
        reserved_for: Option<String>,
    ) -> Self {
        LockInfo {
            key,
            remaining,
            fence,
            waiters,
            holders: u64::from(held),
            limit: Some(1),
            reserved_for,
            writing: false,
            writers_waiting: 0,
            next_slot: None,
            closed_for: None,
            unreadable: None,
        }
    }

    /// A throttled key as a store lists it: no holders and no limit; the slots `booked` ahead
    /// are its waiters. Written once for both stores.
    pub(crate) fn throttled(
        key: String,
        remaining: Option<Duration>,
        booked: u64,
        next_slot: Duration,
        closed_for: Option<Duration>,
    ) -> Self {
        LockInfo {
            key,
            remaining,
            fence: 0,
            waiters: booked,
            holders: 0,
            limit: None,
            reserved_for: None,
            writing: false,
            writers_waiting: 0,
            next_slot: Some(next_slot),
            closed_for,
            unreadable: None,
        }
    }
}

/// A semaphore's limit as a store keeps it, as listed: `None` for a read-write lock's readers
/// without a limit (kept as `u32::MAX`).
pub(crate) fn listed_limit(kept: u64) -> Option<u64> {
    (kept != u64::from(crate::read_write::UNLIMITED)).then_some(kept)
}

/// Stores whose held locks can be listed: [`MemoryStore`](super::MemoryStore), and
/// [`RedisStore`](super::RedisStore) on one server or on a cluster (where every master is
/// scanned).
///
/// ```
/// use std::time::Duration;
/// use redefer::{LockKey, LockToken, MemoryStore};
/// use redefer::lock::{Fencing, Holders, LockStore};
/// use redefer::store::ListLocks;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let holder = LockToken::random();
/// store.acquire(&LockKey::new("order:7")?, holder, Duration::from_secs(30), Holders::One, None, Fencing::On)
///     .await?;
/// let locks = store.list_locks(100).await?;
/// assert_eq!(locks[0].key, "order:7");
/// # Ok(()) }
/// ```
pub trait ListLocks {
    /// Up to `limit` held (or reserved) locks, then throttled keys whose schedule is still
    /// ahead of the clock, in no particular order.
    fn list_locks(&self, limit: usize) -> impl Future<Output = Result<Vec<LockInfo>, StoreError>> + Send;
}
