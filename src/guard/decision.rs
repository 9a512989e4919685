//! What a strategy answers to a conflict ([`Decision`]), and the trait of every strategy
//! ([`ConflictStrategy`]): the guards ask it, the built-in strategies of
//! [`strategy`](crate::strategy) and a user's own implement it.

use std::future::Future;
use std::time::Duration;

use super::{Conflict, Deferred};
use crate::error::BoxError;
use crate::queue::JobId;

/// A strategy's answer to a conflict.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Wait in the key's line for at most this long (the request is told when the key is
    /// handed to it), then try to acquire again.
    RetryAfter(Duration),
    /// Give up: the caller gets [`Error::Locked`](crate::Error::Locked) (over a throttle's
    /// rate, [`Error::Throttled`](crate::Error::Throttled)) with this hint.
    ///
    /// A [`Scheduler`](crate::Scheduler)'s job refused so still waits for its key: a held key
    /// is not the job's failure, so its scheduler puts it back to wait in the key's line, using
    /// no attempt, until the queue's
    /// [`max_lock_wait`](crate::queue::RetryPolicy::max_lock_wait).
    Reject {
        /// When trying again may succeed.
        retry_after: Option<Duration>,
    },
    /// The request is a job re-injected from the strategy's own queue, and it met its key
    /// again: it goes back to that queue to wait for its turn (in the key's line, or for the
    /// slot it booked over a throttle's rate), using no attempt and storing nothing new
    /// ([`Defer`](crate::strategy::Defer), [`Coalesce`](crate::strategy::Coalesce)). Its
    /// scheduler is answered as to a refusal ([`Error::Locked`](crate::Error::Locked),
    /// [`Error::Throttled`](crate::Error::Throttled)), with this hint of when the turn may
    /// come, and puts the job back; the metrics count it apart from refusals.
    BackToQueue {
        /// When the job's turn may come.
        retry_after: Option<Duration>,
    },
    /// The request was stored to run later: the caller gets
    /// [`Outcome::Deferred`](crate::Outcome::Deferred).
    Deferred(Deferred),
    /// A newer request for the key is already waiting and this one is dropped in its favour
    /// ([`Coalesce::latest`](crate::strategy::Coalesce::latest)): the caller gets [`Error::Superseded`](crate::Error::Superseded).
    Superseded {
        /// The job that carries the newer request.
        by: JobId,
    },
    /// The key's line is full: the caller gets [`Error::LineFull`](crate::Error::LineFull), and
    /// nothing is stored.
    LineFull {
        /// How many wait in the line.
        waiting: u64,
        /// When trying again may succeed.
        retry_after: Option<Duration>,
    },
}

/// Decides what a request does when its lock is held by another.
///
/// `on_conflict` looks at the request synchronously and returns a future that owns what it
/// needs (`'static`): the service never holds a borrow of the request across an await, so
/// requests need not be `Sync`.
///
/// A strategy that waits at most five times, a fixed 10 ms apart, then refuses:
///
/// ```
/// use std::future::{ready, Future};
/// use std::time::Duration;
/// use redefer::BoxError;
/// use redefer::strategy::{Conflict, ConflictStrategy, Decision};
///
/// #[derive(Clone)]
/// struct FivePolls;
///
/// impl<Req> ConflictStrategy<Req> for FivePolls {
///     fn on_conflict(
///         &self,
///         conflict: Conflict,
///         _request: &Req,
///     ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
///         ready(Ok(if conflict.attempt < 5 {
///             Decision::RetryAfter(Duration::from_millis(10))
///         } else {
///             Decision::Reject { retry_after: conflict.retry_after }
///         }))
///     }
/// }
/// ```
pub trait ConflictStrategy<Req>: Send + Sync + 'static {
    /// Decides what `request` does about `conflict`.
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Req,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static;

    /// Whether this strategy may ask holders to stop ([`Supersede`](crate::strategy::Supersede)): then the layer's holders
    /// listen for such requests while they hold (one subscription per holding), and their
    /// handlers hear them through [`HeldLock::superseded`](crate::HeldLock::superseded). Other
    /// strategies cost their holders nothing.
    fn supersedes(&self) -> bool {
        false
    }
}
