//! Debouncing: a key's requests run once per burst, with the latest payload, a period after the
//! burst's last request (and never later than a longest wait after its first).
//!
//! [`DebounceLayer`] defers every request with a key to a delay queue as the key's pending job
//! (the [`Coalesce::latest`](crate::strategy::Coalesce::latest) mechanism): a request that
//! arrives while the job waits replaces its payload and pushes its due time a period later,
//! within the burst's longest wait. A [`Scheduler`](crate::Scheduler) on the queue runs the job
//! through the same stack, where the layer lets it pass. Requests whose extractor returns `None`
//! are not debounced: the choice is per request.
//!
//! A job claimed for its run stops being the key's pending job: a request that arrives while it
//! runs starts the next burst.

mod layer;
mod service;

pub use self::layer::DebounceLayer;
pub use self::service::DebounceService;
pub use crate::queue::debounce::{Debounce, DebounceError};
