//! Who a lock's call is to its keys (a lock's call, a set's), from attempt to attempt.

use std::time::Duration;

use tokio::time::Instant;

use crate::guard::{Waiter, current_job_waiter, lock_met};
use crate::lock::LockToken;

/// Who a call is to its keys' holders and lines, and what its last conflict found.
pub(crate) struct Caller {
    /// The token the call's holdings are taken with.
    pub(crate) token: LockToken,
    /// A re-injected job meets its keys as its own waiter: they may be reserved for it.
    pub(crate) job: Option<Waiter>,
    /// The last conflict's holder, if any conflict was met yet.
    holder: Option<MetHolder>,
}

/// The holder a call's last conflict met, as the store answered.
#[derive(Debug, Clone, Copy)]
struct MetHolder {
    /// How long it still lived (`None`: a key without a TTL, written by another tool).
    remaining: Option<Duration>,
    /// It was a reservation for a waiter, not a holding.
    reserved: bool,
    /// How many waited in line before the call.
    ahead: u64,
    /// When the answer came.
    at: Instant,
}

impl Caller {
    /// A new call: a fresh token, as the job it runs for (if it runs for one).
    pub(crate) fn new() -> Caller {
        Caller {
            token: LockToken::random(),
            job: current_job_waiter(),
            holder: None,
        }
    }

    /// Who this call is, in its keys' lines and to their holders; built only when needed (a
    /// conflict, a superseding strategy): an uncontended call allocates nothing for it.
    pub(crate) fn waiter(&self) -> Waiter {
        self.job.clone().unwrap_or_else(|| Waiter::caller(self.token))
    }

    /// Keeps what the last conflict found of the holder in the way (a reservation, if
    /// `reserved`), and of the line: `ahead` waited before the call.
    pub(crate) fn met(&mut self, remaining: Option<Duration>, reserved: bool, ahead: u64) {
        self.holder = Some(MetHolder {
            remaining,
            reserved,
            ahead,
            at: Instant::now(),
        });
    }

    /// When the holding (or the reservation) the last conflict met runs out, if it has a TTL:
    /// then the key is free, and nobody is told.
    pub(crate) fn holder_runs_out_at(&self) -> Option<Instant> {
        let holder = self.holder?;
        Some(holder.at + holder.remaining?)
    }

    /// Tells the job that goes back to wait in line how long its last conflict's holder may
    /// keep the key, when the job is the first in line: should the holder die, the key frees
    /// then, with nobody to hand it over, and the first in line is whose it is. (A job further
    /// back waits for its turn: were each of them to come back when the holder runs out, all
    /// would find the key handed to the first.) A reservation runs out into the next handoff,
    /// not into a free key.
    pub(crate) fn tell_job_of_holder(&self) {
        let remaining = self
            .holder
            .filter(|holder| !holder.reserved && holder.ahead == 0)
            .and_then(|holder| holder.remaining);
        lock_met(remaining);
    }
}
