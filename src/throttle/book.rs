//! How a throttle's refusal books the key's next slot: the store behind a
//! [`NextSlot`](crate::throttle::NextSlot).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{Rate, ThrottleStore};
use crate::error::StoreError;
use crate::guard::{Book, Booking, NextSlot, Waiter};
use crate::key::LockKey;

/// The booker of `key` at `rate` in `store`.
struct StoreBook<St> {
    store: St,
    key: LockKey,
    rate: Rate,
}

impl<St: ThrottleStore> Book for StoreBook<St> {
    fn book(&self, waiter: Waiter) -> Pin<Box<dyn Future<Output = Result<Booking, StoreError>> + Send>> {
        let (store, key, rate) = (self.store.clone(), self.key.clone(), self.rate);
        Box::pin(async move {
            let booking = store.book(&key, rate, &waiter).await?;
            metrics::counter!("redefer_throttle_booked_total").increment(1);
            metrics::histogram!("redefer_throttle_delay_seconds").record(booking.wait.as_secs_f64());
            Ok(booking)
        })
    }
}

/// The next slot of `key` at `rate` in `store`, opening in `opens_in`.
pub(super) fn next_slot<St: ThrottleStore>(
    opens_in: Duration,
    store: St,
    key: LockKey,
    rate: Rate,
) -> NextSlot {
    NextSlot::new(opens_in, Arc::new(StoreBook { store, key, rate }))
}
