//! # redefer
//!
//! Tower middleware for services that change one resource at a time under a Redis lock, and
//! must decide what a request does when the lock is taken: fail fast, sleep and retry, or defer.
//!
//! - [`LockLayer`] runs each request under the lock of its key (`SET key token NX PX ttl`),
//!   renews the lock while the handler runs, and releases it on every exit path.
//! - A [`ConflictStrategy`](strategy::ConflictStrategy) decides what a request does when its
//!   lock is held: [`FailFast`](strategy::FailFast), [`Retry`](strategy::Retry),
//!   [`Defer`](strategy::Defer), [`Coalesce`](strategy::Coalesce) (one waiting job per key, the
//!   latest request's or the first's) or [`Supersede`](strategy::Supersede) (ask the holder to
//!   stop), composable, and chosen per request with [`Switch`](strategy::Switch). A deferring
//!   strategy can cap its key's line ([`guard::LineCap`]);
//!   [`debounce::DebounceLayer`] runs a key's burst of requests once.
//! - [`LockLayer::permits`] lets N requests hold a key at once (a semaphore), and
//!   [`throttle::ThrottleLayer`] admits a key's requests at a rate, with the same strategies:
//!   a conflict over the rate knows exactly when the key's next slot opens.
//! - [`idempotency::IdempotencyLayer`] runs each request id once over its whole life (run
//!   directly, deferred, finished and retained).
//! - Handlers read the [fencing token](FencingToken) of their lock with [`current_lock`].
//! - Two stores with the same semantics: [`RedisStore`] (single node or Redis Cluster) and
//!   [`MemoryStore`] for one process.
//!
//! ```
//! use std::convert::Infallible;
//! use redefer::{Error, LockLayer, MemoryStore};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let store = MemoryStore::new();
//! let mut orders = LockLayer::new(store, |id: &u64| Some(format!("order:{id}")))
//!     .layer(service_fn(|id: u64| async move { Ok::<_, Infallible>(format!("shipped {id}")) }));
//!
//! let outcome = orders.ready().await.unwrap().call(7).await.unwrap();
//! assert_eq!(outcome.done().as_deref(), Some("shipped 7"));
//! # }
//! ```
//!
//! # The guide
//!
//! [`guide`] has a chapter per guard and per concern (strategies, the delay queue and
//! scheduler, each guard, what waits, configuration, errors, guarantees, operations, security,
//! running at scale, upgrading), every example compiled.
//!
//! # Where things are
//!
//! - The guards, each a tower layer on the shared core of [`guard`]: one service for every
//!   guard ([`guard::GuardService`], whose [`guard::Guard`] is the layer), one call path for
//!   every guard whose key can be taken (attempt, conflict, the strategy's [`guard::Decision`],
//!   wait or stop, run), and the vocabulary they share (outcome, errors, conflicts, a key's
//!   line, the job a call runs for): [`lock`] (the mutex, and the layer that runs a request
//!   under it), [`semaphore`] (N permits per key, through the same layer), [`lock_set`]
//!   (several keys at once, all or nothing), [`read_write`] (readers beside writers, on the
//!   lock's call path), [`throttle`] (a rate per key). A new guard is a module beside them
//!   that supplies its part of the call path.
//! - The policies in front of a guard: [`debounce`], [`idempotency`].
//! - What a request does when its key is taken: [`strategy`].
//! - The delay queue: [`queue`] (producers and workers use [`queue::DelayQueue`], operators
//!   [`queue::QueueOperator`]), and the [`scheduler`] that runs its jobs through the stack.
//! - The stores that keep it all: [`store`] ([`RedisStore`], [`MemoryStore`]), each
//!   implementing the store traits of the modules above.
//! - The operator surface: the dashboard (`dashboard`, feature `dashboard`), the queue's
//!   [`queue::QueueOperator`], and the `redefer` command (the `redefer-cli` crate).
//! - Around them: [`config`] (one file for a whole service), [`key`], [`backoff`], [`error`],
//!   [`metric_names`], [`trace_context`].

#![warn(missing_docs)]

pub mod guide;

// The guards, on their shared vocabulary, and the policies in front of them.
pub mod debounce;
pub mod guard;
pub mod idempotency;
pub mod lock;
pub mod lock_set;
pub mod read_write;
pub mod semaphore;
pub mod throttle;
// What a request does on conflict; the queue it may defer to and the scheduler that runs it.
pub mod queue;
pub mod scheduler;
pub mod strategy;
// The stores.
pub mod store;
// The operator surface.
#[cfg(feature = "dashboard")]
// A failed page is the error page itself (a `Response`), built at most once per request.
#[allow(clippy::result_large_err)]
pub mod dashboard;
// Around them.
pub mod backoff;
pub mod config;
pub mod error;
pub mod key;
pub mod metric_names;
pub mod trace_context;
// What the fuzz targets (a crate of their own, `fuzz/`) call: public for them only.
#[doc(hidden)]
pub mod fuzz;
mod renewal;
mod sealed;
mod shrink;
mod time;
mod token;

pub use crate::backoff::Backoff;
pub use crate::config::{Config, ConfigError};
pub use crate::error::{BoxError, KeyError, StoreError};
pub use crate::guard::{Deferred, Duplicate, Error, KeyExtractor, Outcome};
pub use crate::key::{LockKey, Prefix};
pub use crate::lock::{
    BoxLockService, Fencing, FencingToken, HeldLock, LockLayer, LockService, LockToken, current_lock,
};
pub use crate::renewal::LossReason;
pub use crate::scheduler::{Scheduler, SchedulerHandle, SchedulerOptions, SchedulerReport, current_job};
pub use crate::store::{MemoryStore, RedisStore};

/// The README's examples, compiled by `cargo test` as doctests: an example that no longer
/// compiles fails the tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The redis crate this one is built on, for commands of your own on
/// [`RedisStore::connection`] without a version-matched dependency.
pub use redis;
