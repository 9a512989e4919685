//! Release on every exit path, including the ones no code runs on.

use tokio::runtime::Handle;

use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::LockStore;
use std::time::Duration;

use crate::lock::{LockToken, Waiter};

/// Releases a lock that may be held when dropped while armed.
///
/// Success, handler errors and panics release the lock explicitly with [`release`]; this guard
/// covers the path where no code of ours runs: the caller drops the response future mid-call
/// (a timeout, a client gone). Drop cannot wait, so it spawns the token-checked release on the
/// runtime the lock was taken on.
///
/// It is armed before an acquire is sent: a dropped future whose acquire reached Redis but whose
/// reply did not reach us still releases the lock instead of leaving it for the TTL.
///
/// [`release`]: ReleaseOnDrop::release
pub(crate) struct ReleaseOnDrop<St: LockStore> {
    store: St,
    key: LockKey,
    token: LockToken,
    armed: bool,
    /// The caller's place in the key's line while it waits in place: left on drop, so that a
    /// cancelled caller does not hold up the line until its reservation runs out.
    waiting_as: Option<Waiter>,
}

impl<St: LockStore> ReleaseOnDrop<St> {
    pub(crate) fn new(store: St, key: LockKey, token: LockToken) -> Self {
        ReleaseOnDrop {
            store,
            key,
            token,
            armed: false,
            waiting_as: None,
        }
    }

    /// The caller's place in line, to leave if the guard is dropped; `None` once the caller
    /// left it, or took the lock (which takes it out of the line).
    pub(crate) fn waiting_as(&mut self, waiter: Option<Waiter>) {
        self.waiting_as = waiter;
    }

    /// From now on, dropping the guard releases the lock.
    pub(crate) fn arm(&mut self) {
        self.armed = true;
    }

    /// The lock is known not to be ours: dropping the guard does nothing.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Releases now. The guard stays armed until the store answered, so a release that is
    /// itself cancelled is still retried from `drop`.
    pub(crate) async fn release_after(&mut self, held_for: Option<Duration>) -> Result<bool, StoreError> {
        let released = self.store.release_after(&self.key, self.token, held_for).await;
        self.armed = false;
        released
    }
}

impl<St: LockStore> Drop for ReleaseOnDrop<St> {
    fn drop(&mut self) {
        let waiting_as = self.waiting_as.take();
        if !self.armed && waiting_as.is_none() {
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            tracing::warn!(key = %self.key, "lock dropped outside a tokio runtime; it expires with its TTL");
            return;
        };
        let (store, key, token, armed) = (self.store.clone(), self.key.clone(), self.token, self.armed);
        runtime.spawn(async move {
            if armed {
                match store.release(&key, token).await {
                    Ok(released) => tracing::debug!(%key, released, "lock released after cancellation"),
                    Err(error) => {
                        tracing::warn!(%key, %error, "release after cancellation failed; the lock expires with its TTL")
                    }
                }
            }
            if let Some(waiter) = waiting_as
                && let Err(error) = store.leave(&key, &waiter).await
            {
                tracing::warn!(%key, %error, "cannot leave the line after cancellation");
            }
        });
    }
}
