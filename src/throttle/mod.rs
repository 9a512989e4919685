//! A rate per key: [`ThrottleLayer`] admits each request at most at its key's [`Rate`] (GCRA,
//! by the store's clock), and a request over it knows exactly when the key's next slot opens.
//!
//! What a request over the rate does is the same [`ConflictStrategy`](crate::strategy::ConflictStrategy)
//! choice as for a held lock, and each strategy uses the exact slot:
//!
//! | strategy | over the rate |
//! |---|---|
//! | [`FailFast`](crate::strategy::FailFast) | [`Error::Throttled`](crate::Error::Throttled) with the exact time to the next slot |
//! | [`Retry`](crate::strategy::Retry) | books the next slot and waits exactly until it, then runs (no second check) |
//! | [`Defer`](crate::strategy::Defer) | books the next slot for the job it stores, due at it: the job runs there, admitted without a second check |
//!
//! N requests deferred in a row get N consecutive slots, in arrival order, and each runs once:
//! nothing polls and nothing is deferred again. A job that meets a throttle without a booking
//! (a job deferred by a lock further in, say) books its slot and goes back to wait for it,
//! using no attempt.
//!
//! **Limits the handler learns**: a handler whose upstream answers "429, retry after" closes
//! the key until then ([`close_for`], or [`close_key_for`] for another key of the throttle):
//! every process's requests and jobs for it wait for the reopening, exactly, and the key keeps
//! its rate after it; [`Closed::retry_at_reopening`] sends the request's own job back to wait
//! for it without using an attempt.
//!
//! One store call decides each request; booking a slot is one more. The keys of a throttled
//! key carry its hash tag, so a throttle and a lock on the same key live on one Redis Cluster
//! node.
//!
//! **Under crashes**: the schedule is in the store, so a process that dies changes nothing of
//! it; a slot booked for a caller that dies while it waits goes unused (the rate is kept, the
//! slot is lost); a job's booking waits for its job for an hour past its slot (the job is
//! stored before the caller hears of it, and runs at least once).

mod book;
mod call;
mod close;
mod layer;
mod memory_store;
pub mod model;
mod rate;
mod redis_store;
mod service;
mod store;

pub(crate) use self::close::ThrottleScope;
pub use self::close::{CloseError, Closed, MAX_CLOSE, close_for, close_key_for};
pub use self::layer::ThrottleLayer;
pub use self::rate::{Rate, RateError};
pub use self::service::ThrottleService;
pub use self::store::{Admission, BOOKING_RETENTION, ThrottleStore};
pub use crate::guard::next_slot::{Booking, NextSlot};
