//! Who a lock's call is to its keys (a lock's call, a set's), from attempt to attempt.

use std::time::Duration;

use crate::guard::{Waiter, current_job_waiter, lock_met};
use crate::lock::LockToken;

/// Who a call is to its keys' holders and lines, and what its last conflict found.
pub(crate) struct Caller {
    /// The token the call's holdings are taken with.
    pub(crate) token: LockToken,
    /// A re-injected job meets its keys as its own waiter: they may be reserved for it.
    pub(crate) job: Option<Waiter>,
    /// The last conflict's holder: how long it still lives, and whether it is a reservation.
    holder: (Option<Duration>, bool),
}

impl Caller {
    /// A new call: a fresh token, as the job it runs for (if it runs for one).
    pub(crate) fn new() -> Caller {
        Caller {
            token: LockToken::random(),
            job: current_job_waiter(),
            holder: (None, false),
        }
    }

    /// Who this call is, in its keys' lines and to their holders; built only when needed (a
    /// conflict, a superseding strategy): an uncontended call allocates nothing for it.
    pub(crate) fn waiter(&self) -> Waiter {
        self.job.clone().unwrap_or_else(|| Waiter::caller(self.token))
    }

    /// Keeps what the last conflict found of the holder in the way.
    pub(crate) fn met(&mut self, remaining: Option<Duration>, reserved: bool) {
        self.holder = (remaining, reserved);
    }

    /// Tells the job that goes back to wait in line how long its last conflict's holder may
    /// keep the key: a holder's TTL bounds its lock should it die; a reservation's runs out
    /// into the next handoff, not into a free key.
    pub(crate) fn tell_job_of_holder(&self) {
        let (remaining, reserved) = self.holder;
        lock_met(remaining.filter(|_| !reserved));
    }
}
