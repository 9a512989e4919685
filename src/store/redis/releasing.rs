//! Releases on their way, by key: what keeps a process's requests from meeting their own
//! finished locks.
//!
//! The lock layer sends a release before the response returns and leaves its answer to the
//! background; on one connection it reaches the server ahead of whatever the caller sends
//! next. Not always: when the connection's queue is full, the release goes out later, from its
//! task. So the Redis store counts its releases on their way, and an acquire sent while one of
//! its key was on its way, that finds the key held, waits for that release to be answered and
//! tries once more: a caller's request never meets the lock of its own finished one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::key::LockKey;

/// The releases of one store (and its clones) that were sent and not yet answered.
#[derive(Debug, Default)]
pub(crate) struct Releasing {
    by_key: Mutex<HashMap<LockKey, InFlight>>,
}

#[derive(Debug)]
struct InFlight {
    count: usize,
    /// Made by the first acquire that waits: most releases are never waited for, and cost
    /// no allocation of it.
    done: Option<Arc<Notify>>,
}

impl Releasing {
    /// Counts a release of `key` as on its way until the returned mark is dropped.
    pub(crate) fn start(self: &Arc<Self>, key: &LockKey) -> ReleaseMark {
        self.lock()
            .entry(key.clone())
            .or_insert(InFlight { count: 0, done: None })
            .count += 1;
        ReleaseMark {
            releasing: Arc::clone(self),
            key: key.clone(),
        }
    }

    /// Whether a release of `key` is on its way.
    pub(crate) fn pending(&self, key: &LockKey) -> bool {
        self.lock().contains_key(key)
    }

    /// Waits until no release of `key` is on its way; `true` if one was.
    pub(crate) async fn settled(&self, key: &LockKey) -> bool {
        let done = match self.lock().get_mut(key) {
            Some(in_flight) => Arc::clone(in_flight.done.get_or_insert_with(Arc::default)),
            None => return false,
        };
        let notified = done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Settled between the look above and the registration (the key's entry gone, or
        // made anew by a later release, which is not waited for): nothing to wait for.
        let still = self
            .lock()
            .get(key)
            .and_then(|in_flight| in_flight.done.as_ref())
            .is_some_and(|same| Arc::ptr_eq(same, &done));
        if still {
            notified.await;
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LockKey, InFlight>> {
        self.by_key
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A release on its way; dropped once it is answered (or given up).
pub(crate) struct ReleaseMark {
    releasing: Arc<Releasing>,
    key: LockKey,
}

impl Drop for ReleaseMark {
    fn drop(&mut self) {
        let mut by_key = self.releasing.lock();
        if let Some(in_flight) = by_key.get_mut(&self.key) {
            in_flight.count -= 1;
            if in_flight.count == 0
                && let Some(in_flight) = by_key.remove(&self.key)
                && let Some(done) = in_flight.done
            {
                done.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_acquire_waits_for_the_releases_of_its_key_only() {
        let releasing = Arc::new(Releasing::default());
        let (a, b) = (LockKey::new("a").unwrap(), LockKey::new("b").unwrap());
        assert!(!releasing.settled(&a).await, "nothing on its way");
        let first = releasing.start(&a);
        let second = releasing.start(&a);
        assert!(
            !releasing.settled(&b).await,
            "another key's release is not waited for"
        );
        let waiting = tokio::spawn({
            let releasing = Arc::clone(&releasing);
            async move { releasing.settled(&a).await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one release still on its way");
        drop(second);
        assert!(waiting.await.unwrap());
    }
}
