//! Release on every exit path, including the ones no code runs on.

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::backoff::Backoff;

use crate::key::LockKey;
use crate::lock::LockStore;
use std::time::Duration;

use crate::guard::Waiter;
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
    /// The lock's TTL: how long a release that failed is worth sending again.
    ttl: Duration,
    armed: Armed,
    /// The caller's place in the key's line while it waits in place: left on drop, so that a
    /// cancelled caller does not hold up the line until its reservation runs out.
    waiting_as: Option<Waiter>,
}

/// What the guard knows of the lock, which decides what a drop does and says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Armed {
    /// The lock is known not to be ours.
    Off,
    /// An acquire was sent and not answered: the lock may be ours.
    Acquiring,
    /// The lock is ours.
    Holding,
}

impl<St: LockStore> ReleaseOnDrop<St> {
    /// Releases `key`, held in `store` by `token` for `ttl`.
    pub(crate) fn new(store: St, key: LockKey, token: LockToken, ttl: Duration) -> Self {
        ReleaseOnDrop {
            store,
            key,
            token,
            ttl,
            armed: Armed::Off,
            waiting_as: None,
        }
    }

    /// The key it releases.
    pub(crate) fn key(&self) -> &LockKey {
        &self.key
    }

    /// The store it releases in: the one the call holds its key in.
    pub(crate) fn store(&self) -> &St {
        &self.store
    }

    /// The caller's place in line, to leave if the guard is dropped; `None` once the caller
    /// left it, or took the lock (which takes it out of the line).
    pub(crate) fn waiting_as(&mut self, waiter: Option<Waiter>) {
        self.waiting_as = waiter;
    }

    /// An acquire is about to be sent: from now on, dropping the guard releases the lock (in
    /// case the acquire took it).
    pub(crate) fn arm(&mut self) {
        self.armed = Armed::Acquiring;
    }

    /// The acquire answered: the lock is ours.
    pub(crate) fn holding(&mut self) {
        self.armed = Armed::Holding;
    }

    /// The lock is known not to be ours: dropping the guard does nothing.
    pub(crate) fn disarm(&mut self) {
        self.armed = Armed::Off;
    }

    /// Releases the lock, awaited by the call before its response returns: when the caller
    /// has its response, the lock is given back (or the store failed, and it expires with its
    /// TTL, which is all the caller could do about it). A release left to a task of its own
    /// would save the caller the wait for its answer, but is lost when the runtime ends with the
    /// call (a program returning from `main`, a service shut down after its last response, a
    /// serverless function frozen once it answered): the key stays held for its TTL.
    ///
    /// Armed until the store answers: a caller that drops the call while it waits (a timeout
    /// around the call) still releases, from the drop (a second release of a released lock
    /// finds it no longer ours and changes nothing).
    ///
    /// `false` when the store found the key no longer ours (it ran out, or another client
    /// overwrote it): then the release handed it to nobody.
    pub(crate) async fn release(&mut self, held_for: Option<Duration>) -> bool {
        let (store, key, token) = (&self.store, &self.key, self.token);
        let released = store
            .release_holding(key, token, store.holders(key), held_for)
            .await;
        self.armed = Armed::Off;
        let key = &self.key;
        match released {
            Ok(true) => tracing::debug!(%key, "lock released"),
            Ok(false) => {
                tracing::warn!(%key, "lock had expired before its release");
                return false;
            }
            Err(error) => {
                tracing::warn!(%key, %error, "lock release failed; it is sent again until the lock's TTL runs out");
                self.release_later();
            }
        }
        true
    }

    /// Sends a release that failed again, in the background, until the store answers or the
    /// lock's TTL has run out (then the lock is free anyway). A key whose release failed
    /// hands its turn to nobody, and its line would wait out the whole TTL behind a holder
    /// that is done; a release sent again once the store is back hands it over then. Sent
    /// again after the TTL, it would change nothing: it is token-checked.
    fn release_later(&self) {
        let Ok(runtime) = Handle::try_current() else {
            return;
        };
        let (store, key, token) = (self.store.clone(), self.key.clone(), self.token);
        let given_up_at = Instant::now() + self.ttl;
        runtime.spawn(async move {
            let backoff = Backoff::exponential(Duration::from_millis(20), Duration::from_secs(1));
            for failures in 0.. {
                let pause = backoff.delay(failures, &mut rand::rng());
                if Instant::now() + pause >= given_up_at {
                    break;
                }
                tokio::time::sleep(pause).await;
                match store
                    .release_holding(&key, token, store.holders(&key), None)
                    .await
                {
                    Ok(released) => {
                        tracing::debug!(%key, released, "lock release sent again");
                        return;
                    }
                    Err(error) => tracing::debug!(%key, %error, "lock release failed again"),
                }
            }
            tracing::warn!(%key, "lock release failed until its TTL ran out; it expired");
        });
    }
}

impl<St: LockStore> Drop for ReleaseOnDrop<St> {
    fn drop(&mut self) {
        let waiting_as = self.waiting_as.take();
        if self.armed == Armed::Off && waiting_as.is_none() {
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            tracing::warn!(key = %self.key, "lock dropped outside a tokio runtime; it expires with its TTL");
            return;
        };
        let (store, key, token, armed) = (self.store.clone(), self.key.clone(), self.token, self.armed);
        runtime.spawn(async move {
            match (armed, store_release(&store, &key, token, armed).await) {
                (_, None) => {}
                (Armed::Holding, Some(Ok(released))) => {
                    tracing::debug!(%key, released, "lock released after cancellation");
                }
                (_, Some(Ok(true))) => tracing::debug!(%key, "cancelled while acquiring: the lock it took is released"),
                (_, Some(Ok(false))) => tracing::debug!(%key, "cancelled before it acquired the lock"),
                (Armed::Holding, Some(Err(error))) => {
                    tracing::warn!(%key, %error, "release after cancellation failed; the lock expires with its TTL")
                }
                // The acquire's fate is unknown: most likely it never reached the store either.
                (_, Some(Err(error))) => tracing::debug!(
                    %key,
                    %error,
                    "cancelled while acquiring, and the release failed: should the acquire have taken the lock, it expires with its TTL"
                ),
            }
            if let Some(waiter) = waiting_as
                && let Err(error) = store.leave_line(&key, &waiter, store.holders(&key)).await
            {
                tracing::warn!(%key, %error, "cannot leave the line after cancellation");
            }
        });
    }
}

/// The release a dropped guard sends, `None` when it holds nothing to release.
async fn store_release<St: LockStore>(
    store: &St,
    key: &LockKey,
    token: LockToken,
    armed: Armed,
) -> Option<Result<bool, crate::error::StoreError>> {
    match armed {
        Armed::Off => None,
        Armed::Acquiring | Armed::Holding => {
            Some(store.release_holding(key, token, store.holders(key), None).await)
        }
    }
}
