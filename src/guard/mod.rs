//! What every guard shares: the outcome of a guarded call and its errors, how a request names
//! its key, a held key's line and a throttled key's next slot (what a conflict carries), the
//! order of a guard and its handler, and the job or request a call runs for.
//!
//! Every guard's layer builds a [`GuardService`], which keeps tower's contract and hands each
//! keyed request to its [`Guard`] (the layer itself). A guard whose key a request can meet taken
//! (the lock, the throttle) runs the one call path of `call.rs` and supplies what differs: how
//! it takes its key, what its [`Conflict`] says, how it waits and gives the key back. The
//! guards are built on it: the lock ([`LockLayer`](crate::LockLayer), and with
//! [`permits`](crate::LockLayer::permits) the semaphore), the throttle
//! ([`ThrottleLayer`](crate::throttle::ThrottleLayer)), and the policies in front of them
//! ([`debounce`](crate::debounce), [`idempotency`](crate::idempotency)). A new guard goes
//! beside them, on this vocabulary.

mod call;
pub(crate) mod conflict;
pub(crate) mod current_job;
pub(crate) mod decision;
mod error;
mod extract;
mod future;
mod job_slot;
mod line;
mod nesting;
pub(crate) mod next_slot;
pub(crate) mod outcome;
mod request_id;
mod service;
pub(crate) mod ttl;
mod waiter;

pub(crate) use self::call::{Attempt, CallResult, Contended, TakesContendedPath, Woken};
// Each of these has one public path, in the module of its users: the conflict's vocabulary
// in `strategy`, the running job in `scheduler`, the next slot in `throttle`, a request seen
// before in `idempotency`, the default TTL in `lock`.
pub(crate) use self::conflict::{Conflict, ConflictKind, HeldConflict, ThrottledConflict};
pub(crate) use self::current_job::{CurrentJob, current_job_of, current_job_waiter};
pub(crate) use self::current_job::{
    RunSignals, admitted_at_rate, handler_returned, lock_met, may_wait_in_place, out_of_slot, run_for_job,
};
pub(crate) use self::decision::{ConflictStrategy, Decision};
pub use self::error::Error;
pub(crate) use self::error::JobAfterError;
pub use self::extract::KeyExtractor;
pub(crate) use self::extract::guarded_key;
pub use self::future::ResponseFuture;
pub(crate) use self::job_slot::JobSlot;
pub use self::line::{Line, LineCap, LineJoin, Overflow, SUPERSEDED_BY_NEWER};
pub(crate) use self::line::{LineActions, LineFuture};
pub(crate) use self::nesting::SendHandler;
pub use self::nesting::{Nesting, OverGuard, OverHandler};
pub(crate) use self::next_slot::Book;
pub(crate) use self::next_slot::{Booking, NextSlot};
pub(crate) use self::outcome::Seen;
pub use self::outcome::{Deferred, Duplicate, Outcome};
pub(crate) use self::request_id::{current_request_id, with_request_id};
pub use self::service::{Guard, GuardService, GuardedError, GuardedResponse, GuardedResult};
pub(crate) use self::ttl::DEFAULT_TTL;
pub use self::waiter::Waiter;
