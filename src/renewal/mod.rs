//! Keeps a lease alive (a lock, a permit, a claimed job) while its holder works for longer
//! than a fraction of its TTL.
//!
//! The renewal must not depend on the holder's task being polled: a handler that blocks its
//! worker thread (synchronous I/O, a CPU loop) stops its own task, and a renewal living there
//! would let the lease run out under a handler that is still working. So a [`Renewal`] runs in
//! a task of its own, started by the [`watchdog`] thread when the first extension is due (a
//! third of the TTL): it does not depend on any worker driving the runtime's timers, and a
//! handler that finishes before that costs one registration in the watchdog's map, no timer
//! and no task; the jobs of one claim share one registration
//! ([`Renewal::start_together`]), each extended and lost on its own. The holder runs its work under [`while_valid`], which stops the work once the
//! lease may have run out, and polls the [`Renewal`], which resolves when the renewal gave up.

mod lease;
mod renewer;
mod watchdog;

pub use lease::LossReason;
pub(crate) use lease::{Lease, while_valid};
pub(crate) use renewer::Renewal;
