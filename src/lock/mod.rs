//! The lock a request runs under: tokens, the [`LockStore`] operations a store provides, the
//! guard that releases it on every exit path, and the renewal that keeps it alive while a
//! handler runs.

mod guard;
mod handoffs;
mod held;
mod line;
mod stop;
mod store;
mod waiter;

pub(crate) use self::guard::ReleaseOnDrop;
pub use self::handoffs::Handoffs;
pub(crate) use self::held::run_holding;
pub use self::held::{HeldLock, current_lock};
pub use self::line::{Line, LineCap, LineJoin, Overflow, SUPERSEDED_BY_NEWER};
pub(crate) use self::stop::StopListener;
pub use self::store::{Acquisition, LockStore};
pub use self::waiter::Waiter;
pub(crate) use crate::token::{FENCE_FLOOR, next_fences};
pub use crate::token::{Fencing, FencingToken, LockToken};
