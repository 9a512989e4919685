//! The lock a request runs under: tokens, the [`LockStore`] operations a store provides, the
//! guard that releases it on every exit path, and the renewal that keeps it alive while a
//! handler runs.

mod guard;
mod held;
mod store;
mod token;

pub(crate) use self::guard::ReleaseOnDrop;
pub(crate) use self::held::run_holding;
pub use self::held::{HeldLock, current_lock};
pub use self::store::{Acquisition, LockStore};
pub use self::token::{FencingToken, LockToken};
