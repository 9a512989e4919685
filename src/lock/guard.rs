//! Release on every exit path, including the ones no code runs on.

use tokio::runtime::Handle;

use crate::error::StoreError;
use crate::key::LockKey;
use crate::lock::LockStore;
use crate::lock::LockToken;

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
}

impl<St: LockStore> ReleaseOnDrop<St> {
    pub(crate) fn new(store: St, key: LockKey, token: LockToken) -> Self {
        ReleaseOnDrop {
            store,
            key,
            token,
            armed: false,
        }
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
    pub(crate) async fn release(&mut self) -> Result<bool, StoreError> {
        let released = self.store.release(&self.key, self.token).await;
        self.armed = false;
        released
    }
}

impl<St: LockStore> Drop for ReleaseOnDrop<St> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            tracing::warn!(key = %self.key, "lock dropped outside a tokio runtime; it expires with its TTL");
            return;
        };
        let (store, key, token) = (self.store.clone(), self.key.clone(), self.token);
        runtime.spawn(async move {
            match store.release(&key, token).await {
                Ok(released) => tracing::debug!(%key, released, "lock released after cancellation"),
                Err(error) => {
                    tracing::warn!(%key, %error, "release after cancellation failed; the lock expires with its TTL")
                }
            }
        });
    }
}
