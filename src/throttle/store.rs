//! What a throttle needs of its store: the [`ThrottleStore`] operations.

use std::future::Future;
use std::time::Duration;

use super::Rate;
use crate::error::StoreError;
use crate::guard::Booking;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::sealed::Sealed;

/// What the store said of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Within the rate: the request takes the slot that is open now.
    Admitted,
    /// The request holds a booked slot: admitted, to start `wait` from now (zero once the slot
    /// has come and the runs before it have started). The booking is used up.
    Redeemed {
        /// How long until the booked slot.
        wait: Duration,
    },
    /// Over the rate: the next slot opens `opens_in` from now.
    Throttled {
        /// How long until the next slot, by the store's clock.
        opens_in: Duration,
    },
}

/// Atomic GCRA operations on one key: each decides a request against the key's schedule by
/// the store's clock, in one step.
///
/// The semantics, pinned for every store by the conformance tests:
/// - a key keeps the time its next slot opens, counting every request admitted or booked; a
///   request at or after it is admitted and moves it one [`interval`](Rate::interval) on
///   (from no earlier than `now - tolerance`: an idle key has its burst back);
/// - a request before it is refused with the exact time to it, and moves nothing;
/// - a booking takes the next slot (now, if one is open) and moves the schedule as an admission
///   there would: N bookings in a row get N consecutive slots. It is kept for its waiter, who
///   is admitted at its slot when it comes, without being counted again; booking again for the
///   same waiter gives the same slot;
/// - the key also keeps the same rate over the times requests actually start: booked requests
///   that come late together (a scheduler that was busy) are told to wait their turns rather
///   than start in a bunch, so that over any span `t`, at most `burst + rate * t` start.
///
/// Sealed, like [`LockStore`](crate::lock::LockStore): the crate's two stores implement it.
pub trait ThrottleStore: Sealed + Clone + Send + Sync + 'static {
    /// Decides a request on `key` at `rate`; `booked_as` is the waiter it comes as (a job, or a
    /// caller that booked), whose booked slot (if it has one) admits it.
    fn admit(
        &self,
        key: &LockKey,
        rate: Rate,
        booked_as: Option<&Waiter>,
    ) -> impl Future<Output = Result<Admission, StoreError>> + Send;

    /// Takes the next slot of `key` at `rate` for `waiter` (a job, or a caller that waits in
    /// place), kept until it comes.
    fn book(
        &self,
        key: &LockKey,
        rate: Rate,
        waiter: &Waiter,
    ) -> impl Future<Output = Result<Booking, StoreError>> + Send;

    /// Closes `key` for `duration` from now, by the store's clock (an upstream answered "429,
    /// retry after"): its next slot opens then and no earlier, for requests and bookings
    /// alike, and the slots after it follow at `rate` (the bookings already made start no
    /// earlier either, spaced at the rate: no burst at the reopening). A schedule already
    /// later stays as it is. How long until the key's next slot opens.
    fn close_for(
        &self,
        key: &LockKey,
        rate: Rate,
        duration: Duration,
    ) -> impl Future<Output = Result<Duration, StoreError>> + Send;

    /// Reopens `key` if it is closed (an operator's call: the upstream is back), as if its
    /// closing had ended now, by the store's clock: its next slot opens as soon as the schedule
    /// the closing found allows (a key closed right after its burst still keeps its rate over
    /// both sides of the closing), for requests and bookings made from now; bookings already
    /// made keep their slots. How long until the key's next slot opens; `None` when the key
    /// was not closed.
    fn reopen(&self, key: &LockKey) -> impl Future<Output = Result<Option<Duration>, StoreError>> + Send;
}

/// How long a booking waits for its job past its slot before it is dropped (a job deleted by an
/// operator, a queue whose schedulers were down all that time). A job that comes later is
/// decided as a new request.
pub const BOOKING_RETENTION: Duration = Duration::from_secs(60 * 60);
