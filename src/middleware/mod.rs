//! The tower middleware: [`LockLayer`] wraps a service in [`LockService`], which runs each
//! request under the lock of its key and asks a [`ConflictStrategy`](crate::strategy::ConflictStrategy)
//! what to do when the lock is held.
//!
//! Laid out as tower lays out its own middleware: the layer, the service, its future, its error.

mod boxed;
mod call;
mod error;
mod extract;
mod future;
mod holds;
mod layer;
mod nesting;
mod outcome;
mod service;

pub use self::boxed::BoxLockService;
pub use self::error::Error;
pub use self::extract::KeyExtractor;
pub(crate) use self::extract::{guarded_key, take_ready};
pub use self::future::ResponseFuture;
pub use self::holds::DEFAULT_TYPICAL_HOLD;
pub use self::layer::{DEFAULT_TTL, LockLayer};
pub use self::nesting::{Nesting, OverGuard, OverHandler};
pub use self::outcome::{Deferred, Duplicate, Outcome};
pub use self::service::LockService;
