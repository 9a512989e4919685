//! The next slot of a throttled key, as a conflict strategy sees it: when it opens, and a way
//! to book it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Waiter;
use crate::error::StoreError;
use crate::queue::{JobId, QueueName};

/// When a throttled key's next slot opens, exactly, and the handle that books it: a
/// [`Conflict`](crate::strategy::Conflict) of a [`ThrottleLayer`](crate::throttle::ThrottleLayer) carries
/// one, and [`Defer`](crate::strategy::Defer) books the slot for the job it stores, so that the
/// job runs when its turn comes with nothing to poll.
#[derive(Clone)]
pub struct NextSlot {
    opens_in: Duration,
    booker: Arc<dyn Book>,
}

/// Books a slot of one key; object-safe, so that [`NextSlot`] names no store type.
pub(crate) trait Book: Send + Sync {
    fn book(&self, waiter: Waiter) -> Pin<Box<dyn Future<Output = Result<Booking, StoreError>> + Send>>;
}

impl NextSlot {
    /// A slot opening in `opens_in`, booked through `booker`.
    pub(crate) fn new(opens_in: Duration, booker: Arc<dyn Book>) -> Self {
        NextSlot { opens_in, booker }
    }

    /// How long until the key's next slot opens, by the store's clock, as of the refusal.
    pub fn opens_in(&self) -> Duration {
        self.opens_in
    }

    /// Books the next free slot for the job `id` of the (physical) queue `queue`: the job is
    /// admitted there when it comes through the throttle, and not counted again. Booking the
    /// same job again gives the same slot. Others may have booked meanwhile: the slot may be
    /// later than [`opens_in`](Self::opens_in).
    pub fn book_for_job(
        &self,
        queue: &QueueName,
        id: &JobId,
    ) -> impl Future<Output = Result<Booking, StoreError>> + Send + 'static {
        self.booker.book(Waiter::job(queue, id))
    }

    /// Books the next free slot for `caller`, which waits for it in place and then comes
    /// through the throttle as that waiter.
    pub(crate) fn book_for(
        &self,
        caller: Waiter,
    ) -> impl Future<Output = Result<Booking, StoreError>> + Send + 'static {
        self.booker.book(caller)
    }
}

impl fmt::Debug for NextSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NextSlot")
            .field("opens_in", &self.opens_in)
            .finish_non_exhaustive()
    }
}

/// A slot taken ahead of time: its request runs at `at` and is counted there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booking {
    /// When the slot opens, by the store's clock.
    pub at: SystemTime,
    /// How long from now that is (zero when a slot was open at once).
    pub wait: Duration,
}
