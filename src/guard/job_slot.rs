//! A job's slot in its scheduler, given back while the job waits for its key.
//!
//! A job that meets its key taken could go back to the queue at once: then every turn it is
//! handed costs a promotion, a claim and a run, and a key handed to a job that still waits
//! for another key of its set idles all that while (BENCHMARKS.md, "Deferred sets"). Instead
//! it waits in its lines for a while, woken by its turn as a caller is (a wake-up and one
//! script call per turn). It does not hold one of the scheduler's `concurrency` slots
//! meanwhile, or waiting jobs would keep the others from running: it waits in one of the
//! scheduler's places (eight per slot, `scheduler/run.rs`), and takes a slot again to attempt
//! the key. With no place free it goes back to the queue at once.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The scheduler's slot a job runs in, and the place it waits in once it has one.
#[derive(Debug)]
pub(crate) struct JobSlot {
    slots: Arc<Semaphore>,
    places: Arc<Semaphore>,
    slot: Mutex<Option<OwnedSemaphorePermit>>,
    place: Mutex<Option<OwnedSemaphorePermit>>,
    /// The scheduler is stopping: a waiting job stops waiting (it goes back to the queue at
    /// once, rather than hold up the shutdown for its grace).
    stopping: CancellationToken,
}

impl JobSlot {
    /// The job runs in `slot`, one of its scheduler's; it may wait in one of `places` until
    /// `stopping` is cancelled.
    pub(crate) fn new(
        slot: OwnedSemaphorePermit,
        places: Arc<Semaphore>,
        stopping: CancellationToken,
    ) -> Self {
        JobSlot {
            slots: Arc::clone(slot.semaphore()),
            places,
            slot: Mutex::new(Some(slot)),
            place: Mutex::new(None),
            stopping,
        }
    }

    /// Gives the slot and the place back: the handler has returned.
    pub(crate) fn free(&self) {
        lock(&self.slot).take();
        lock(&self.place).take();
    }

    /// Whether the job has a place to wait in: one it took before, or a free one, kept until
    /// its wait ends; none once the scheduler is stopping.
    pub(crate) fn take_place(&self) -> bool {
        if self.stopping.is_cancelled() {
            return false;
        }
        let mut place = lock(&self.place);
        if place.is_none() {
            *place = Arc::clone(&self.places).try_acquire_owned().ok();
        }
        place.is_some()
    }

    /// Runs `wait` out of the job's slot when the job has a place to wait in, and takes a slot
    /// again before it returns; in the slot otherwise. `None` when the scheduler began to stop
    /// before `wait` ended.
    pub(crate) async fn out_of_slot<F: Future>(&self, wait: F) -> Option<F::Output> {
        if lock(&self.place).is_none() {
            return Some(wait.await);
        }
        // Taken out and dropped here: another job runs in the slot while this one waits.
        let gave_back = lock(&self.slot).take().is_some();
        let woken = tokio::select! {
            woken = wait => Some(woken),
            () = self.stopping.cancelled() => None,
        };
        if gave_back {
            // The scheduler's semaphore is never closed.
            if let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await {
                *lock(&self.slot) = Some(slot);
            }
        }
        // The place is another job's to wait in while this one attempts (and runs).
        lock(&self.place).take();
        woken
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
