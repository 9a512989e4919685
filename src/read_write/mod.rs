//! Readers beside writers: [`ReadWriteLayer`] lets any number of requests that read a key run
//! together (or up to a limit), and a request that writes it run alone.
//!
//! Laid out as the lock, whose call path it takes (`lock/call.rs`, itself the lock's part of
//! the path every guard shares): the layer, the service, the call (`call.rs`: the key with its
//! access), and [`Access`], what a request does to its key.
//!
//! # Writer precedence
//!
//! A key has one line, in arrival order, for readers and writers alike. A freed key is handed
//! on in that order, up to the first waiter that does not fit: a waiting writer waits for
//! every holder to leave, and the readers that arrive after it wait behind it (a newcomer
//! reader does not pass a waiting writer, whatever the strategy); when the writer is done,
//! the readers behind it enter together. A steady stream of readers does not starve a
//! writer: it waits for the readers ahead of it, not for those after it.
//!
//! Each holding, reader's or writer's, is a lease of its own, with its own fencing token from
//! the key's one counter: a writer's token is greater than every earlier holder's, readers'
//! included. Holdings are renewed while their handlers run and released on every exit path;
//! a dead holder's lease runs out with its TTL.
//!
//! The keys are a semaphore's ([`semaphore`](crate::semaphore)): a reader holds one of the
//! key's permits, a writer all of them. A [`LockLayer`](crate::LockLayer) with
//! [`permits`](crate::LockLayer::permits) on the same key is a reader there.
//!
//! ```
//! use std::convert::Infallible;
//! use redefer::read_write::{Access, ReadWriteLayer};
//! use redefer::{Backoff, MemoryStore, strategy::Retry};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! enum Invoice { Render(u64), Pay(u64) }
//!
//! let invoices = ServiceBuilder::new()
//!     .layer(
//!         ReadWriteLayer::new(
//!             MemoryStore::new(),
//!             |request: &Invoice| match request {
//!                 Invoice::Render(id) | Invoice::Pay(id) => Some(format!("invoice:{id}")),
//!             },
//!             |request: &Invoice| match request {
//!                 Invoice::Render(_) => Access::Read,
//!                 Invoice::Pay(_) => Access::Write,
//!             },
//!         )
//!         .on_conflict(Retry::new(Backoff::default())),
//!     )
//!     .service(service_fn(|request: Invoice| async move {
//!         Ok::<_, Infallible>(matches!(request, Invoice::Pay(_)))
//!     }));
//!
//! assert_eq!(invoices.clone().oneshot(Invoice::Render(7)).await.unwrap().done(), Some(false));
//! assert_eq!(invoices.oneshot(Invoice::Pay(7)).await.unwrap().done(), Some(true));
//! # }
//! ```

mod access;
mod call;
mod layer;
mod service;

pub use self::access::{Access, AccessExtractor};
pub use self::call::AccessedKey;
pub use self::layer::ReadWriteLayer;
pub(crate) use self::layer::UNLIMITED;
pub use self::service::ReadWriteService;
