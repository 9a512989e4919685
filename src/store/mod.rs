//! The two stores: [`RedisStore`] (single node or Redis Cluster) and [`MemoryStore`] (one
//! process), with the same semantics, pinned by one conformance suite.
//!
//! What the lock layer and the delay queue need of a store are the traits
//! [`LockStore`](crate::lock::LockStore) and [`QueueStore`](crate::queue::QueueStore), defined
//! beside their users. Both traits are **sealed**: these two stores are the only
//! implementations. That lets the crate add store operations (and it will: handoff, bulk
//! push, retention) in minor releases without breaking anyone, and keeps the store-level
//! types (`RawClaim`, `ClaimBatch`, ...) out of the documented API. The trait methods stay
//! public, for tools of your own. A third backend belongs in this crate, beside these two,
//! where the conformance suite runs against it.

pub mod footprint;
pub(crate) mod handover;
pub mod lifetimes;
pub(crate) mod list_locks;
mod lock_family;
pub(crate) mod memory;
pub(crate) mod redis;

pub use self::list_locks::{ListLocks, LockInfo};
pub use self::memory::MemoryStore;
pub(crate) use self::redis::keys as redis_keys;
pub use self::redis::{
    ClusterNodesConnection, ManagedClusterConnection, ManagedConnection, RedisConnection, RedisStore,
    RedisStoreBuilder, SingleServerConnection, without_password,
};

pub(crate) use crate::sealed::Sealed;

impl Sealed for MemoryStore {
    fn under_prefix(self, _prefix: crate::key::Prefix) -> Self {
        self
    }

    fn instance(&self) -> u64 {
        self.instance_id()
    }
}

/// How long a released key stays reserved for the first in its line, by default.
pub const DEFAULT_RESERVATION: std::time::Duration = std::time::Duration::from_secs(2);
