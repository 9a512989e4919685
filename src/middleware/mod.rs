//! Where 0.3 kept the lock layer and what every guard shares: kept for one release so that
//! paths written for 0.3 still resolve. The lock layer is in [`lock`](crate::lock); what every
//! guard shares is in [`guard`](crate::guard).

pub use crate::guard::{
    DEFAULT_TTL, Deferred, Duplicate, Error, KeyExtractor, Nesting, Outcome, OverGuard, OverHandler,
    ResponseFuture,
};
pub use crate::lock::{BoxLockService, DEFAULT_TYPICAL_HOLD, LockLayer, LockService};
