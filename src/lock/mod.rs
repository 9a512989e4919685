//! The lock a request runs under, and its layer: [`LockLayer`] wraps a service in
//! [`LockService`], which runs each request under the lock of its key (or, with
//! [`permits`](LockLayer::permits), one of its N permits) and asks a
//! [`ConflictStrategy`](crate::strategy::ConflictStrategy) what to do when it is held.
//!
//! Laid out as tower lays out its own middleware: the layer, the service, the call it makes
//! (`call.rs`: the lock's part of the call path every guard shares, `guard/call.rs`); then the lock itself: the [`LockStore`] operations a store provides, the holding
//! that releases it on every exit path (`release_on_drop.rs`), the handler's view of it
//! ([`HeldLock`]), the handoffs of released keys and the requests to stop.

mod boxed;
mod call;
mod caller;
mod expiry_watch;
mod handoffs;
mod held;
mod holders;
mod holds;
mod layer;
mod line;
pub mod model;
mod release_on_drop;
mod run;
mod service;
mod stop;
mod store;

pub use self::boxed::BoxLockService;
pub(crate) use self::call::{Acquired, LockAttempts, estimate_wait};
pub(crate) use self::caller::Caller;
pub(crate) use self::expiry_watch::{ExpiryWatches, Watching};
pub use self::handoffs::Handoffs;
pub(crate) use self::handoffs::{LISTEN_WITHIN, LISTENING, wait_for_turn};
pub use self::held::{HeldLock, current_lock, current_locks};
pub(crate) use self::held::{LockSpace, held_by_caller, run_holdings};
pub use self::holders::Holders;
pub use self::holds::DEFAULT_TYPICAL_HOLD;
pub use self::layer::LockLayer;
pub(crate) use self::line::line_of;
pub(crate) use self::release_on_drop::ReleaseOnDrop;
pub(crate) use self::run::{hold_ended, run_renewed};
pub use self::service::LockService;
pub(crate) use self::stop::StopListener;
pub(crate) use self::store::{AcquireRequest, JoinRequest};
pub use self::store::{Acquisition, LockStore};
pub use crate::guard::ttl::DEFAULT_TTL;
pub(crate) use crate::token::{FENCE_FLOOR, next_fences};
pub use crate::token::{Fencing, FencingToken, LockToken};
