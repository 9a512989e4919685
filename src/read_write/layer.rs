//! The layer that builds [`ReadWriteService`]s.

use std::time::Duration;

use tower::Layer;

use super::ReadWriteService;
use crate::LockLayer;
use crate::guard::GuardService;
use crate::lock::Fencing;
use crate::lock::LockStore;
use crate::semaphore::Permits;
use crate::strategy::FailFast;

/// Runs each request under its key, read or written as `access` says: readers together,
/// a writer alone, in one line per key with writer precedence (see the
/// [module](crate::read_write)). `strategy` decides what a request does when its key is held
/// against it, as for the [`LockLayer`].
///
/// ```
/// use std::convert::Infallible;
/// use redefer::read_write::{Access, ReadWriteLayer};
/// use redefer::{current_lock, MemoryStore};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// struct Report { id: u64, refresh: bool }
///
/// let reports = ReadWriteLayer::new(
///     MemoryStore::new(),
///     |r: &Report| Some(format!("report:{}", r.id)),
///     |r: &Report| if r.refresh { Access::Write } else { Access::Read },
/// )
/// .readers(32)
/// .layer(service_fn(|_: Report| async { Ok::<_, Infallible>(current_lock().unwrap().fence) }));
///
/// let fence = reports.oneshot(Report { id: 3, refresh: false }).await.unwrap().done();
/// assert!(fence.unwrap().is_some());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLayer<St, X, A, Strat = FailFast> {
    /// The lock's layer over the key's permits: a reader holds one, a writer all of them,
    /// with the layer's TTL, fencing and strategy; its extractor gives the key.
    pub(crate) lock: LockLayer<Permits<St, u32>, X, Strat>,
    /// What each request does to its key.
    pub(crate) access: A,
}

/// No limit on the readers of a key unless [`ReadWriteLayer::readers`] sets one.
pub(crate) const UNLIMITED: u32 = u32::MAX;

impl<St: LockStore, X, A> ReadWriteLayer<St, X, A, FailFast> {
    /// Guards each request on the key `extractor` gives it, reading or writing it as `access`
    /// says, with any number of readers together, failing fast on conflicts, with the default
    /// TTL of 10 s.
    pub fn new(store: St, extractor: X, access: A) -> Self {
        ReadWriteLayer {
            lock: LockLayer::new(store, extractor).permits_by(UNLIMITED),
            access,
        }
    }
}

impl<St: LockStore, X, A, Strat> ReadWriteLayer<St, X, A, Strat> {
    /// At most `readers` requests read one key at once (by default, any number): the next
    /// waits in the key's line as a writer would.
    ///
    /// # Panics
    ///
    /// When `readers` is 0: nobody could ever read.
    pub fn readers(self, readers: u32) -> Self {
        assert!(readers > 0, "ReadWriteLayer::readers(0): nobody could ever read");
        let store = Permits::new(self.lock.store.store().clone(), readers);
        ReadWriteLayer {
            lock: LockLayer { store, ..self.lock },
            access: self.access,
        }
    }
}

impl<St, X, A, Strat> ReadWriteLayer<St, X, A, Strat> {
    /// How long each holding lives unless renewed, as [`LockLayer::ttl`].
    ///
    /// # Panics
    ///
    /// If `ttl` is shorter than 3 ms, too short to renew.
    pub fn ttl(self, ttl: Duration) -> Self {
        ReadWriteLayer {
            lock: self.lock.ttl(ttl),
            access: self.access,
        }
    }

    /// Whether handlers get a fencing token (on by default), as [`LockLayer::fencing`].
    pub fn fencing(self, fencing: Fencing) -> Self {
        ReadWriteLayer {
            lock: self.lock.fencing(fencing),
            access: self.access,
        }
    }

    /// What a request does when its key is held against it: by a writer, or (for a writer)
    /// by anyone, or by the line it must not pass.
    pub fn on_conflict<Strat2>(self, strategy: Strat2) -> ReadWriteLayer<St, X, A, Strat2> {
        ReadWriteLayer {
            lock: self.lock.on_conflict(strategy),
            access: self.access,
        }
    }
}

impl<S, St: Clone, X: Clone, A: Clone, Strat: Clone> Layer<S> for ReadWriteLayer<St, X, A, Strat> {
    type Service = ReadWriteService<S, St, X, A, Strat>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService::new(inner, self.clone())
    }
}
