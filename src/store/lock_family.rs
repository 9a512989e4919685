//! The lock family's one [`LockStore`] for a store that keeps both insides: the lock's (one
//! holder: `acquire_lock`, `extend_lock`, ...) and the semaphore's (a set of leases:
//! `acquire_permit_in_line`, `extend_permit_lease`, ...), chosen by [`Holders`]; the requests to
//! stop are one channel per key for both (`ask_holders_to_stop`, `stop_channel`). Written once
//! for the two stores, whose insides are their own.
//!
//! [`LockStore`]: crate::lock::LockStore
//! [`Holders`]: Holders

/// `impl LockStore for $store` by its inherent insides (see the module).
macro_rules! lock_family {
    (impl $(<$($generic:ident),*>)? for $store:ty $(where $($bound:tt)*)?) => {
        // In a block of its own: the names it uses do not meet the caller's.
        const _: () = {
            use std::time::Duration;

            use crate::error::StoreError;
            use crate::key::LockKey;
            use crate::lock::{AcquireRequest, Acquisition, Fencing, Handoffs, Holders, JoinRequest, LockStore, LockToken};
use crate::guard::{LineCap, LineJoin, Waiter};

            impl $(<$($generic),*>)? LockStore for $store $(where $($bound)*)? {
                async fn acquire(
                    &self,
                    key: &LockKey,
                    token: LockToken,
                    ttl: Duration,
                    holders: Holders,
                    waiter: Option<&Waiter>,
                    fencing: Fencing,
                ) -> Result<Acquisition, StoreError> {
                    let request = AcquireRequest { token, ttl, waiter, fencing };
                    match holders {
                        Holders::One => self.acquire_lock(key, request).await,
                        Holders::Permits(_) | Holders::Writer(_) => {
                            self.acquire_permit_in_line(key, holders, request).await
                        }
                    }
                }

                async fn extend_holding(
                    &self,
                    key: &LockKey,
                    token: LockToken,
                    ttl: Duration,
                    holders: Holders,
                ) -> Result<bool, StoreError> {
                    match holders {
                        Holders::One => self.extend_lock(key, token, ttl).await,
                        Holders::Permits(_) | Holders::Writer(_) => self.extend_permit_lease(key, token, ttl, holders).await,
                    }
                }

                async fn release_holding(
                    &self,
                    key: &LockKey,
                    token: LockToken,
                    holders: Holders,
                    held_for: Option<Duration>,
                ) -> Result<bool, StoreError> {
                    match holders {
                        Holders::One => self.release_lock(key, token, held_for).await,
                        Holders::Permits(_) | Holders::Writer(_) => self.release_permit_lease(key, token, holders, held_for).await,
                    }
                }

                async fn join_line(
                    &self,
                    key: &LockKey,
                    waiter: &Waiter,
                    replacing: Option<&Waiter>,
                    holders: Holders,
                    cap: Option<LineCap>,
                ) -> Result<LineJoin, StoreError> {
                    let request = JoinRequest { waiter, replacing, cap };
                    match holders {
                        Holders::One => self.join_lock_line(key, request).await,
                        Holders::Permits(_) | Holders::Writer(_) => self.join_permit_line(key, holders, request).await,
                    }
                }

                async fn leave_line(&self, key: &LockKey, waiter: &Waiter, holders: Holders) -> Result<(), StoreError> {
                    match holders {
                        Holders::One => self.leave_lock_line(key, waiter).await,
                        Holders::Permits(_) | Holders::Writer(_) => self.leave_permit_line(key, waiter, holders).await,
                    }
                }

                fn line_handoffs(&self, key: &LockKey, holders: Holders) -> Handoffs {
                    match holders {
                        Holders::One => self.lock_handoffs(key),
                        Holders::Permits(_) | Holders::Writer(_) => self.permit_line_handoffs(key),
                    }
                }

                async fn request_stop(
                    &self,
                    key: &LockKey,
                    from: &Waiter,
                ) -> Result<(), StoreError> {
                    self.ask_holders_to_stop(key, from).await
                }

                fn stop_requests(&self, key: &LockKey) -> Handoffs {
                    self.stop_channel(key)
                }

                fn reservation(&self) -> Duration {
                    self.reservation
                }
            }
        };
    };
}

pub(super) use lock_family;
