//! Idempotency that covers a request's whole life: a request id (a webhook's delivery id, an
//! `Idempotency-Key` header) runs once, whether its first request ran directly, waits as a
//! deferred job, runs from the queue, or is kept as done or dead; a later request of the id is
//! answered [`Outcome::Duplicate`](crate::Outcome::Duplicate) with where the first one is.
//!
//! [`IdempotencyLayer`] goes in front of the guard (`.over_guard()`), with the queue the stack
//! defers to: it records each id on the queue shard of the id's job, so that one atomic step
//! finds the id as a job or as a request record, or records it. A request deferred under it
//! becomes a job of that very id (the [`Defer`](crate::strategy::Defer) behind it takes the id
//! unless it has a `job_id` of its own): the job is then the record. After a direct run the
//! record is kept as long as the queue keeps finished jobs
//! ([`DelayQueue::retain_finished`](crate::queue::DelayQueue::retain_finished)); with no
//! retention it is forgotten at once, as a finished job is: the id is new again. A failed
//! direct run forgets it (a retry may run). While a request is in progress its record is renewed
//! every third of its hold (10 s by default): a process that dies mid-run leaves the id taken
//! for one hold at most.

mod layer;
pub mod model;
mod service;
mod store;

pub use self::layer::{DEFAULT_HOLD, IdempotencyLayer};
pub use self::service::IdempotencyService;
pub use self::store::{Begun, IdempotencyStore};
pub use crate::guard::outcome::Seen;
