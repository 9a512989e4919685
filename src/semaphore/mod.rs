//! N holders per key: a semaphore whose permits are leases, each with its own token, TTL,
//! renewal and fencing token, and whose freed permits go to the key's line in arrival order.
//!
//! [`LockLayer::permits`](crate::LockLayer::permits) (one limit for every key) and
//! [`LockLayer::permits_by`](crate::LockLayer::permits_by) (a limit per key) guard each key
//! with a semaphore instead of a mutex; everything else of the layer stays: the strategies,
//! the line, the handoff, [`current_lock`](crate::current_lock), renewal and release.
//!
//! ```
//! use std::convert::Infallible;
//! use redefer::{current_lock, LockLayer, MemoryStore};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // At most 4 calls at a time per upstream account.
//! let service = LockLayer::new(MemoryStore::new(), |account: &u64| Some(format!("upstream:{account}")))
//!     .permits(4)
//!     .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(current_lock().unwrap().fence) }));
//! let outcome = service.oneshot(7).await.unwrap();
//! assert!(outcome.done().unwrap().is_some());
//! # }
//! ```

mod layer;
mod limit;
mod memory_store;
pub mod model;
mod permits;
mod redis_store;

pub use self::limit::PermitLimit;
pub use self::permits::Permits;
