//! The store boundary: the few atomic operations the middleware, the delay queue and the
//! scheduler need, with one Redis and one in-memory implementation of the same semantics.

mod lock;
mod memory;
mod queue;
mod redis;

pub use self::lock::{Acquisition, LockStore};
pub use self::memory::MemoryStore;
pub use self::queue::{
    Cancelled, ClaimBatch, ClaimLimits, Due, JobSet, ListedJob, MAX_PAGE, QueueStats, QueueStore, RawClaim,
    RawJob, RawJobState, Wakeups,
};
pub use self::redis::{LockInfo, RedisStore, RedisStoreBuilder};
