//! What to do when the lock a request needs is held by another: the [`ConflictStrategy`] trait
//! and the built-in strategies.
//!
//! | strategy | fits | cost |
//! |---|---|---|
//! | [`FailFast`] | requests a person started: they see an error and retry later | the request is refused |
//! | [`Retry`] | short critical sections, rare collisions | the waiting request holds its slot |
//! | [`Defer`] | asynchronous work (messages, jobs) | the request runs later, from a delay queue |
//! | [`Supersede`] | the newest request makes the running one pointless (a newer sync, a re-render) | the holder is asked to stop; the request waits for the key |
//! | [`Coalesce`] | work where only the latest (or first) request matters: syncs, recomputations | a key keeps one waiting job; the others join it |
//!
//! Strategies compose: [`Retry`] falls through to another strategy once its bounds are spent,
//! and [`Switch`] picks one per request (interactive callers fail fast, webhooks defer).

mod coalesce;
mod defer;
mod fail_fast;
mod job_target;
mod line_cap;
mod retry;
mod supersede;
mod switch;

pub use self::coalesce::Coalesce;
pub use self::defer::Defer;
pub use self::fail_fast::FailFast;
pub use self::retry::{Retry, RetryLimits};
pub use self::supersede::Supersede;
pub use self::switch::Switch;

pub use crate::guard::conflict::{Conflict, ConflictKind, HeldConflict, ThrottledConflict};
pub use crate::guard::decision::{ConflictStrategy, Decision};
